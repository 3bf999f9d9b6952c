"""The gate: one exec that runs a box-side tool (``trainer follow``, ``trainer runs``)
whatever state the box is in, so a connection costs one round trip for its first answer.

The shell script checks that this package's version is installed (its ``.complete``
marker) and that the python the laptop remembers for the box (or was told to use) is
there, and then ``exec``s the tool. When the laptop does not remember the box holding
this version, the package's tarball rides along on the exec's stdin and is unpacked
first (into a staging directory, marker last, moved into place). When the python is
unknown or gone, the script prints :data:`MARK` and the bootstrap probe (home, marker,
the python candidates) instead; the laptop then chooses and bootstraps with that answer
(``remote.bootstrap.bootstrap(probe=...)``) and runs the tool again: two execs, once per
box and laptop. See ``remote.connect.Connector.command``.
"""

from __future__ import annotations

import functools
import shlex

from remote.bootstrap import (
    CACHE_DIR,
    LAUNCHER_NAME,
    MARKER,
    boot_probe,
    install_name,
    make_tarball,
    package_digest,
    package_files,
)

#: The first stdout line of a gate that could not start the tool.
MARK = "GPURENT-BOOT"


@functools.cache
def tarball() -> bytes:
    """The package as uploaded (made once per process)."""
    return make_tarball(package_files())


def script(words: list[str], python: str | None, *, ship: bool,
           merge_stderr: bool = False) -> str:
    """The gate's shell script for ``python -m trainer WORDS`` (``words`` start with
    ``-m``). With ``ship`` the tarball is expected on stdin."""
    q = shlex.quote
    name, digest = install_name(), package_digest()
    base = f'"$HOME"/{CACHE_DIR}/{name}'
    unpack = (f't={base}.$$.partial; rm -rf "$t"; mkdir -p "$t" && tar -xzf - -C "$t" && '
              f"printf '%s\\n' {q(digest)} > \"$t\"/{MARKER} && "
              f'if [ -f {base}/{MARKER} ]; then rm -rf "$t"; '
              f'else rm -rf {base}; mv "$t" {base}; fi || rm -rf "$t"')
    lines = [
        "exec 2>&1" if merge_stderr else ":",
        f'mkdir -p "$HOME"/{CACHE_DIR}',
        f"if [ ! -f {base}/{MARKER} ]; then {unpack if ship else ':'}; "
        f"{'elif :; then cat > /dev/null; ' if ship else ''}fi",
        f"p={q(python or '')}",
        f'if [ -n "$p" ] && [ -x "$p" ] && [ -f {base}/{MARKER} ]; then '
        f"PYTHONPATH={base}; export PYTHONPATH; "
        f'exec "$p" {base}/{LAUNCHER_NAME} {shlex.join(words)}; fi',
        f"echo {MARK}",
        boot_probe(python),
    ]
    return "\n".join(lines)


def booting(output: bytes) -> str | None:
    """The probe's answer when ``output`` is a gate's "cannot start" (``None`` when the
    tool ran). Lines before the mark (a chatty login shell) are ignored."""
    mark = MARK.encode() + b"\n"
    at = 0 if output.startswith(mark) else output.find(b"\n" + mark) + 1
    if at == 0 and not output.startswith(mark):
        return None
    return output[at + len(mark):].decode("utf-8", errors="replace")
