"""The launch form's probes: short profiles that the laptop starts, and ends when it no
longer needs them (the form closed, the run launched).

A probe writes into a private per-user directory (``<cache>/probes``, mode 0700, owned
by this user, never a symlink) under a name the laptop drew at random (``ID``, 16 to 64
hex digits): ``ID.json`` the report, ``ID.run`` the leash. The leash exists while the
probe runs; ``trainer profile --cancel ID`` removes it, and the probe, which looks at it
twice a second, ends at once with exit code :data:`CANCELLED`; the cancel returns once
the probe is gone (its pid is in the leash), so that the run launched next has the
machine to itself. A cancel that comes before
the probe made its leash leaves ``ID.cancel`` instead, which the probe heeds the same
way (the laptop may end a probe that has only just been started). Files older than a day
are removed when a probe starts. A shared ``/tmp`` and a
name chosen from the run's name are never used: another user's file there made the probe
fail, and a predictable name there is a symlink hazard. Standard library only.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import re
import stat
import threading
import time
from pathlib import Path

from trainer.engines import cache_dir

#: Exit code of a probe ended by ``--cancel`` (mirrored in ``remote.runs.checks``).
CANCELLED = 3
#: What a probe id looks like: drawn by the laptop with ``secrets.token_hex``.
PROBE_ID = re.compile(r"[0-9a-f]{16,64}")
#: Seconds between two looks at the leash.
LEASH_POLL = 0.5
#: Seconds after which a probe's files are removed (when another probe starts).
KEEP_SECONDS = 86400.0
#: Seconds ``cancel`` waits for the probe to be gone (its loader workers included), so
#: that what starts next (the run, a new probe) does not share the machine with it.
EXIT_WAIT = 20.0
#: Seconds a cancelled probe's main thread has to end after the interrupt before the
#: process ends itself: the interrupt waits for Python code, and one CPU step of a large
#: model runs seconds in C (nothing of a probe is worth keeping).
EXIT_GRACE = 3.0


class ProbeDirError(OSError):
    """The probes directory is not private to this user (one-line message)."""


def probe_dir(root: Path | None = None) -> Path:
    """``<cache>/probes``, created mode 0700; refused when it is a symlink, not a
    directory, or not owned by this user. Group or world access is taken away."""
    folder = (root if root is not None else cache_dir()) / "probes"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ProbeDirError(f"{folder} is not a directory")
    if st.st_uid != os.getuid():
        raise ProbeDirError(f"{folder} belongs to another user")
    if st.st_mode & 0o077:
        os.chmod(folder, 0o700)
    return folder


def probe_paths(probe_id: str, root: Path | None = None) -> tuple[Path, Path]:
    """``(report, leash)`` of probe ``probe_id``; ``ValueError`` for a malformed id."""
    if not PROBE_ID.fullmatch(probe_id):
        raise ValueError(f"probe id {probe_id!r}: expected 16 to 64 hex digits")
    folder = probe_dir(root)
    return folder / f"{probe_id}.json", folder / f"{probe_id}.run"


def _tombstone(leash: Path) -> Path:
    return leash.with_suffix(".cancel")


def prune(folder: Path, now: float, keep: float = KEEP_SECONDS) -> None:
    """Remove the probe files in ``folder`` older than ``keep`` seconds."""
    for entry in os.scandir(folder):
        try:
            if entry.is_file(follow_symlinks=False) and \
                    now - entry.stat(follow_symlinks=False).st_mtime > keep:
                os.unlink(entry.path)
        except OSError:
            pass


class Leash:
    """Held while a probe runs: creates the leash file (never through a symlink) and
    interrupts the main thread once the file is gone or a cancel left its tombstone
    (``--cancel``); ``cut`` says so. A main thread still busy ``grace`` seconds later
    (inside one long C call) is not waited for: the process exits with
    :data:`CANCELLED`."""

    def __init__(self, path: Path, poll: float = LEASH_POLL,
                 grace: float = EXIT_GRACE) -> None:
        self.path = path
        self.poll = poll
        self.grace = grace
        self.cut = False
        self._done = threading.Event()
        prune(path.parent, time.time())
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags, 0o600)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)
        self._thread = threading.Thread(target=self._watch, daemon=True, name="probe-leash")
        self._thread.start()

    def _gone(self) -> bool:
        return not os.path.lexists(self.path) or os.path.lexists(_tombstone(self.path))

    def _watch(self) -> None:
        while not self._done.wait(self.poll):
            if self._gone():
                self.cut = True
                _thread.interrupt_main()
                if not self._done.wait(self.grace):
                    self.release()  # no tombstone left behind by the exit
                    os._exit(CANCELLED)
                return

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` (``cut``) now when the probe was cancelled
        already, before it made its leash."""
        if self._gone():
            self.cut = True
            raise KeyboardInterrupt

    def release(self) -> None:
        """The probe ended: stop watching, remove the leash and any tombstone."""
        self._done.set()
        for path in (self.path, _tombstone(self.path)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _leash_pid(leash: Path) -> int | None:
    try:
        with open(leash, "rb") as fh:
            text = fh.read(32).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (or is a zombie, its work done)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[:1] in ([b"Z"], [b"X"])
    except OSError:
        return True


def cancel(probe_id: str, root: Path | None = None, wait: float = EXIT_WAIT) -> bool:
    """End probe ``probe_id``: remove its leash (and leave its tombstone, in case it has
    not made its leash yet), then wait up to ``wait`` seconds for it to be gone. Whether
    it was running."""
    _report, leash = probe_paths(probe_id, root)
    pid = _leash_pid(leash)
    try:
        os.unlink(leash)
        running = True
    except FileNotFoundError:
        running = False
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    os.close(os.open(_tombstone(leash), flags, 0o600))
    deadline = time.monotonic() + wait
    while pid is not None and pid != os.getpid() and not _gone(pid) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    return running
