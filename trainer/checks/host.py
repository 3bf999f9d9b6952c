"""Host checks for preflight: disk against the need, RAM, CPUs, /dev/shm, HF_HOME.

Standard library first: psutil is used when present and ``/proc`` / ``os`` otherwise,
because a fresh box may not have psutil yet. The mount-table parsing is a pure function
(``parse_mountinfo``) so the persistence rule is tested with sample tables.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Disk needed = (data + checkpoints) * this.
DISK_HEADROOM = 1.3
#: Checkpoint budget when none is given: last + best + a few snapshots of a mid-size
#: detector with optimizer state.
DEFAULT_CHECKPOINT_BYTES = 2 * 10**9
#: Below this, DataLoader workers that pass batches through shared memory die with
#: "Bus error" (Docker's default /dev/shm is 64 MB).
MIN_SHM_BYTES = 1 * 2**30

#: Filesystems that live in RAM: gone at reboot.
RAM_FILESYSTEMS = frozenset({"tmpfs", "ramfs", "devtmpfs"})
#: Filesystems of a container's writable layer: gone when the container is recreated.
CONTAINER_ROOT_FILESYSTEMS = frozenset({"overlay", "overlayfs", "aufs", "fuse-overlayfs"})


def existing_ancestor(path: Path) -> Path:
    """``path`` itself when it exists, else its nearest existing parent."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def tree_bytes(path: Path) -> int:
    """Total size of the files under ``path`` (symlinked files counted once each by size,
    symlinked directories not followed)."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def disk_report(project: Path, data_bytes: int, checkpoint_bytes: int) -> dict[str, Any]:
    """Free and total bytes at ``project`` (or its nearest existing parent) and the need."""
    where = existing_ancestor(project)
    usage = shutil.disk_usage(where)
    need = int((data_bytes + checkpoint_bytes) * DISK_HEADROOM)
    return {
        "path": str(where),
        "free_bytes": usage.free,
        "total_bytes": usage.total,
        "data_bytes": data_bytes,
        "checkpoint_bytes": checkpoint_bytes,
        "need_bytes": need,
        "enough": usage.free >= need,
    }


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return None


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` -> {field: bytes}."""
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            scale = 1024 if len(parts) > 1 and parts[1].lower() == "kb" else 1
            out[key.strip()] = int(parts[0]) * scale
    return out


def cgroup_memory_limit() -> int | None:
    """The cgroup (v2, else v1) memory limit in bytes, or ``None`` when unlimited."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        text = _read(path)
        if text is None:
            continue
        text = text.strip()
        # v1 writes a huge number (page-rounded 2**63) for "no limit".
        if text.isdigit() and int(text) < 2**60:
            return int(text)
        return None
    return None


def memory_report() -> dict[str, Any]:
    """Total and available RAM (psutil, else /proc/meminfo), the cgroup limit and the size
    of /dev/shm."""
    total = available = None
    try:
        import psutil

        vm = psutil.virtual_memory()
        total, available = int(vm.total), int(vm.available)
    except ImportError:
        info = parse_meminfo(_read("/proc/meminfo") or "")
        total, available = info.get("MemTotal"), info.get("MemAvailable")
    shm = None
    if os.path.isdir("/dev/shm"):
        try:
            shm = shutil.disk_usage("/dev/shm").total
        except OSError:
            shm = None
    return {"total_bytes": total, "available_bytes": available,
            "limit_bytes": cgroup_memory_limit(), "shm_bytes": shm}


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 ``cpu.max`` (``"200000 100000"`` -> 2.0; ``"max 100000"`` -> None)."""
    parts = text.split()
    if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit() and int(parts[1]) > 0:
        return int(parts[0]) / int(parts[1])
    return None


def cpu_report() -> dict[str, Any]:
    """Logical CPUs, those this process may use (affinity) and the cgroup quota in CPUs."""
    try:
        usable: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    quota = parse_cpu_max(_read("/sys/fs/cgroup/cpu.max") or "")
    if quota is None:
        q = _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
        p = _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
        if q and p and q.strip().isdigit() and p.strip().isdigit() and int(p) > 0:
            quota = int(q) / int(p)
    return {"count": os.cpu_count(), "usable": usable, "quota": quota}


# --------------------------------------------------------------------------- HF_HOME


@dataclass(frozen=True)
class Mount:
    """One row of ``/proc/self/mountinfo``."""

    mount_point: str
    fstype: str
    source: str


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal (\040 ...).
    return field.replace("\\040", " ").replace("\\011", "\t").replace(
        "\\012", "\n").replace("\\134", "\\")


def parse_mountinfo(text: str) -> list[Mount]:
    """Parse ``/proc/self/mountinfo`` (fields: id parent major:minor root mount-point
    options [optional...] - fstype source super-options)."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or not tail:
            continue
        mounts.append(Mount(_unescape(fields[4]), tail[0], tail[1] if len(tail) > 1 else ""))
    return mounts


def mount_of(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount holding ``path`` (an absolute, resolved path): the longest mount point
    that is a prefix of it; the later row wins on ties (it is mounted over the earlier)."""
    best: Mount | None = None
    for mount in mounts:
        mp = mount.mount_point.rstrip("/") or "/"
        inside = path == mp or mp == "/" or path.startswith(mp + "/")
        if inside and (best is None or len(mp) >= len(best.mount_point.rstrip("/") or "/")):
            best = mount
    return best


def judge_persistence(mount: Mount | None) -> tuple[bool | None, str]:
    """Whether files on ``mount`` survive the instance being stopped and started.

    The rule: RAM filesystems (tmpfs) are not persistent; the container's root layer
    (``/`` on overlay/aufs) is not persistent either, since providers recreate the
    container on restart (RunPod's "container disk" is wiped on stop); a separately
    mounted filesystem (``/workspace``, a network volume, a bind mount) is persistent; a
    plain root filesystem (a VM's disk, e.g. Lambda) lives as long as the instance."""
    if mount is None:
        return None, "mount table not readable"
    if mount.fstype in RAM_FILESYSTEMS:
        return False, f"{mount.mount_point} is {mount.fstype}, held in RAM"
    if mount.mount_point == "/":
        if mount.fstype in CONTAINER_ROOT_FILESYSTEMS:
            return False, (f"on the container's root layer ({mount.fstype}), which is lost "
                           "when the container is recreated; use the mounted volume "
                           "(e.g. /workspace)")
        return True, (f"on the root filesystem ({mount.fstype}), a real disk that lives as "
                      "long as the instance")
    return True, f"on the mounted volume {mount.mount_point} ({mount.fstype})"


def default_hf_home(env: dict[str, str]) -> str:
    """Where huggingface_hub keeps its cache when HF_HOME is not set."""
    xdg = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "huggingface")


def hf_home_report(env: dict[str, str] | None = None,
                   mountinfo: str | None = None) -> dict[str, Any]:
    """Whether HF_HOME is set and whether it (or the default cache) is on a persistent
    volume, by the rule of ``judge_persistence``."""
    env = dict(os.environ) if env is None else env
    is_set = bool(env.get("HF_HOME"))
    path = env["HF_HOME"] if is_set else default_hf_home(env)
    # realpath resolves the symlinks that exist and keeps the rest: a path not created
    # yet belongs to the mount of its longest mount-point prefix all the same.
    resolved = os.path.realpath(os.path.abspath(os.path.expanduser(path)))
    text = _read("/proc/self/mountinfo") if mountinfo is None else mountinfo
    mount = mount_of(resolved, parse_mountinfo(text or ""))
    persistent, reason = judge_persistence(mount)
    return {
        "set": is_set,
        "path": path,
        "mount": mount.mount_point if mount else None,
        "fstype": mount.fstype if mount else None,
        "persistent": persistent,
        "reason": reason,
    }
