"""Which provider and instance is this box? Read from the environment the provider sets
in the container, falling back to ``/proc/1/environ`` (an SSH session often lacks it).

Only the variables named here are ever read from ``/proc/1/environ``; nothing else in it
(it may hold other secrets) is kept or passed on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: Variables that identify the instance, in the order they are trusted.
ID_VARIABLES = ("CONTAINER_ID", "VAST_CONTAINERLABEL", "RUNPOD_POD_ID")

#: The API key each provider puts inside its own instances (Vast's manages that instance
#: only; RunPod's scope is undocumented). Lambda Cloud puts none.
BOX_KEY_VARIABLES = {"vast": "CONTAINER_API_KEY", "runpod": "RUNPOD_API_KEY"}


def instance_from_env(env: Mapping[str, str]) -> tuple[str, str] | None:
    """``(provider, instance_id)`` from identifying variables, or ``None``.

    Vast sets ``CONTAINER_ID`` (a number) and ``VAST_CONTAINERLABEL`` (``C.12345``);
    RunPod sets ``RUNPOD_POD_ID``."""
    cid = (env.get("CONTAINER_ID") or "").strip()
    if cid.isdigit():
        return "vast", cid
    label = (env.get("VAST_CONTAINERLABEL") or "").strip()
    if label.startswith("C.") and label[2:].isdigit():
        return "vast", label[2:]
    pod = (env.get("RUNPOD_POD_ID") or "").strip()
    if pod and pod.replace("-", "").replace("_", "").isalnum():
        return "runpod", pod
    return None


def read_environ_file(path: str, names: tuple[str, ...]) -> dict[str, str]:
    """The variables ``names`` from a NUL-separated environ file (``{}`` when unreadable)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(1 << 20)
    except OSError:
        return {}
    wanted = set(names)
    out: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        name = key.decode("utf-8", errors="replace")
        if sep and name in wanted and name not in out:
            out[name] = value.decode("utf-8", errors="replace")
    return out


def box_environment(names: tuple[str, ...], *, environ: Mapping[str, str] | None = None,
                    proc_environ: str = "/proc/1/environ") -> dict[str, str]:
    """``names`` from this process's environment, else from PID 1's (the container's)."""
    env = os.environ if environ is None else environ
    out = {n: env[n] for n in names if env.get(n)}
    missing = tuple(n for n in names if n not in out)
    if missing:
        out.update({k: v for k, v in read_environ_file(proc_environ, missing).items() if v})
    return out


def detect_instance(*, environ: Mapping[str, str] | None = None,
                    proc_environ: str = "/proc/1/environ") -> tuple[str, str] | None:
    """``(provider, instance_id)`` of the box this runs on, or ``None``. The session's
    environment is asked first, then PID 1's (the container's)."""
    env = os.environ if environ is None else environ
    return instance_from_env(env) or instance_from_env(
        read_environ_file(proc_environ, ID_VARIABLES))


def box_api_key(provider: str, *, environ: Mapping[str, str] | None = None,
                proc_environ: str = "/proc/1/environ") -> str | None:
    """The API key the provider placed in this instance (Vast ``CONTAINER_API_KEY``,
    RunPod ``RUNPOD_API_KEY``), or ``None`` (always for Lambda Cloud, which puts none)."""
    name = BOX_KEY_VARIABLES.get(provider)
    if not name:
        return None
    return box_environment((name,), environ=environ, proc_environ=proc_environ).get(name)


def shell_probe() -> str:
    """A POSIX shell snippet printing ``NAME=value`` for the identifying variables from the
    session environment, then from ``/proc/1/environ``: run over SSH by the laptop. Only
    these names leave the box."""
    names = " ".join(ID_VARIABLES)
    pattern = "|".join(ID_VARIABLES)
    return (f'for n in {names}; do v=$(printenv "$n") && printf "%s=%s\\n" "$n" "$v"; done; '
            f"tr '\\000' '\\n' 2>/dev/null < /proc/1/environ | grep -E '^({pattern})=' "
            "|| true")


def parse_probe(output: str) -> dict[str, str]:
    """The ``NAME=value`` lines of ``shell_probe``'s output; the first value of a name wins."""
    out: dict[str, str] = {}
    for line in output.splitlines():
        name, sep, value = line.partition("=")
        if sep and name in ID_VARIABLES and name not in out and value.strip():
            out[name] = value.strip()
    return out
