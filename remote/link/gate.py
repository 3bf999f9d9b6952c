"""The gate: one exec that runs a box-side tool (``trainer follow``, ``trainer runs``)
whatever state the box is in, so a connection costs one round trip for its first answer.

The shell script checks that this package's version is installed (its ``.complete``
marker) and that the python the laptop remembers for the box (or was told to use) is
there, and then ``exec``s the tool. When the laptop does not remember the box holding
this version, the package's tarball rides along on the exec's stdin and is unpacked
first (into a staging directory, marker last, moved into place). When the laptop knows
no python for the box, the script asks the candidates and picks one as bootstrap would
(the tool's answer names it, and the laptop remembers it). When the python it was told
is gone, or none will do, it prints :data:`MARK` and the bootstrap probe (home, marker,
the python candidates) instead; the laptop then chooses and bootstraps with that answer
(``remote.link.bootstrap.bootstrap(probe=...)``) and runs the tool again. See
``remote.link.connector.Connector.command``.
"""

from __future__ import annotations

import contextlib
import functools
import shlex

from remote import config
from remote.link.bootstrap import (
    CACHE_DIR,
    LAUNCHER_NAME,
    MARKER,
    boot_probe,
    install_name,
    make_tarball,
    package_digest,
    package_files,
)
from remote.link.interpreter import probe_script
from trainer import runfiles
from trainer.version import __version__

#: The first stdout line of a gate that could not start the tool.
MARK = "GPURENT-BOOT"
#: awk over ``remote.link.interpreter.probe_script``'s lines: the python a box the laptop
#: has not met yet runs the tool with, as ``remote.link.interpreter.choose`` picks without
#: a remembered or forced one (the first >= 3.9 with torch, else the first >= 3.9); the
#: follower's hello names it and the laptop remembers it.
_CHOOSE = ('$1 == "python" { split($4, v, "."); ok = v[1] > 3 || (v[1] == 3 && v[2] >= 9); '
           'if (ok && $5 != "-" && t == "") t = $3; if (ok && f == "") f = $3 } '
           'END { print (t != "" ? t : f) }')


@functools.cache
def tarball() -> bytes:
    """The package as uploaded: made once per install of this package and kept beside
    the package hash in the laptop's state directory."""
    path = config.state_path().with_name(f"{install_name()}.tar.gz")
    with contextlib.suppress(OSError):
        return path.read_bytes()
    data = make_tarball(package_files())
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        runfiles.atomic_write_bytes(path, data)
    return data


def script(words: list[str], python: str | None, *, ship: bool,
           merge_stderr: bool = False, name: str | None = None) -> str:
    """The gate's shell script for ``python -m trainer WORDS`` (``words`` start with
    ``-m``). With ``ship`` the tarball is expected on stdin. ``name``: ``install_name()``
    when the caller has it already (it stats every file of the package)."""
    q = shlex.quote
    name = name or f"trainer-{__version__}-{package_digest()}"
    digest = name.rsplit("-", 1)[1]
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
        f'if [ -z "$p" ] && [ -f {base}/{MARKER} ]; then p=$({{ {probe_script()}; }} '
        f"2>/dev/null | awk -F '\t' {q(_CHOOSE)}); fi",
        f'if [ -n "$p" ] && [ -x "$p" ] && [ -f {base}/{MARKER} ]; then '
        f"PYTHONPATH={base}; export PYTHONPATH; "
        f'exec "$p" {base}/{LAUNCHER_NAME} {shlex.join(words)}; fi',
        f"echo {MARK}",
        boot_probe(python, name),
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
