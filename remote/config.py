"""The laptop's config file and state file.

The config file is ``$XDG_CONFIG_HOME/gpurent/config.toml`` (default
``~/.config/gpurent/config.toml``): provider API keys (``[vast]`` ``api_key`` ...) and
per-host entries (``[hosts."HOST"]``: ``provider``, ``instance``, ``python``). It holds
keys, so it is refused while group or others can access it.

The state file is ``$XDG_STATE_HOME/gpurent/boxes.json`` (default
``~/.local/state/gpurent/boxes.json``): what the laptop remembers per box between
connections (the python bootstrap chose there), keyed by the box's host key.

The data directory (``$GPURENT_DATA_DIR``, default ``~/.local/share/gpurent``) holds the
pull ledger and ``hub-repos.json``: the Hub repositories this laptop pushed a run to or
launched one with (``hub=``). Those, and the ones under ``[hub] repos`` in the config
file, are the user's own: only a copy in one of them counts as "safe on the Hub"
(``hub_repos``); a repository a box names in its ``hub.json`` is a claim.
"""

from __future__ import annotations

import json
import os
import stat
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from remote.fields import obj
from trainer import runfiles


class ConfigError(ValueError):
    """The config file cannot be used; the message is one line that says how to fix it."""


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the config file lives."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "gpurent" / "config.toml"


#: The largest config file read.
MAX_CONFIG_BYTES = 1 << 20


def load_config(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The config file as a dict (``{}`` when there is none). Raises ``ConfigError`` when
    group or others can access it, or when it is not valid TOML."""
    target = Path(path) if path is not None else config_path()
    try:
        with open(target, "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise ConfigError(f"refusing to read {target}: it holds API keys and is "
                                  f"readable by group or others (mode "
                                  f"{stat.S_IMODE(mode):o}); run: chmod 600 {target}")
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {target}: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{target} is over {MAX_CONFIG_BYTES >> 20} MiB: not a config "
                          "file (keys and a few tables are a few hundred bytes)")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{target} is not valid TOML: {' '.join(str(exc).split())}") from None


def section(config: Mapping[str, Any], *keys: str) -> Mapping[str, Any]:
    """``config[k1][k2]...``, ``{}`` where a level is missing or not a table."""
    for key in keys:
        value = config.get(key) if isinstance(config, Mapping) else None
        config = value if isinstance(value, Mapping) else {}
    return config


def host_python(host: str | None, path: str | os.PathLike[str] | None = None) -> str | None:
    """``python`` under ``[hosts."HOST"]``: the interpreter to use on that box, or ``None``.
    Raises ``ConfigError`` for a value that is not an absolute path."""
    if not host:
        return None
    value = section(load_config(path), "hosts", host).get("python")
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/"):
        raise ConfigError(f"[hosts.\"{host}\"] python in {path or config_path()} must be an "
                          "absolute path on the box, e.g. \"/opt/conda/bin/python\"")
    return value


def state_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the laptop's memory of boxes lives."""
    env = os.environ if env is None else env
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                     "state")
    return Path(base) / "gpurent" / "boxes.json"


def remembered(box: str) -> dict[str, Any]:
    """What was remembered about ``box`` (``{}`` when nothing, or the file is unreadable)."""
    try:
        data = json.loads(state_path().read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    entry = data.get(box) if isinstance(data, dict) else None
    return entry if isinstance(entry, dict) else {}


def remember(box: str, **facts: Any) -> None:
    """Merge ``facts`` into what is remembered about ``box`` (written atomically, 0600)."""
    path = state_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        data = {}
    data = data if isinstance(data, dict) else {}
    entry = obj(data.get(box))
    data[box] = {**entry, **facts}
    path.parent.mkdir(parents=True, exist_ok=True)
    runfiles.atomic_write_json(path, data)
    os.chmod(path, 0o600)


#: The file in the data directory that lists the Hub repositories the user configured.
HUB_REPOS_FILE = "hub-repos.json"


def data_dir() -> Path:
    """``$GPURENT_DATA_DIR`` or ``~/.local/share/gpurent``."""
    env = os.environ.get("GPURENT_DATA_DIR")
    return Path(env).expanduser() if env else Path("~/.local/share/gpurent").expanduser()


def _remembered_repos() -> list[str]:
    try:
        data = json.loads((data_dir() / HUB_REPOS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return []
    repos = data.get("repos") if isinstance(data, dict) else None
    return [r for r in repos if isinstance(r, str)] if isinstance(repos, list) else []


def remember_hub_repo(repo: str) -> None:
    """Add ``repo`` to the Hub repositories the user configured (written atomically)."""
    known = _remembered_repos()
    if repo in known:
        return
    path = data_dir() / HUB_REPOS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    runfiles.atomic_write_json(path, {"repos": [*known, repo]})


def hub_repos(path: str | os.PathLike[str] | None = None) -> tuple[str, ...]:
    """The user's own Hub repositories: those this laptop pushed to or launched a run
    with, and ``[hub] repos`` in the config file. ``ConfigError`` for a malformed entry."""
    configured = section(load_config(path), "hub").get("repos", [])
    if isinstance(configured, str):
        configured = [configured]
    if not isinstance(configured, list) or not all(isinstance(r, str) for r in configured):
        raise ConfigError(f"[hub] repos in {path or config_path()} must be a list of "
                          "repository ids (\"ORG/NAME\")")
    return tuple(dict.fromkeys([*_remembered_repos(), *(r.strip() for r in configured
                                                        if r.strip())]))
