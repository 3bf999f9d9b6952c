"""Which python on a box runs the trainer: every candidate is asked, in one round trip,
for its version, whether it has torch and its ``sys.prefix``; the one that can train wins.

Candidates are what rented images put where: ``python3`` and ``python`` on PATH, the
active virtualenv or conda env, conda's base, the usual venv folders, then the system's.
The choice, in order: ``--python`` (or ``[hosts."HOST"] python`` in the config file);
the python remembered for this box when it still can train (or none can); else the
first candidate >= 3.9 that has torch; else the first >= 3.9 (and a note that no python
there can train).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from remote.transport.base import TransportError

#: The oldest python the box side runs on (the oldest current torch supports).
MIN_PYTHON = (3, 9)
#: Where python is looked for, in order; shell words (``$HOME`` and friends expand).
CANDIDATES = (
    "python3", "python",
    "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}", "${CONDA_PREFIX:+$CONDA_PREFIX/bin/python}",
    "/opt/conda/bin/python", "$HOME/miniconda3/bin/python", "$HOME/anaconda3/bin/python",
    "/opt/miniconda3/bin/python", "$HOME/venv/bin/python", "$HOME/.venv/bin/python",
    "/opt/venv/bin/python", "/venv/bin/python", "/workspace/venv/bin/python",
    "/workspace/.venv/bin/python", "python3.13", "python3.12", "python3.11", "python3.10",
    "python3.9", "/usr/local/bin/python3", "/usr/bin/python3",
)
#: Run by each candidate (any python, 2.7 included, must get through it or fail cleanly):
#: version, torch (its version, "?" when present without metadata, "-" when absent), prefix.
_INFO = """import sys
t = "-"
try:
    import importlib.util as u
    if u.find_spec("torch"):
        t = "?"
        from importlib.metadata import version
        t = version("torch")
except Exception:
    pass
v = sys.version_info
print("%d.%d.%d\\t%s\\t%s" % (v[0], v[1], v[2], t, sys.prefix))"""


@dataclass(frozen=True)
class BoxPython:
    """One python found on the box."""

    #: As the candidate was written (``python3``, a path given with ``--python``).
    asked: str
    #: Its absolute path on the box.
    path: str
    version: str
    #: The torch version, ``"?"`` when torch is there without metadata, ``""`` when absent.
    torch: str
    prefix: str

    @property
    def version_tuple(self) -> tuple[int, ...]:
        """``(3, 10, 13)``; ``()`` when the version is not numbers."""
        try:
            return tuple(int(x) for x in self.version.split("."))
        except ValueError:
            return ()

    def describe(self) -> str:
        """``python 3.10.13 at /usr/bin/python3 (torch 2.13.0)`` or ``(no torch)``."""
        torch = f"torch {self.torch}" if self.torch else "no torch"
        return f"python {self.version} at {self.path} ({torch})"


def probe_script(first: tuple[str, ...] = ()) -> str:
    """Shell that prints ``python<TAB>asked<TAB>path<TAB>version<TAB>torch<TAB>prefix`` for
    each candidate that runs (``first``: paths to ask before the usual ones)."""
    words = " ".join([*(shlex.quote(p) for p in first), *(f'"{c}"' for c in CANDIDATES)])
    return (f"i={shlex.quote(_INFO)}; for p in {words}; do "
            '[ -n "$p" ] || continue; path=$(command -v "$p" 2>/dev/null) || continue; '
            'info=$("$path" -c "$i" 2>/dev/null) || continue; '
            'printf "python\\t%s\\t%s\\t%s\\n" "$p" "$path" "$info"; done')


def parse_probe(lines: list[str]) -> list[BoxPython]:
    """The pythons in the probe's output, in the order they were asked."""
    found = []
    for line in lines:
        parts = line.split("\t")
        if parts[0] == "python" and len(parts) == 6 and parts[2].startswith("/"):
            torch = "" if parts[4] == "-" else parts[4]
            found.append(BoxPython(parts[1], parts[2], parts[3], torch, parts[5]))
    return found


def choose(found: list[BoxPython], label: str, *, forced: str | None = None,
           remembered: str | None = None, notes: list[str] | None = None) -> BoxPython:
    """The python to run the trainer with (see the module doc). Raises ``TransportError``
    with one line when ``forced`` is not a python >= 3.9 or when there is none at all."""
    need = ".".join(map(str, MIN_PYTHON))
    if forced:
        match = next((p for p in found if p.asked == forced), None)
        if match is None or match.version_tuple < MIN_PYTHON:
            raise TransportError(f"{forced} on {label} is not a python >= {need}")
        return match
    usable, prefixes = [], set()
    for p in found:  # one per environment: python3 and python are often the same
        if p.version_tuple >= MIN_PYTHON and p.prefix not in prefixes:
            prefixes.add(p.prefix)
            usable.append(p)
    if not usable:
        seen = ", ".join(sorted({f"{p.path} ({p.version})" for p in found})) or "none"
        raise TransportError(f"no python >= {need} on {label} (found: {seen}); install one "
                             "or pass --python PATH")
    trains = [p for p in usable if p.torch]
    again = next((p for p in usable if p.path == remembered), None)
    if again is not None and (again.torch or not trains):
        return again
    chosen = (trains or usable)[0]
    if not chosen.torch and notes is not None:
        notes.append(f"no python on {label} has torch (found: "
                     f"{', '.join(f'{p.path} {p.version}' for p in usable)}); training "
                     "needs it: install it, or pass --python PATH")
    return chosen
