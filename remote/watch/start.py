"""The follower's command line, made in one place: ``follow_words`` is what the watcher
starts with (resuming where delivery stands) and what ``gpurent-tui`` starts early,
before the UI loads (``tui.main``): the early stream is adopted only when the words
are the very same, so both call this function with the same ``FollowOptions``."""

from __future__ import annotations

from dataclasses import dataclass

#: The box tools' needs, checked by the follower (``hello``'s ``box.missing``).
NEEDS = ("psutil", "huggingface_hub")
#: Bytes of train.log a fresh watch starts with (the pane keeps 5,000 lines); older
#: parts are read on demand (``remote.runs.log``).
LOG_TAIL_BYTES = 512 * 1024
#: Seconds between the follower's looks at the project's runs (it sends what changed).
RUNS_INTERVAL = 8.0


@dataclass(frozen=True)
class Position:
    """Where delivery stands: the next byte of ``train.log`` and ``metrics.jsonl`` with
    the inode each was read from, and the key of the last status delivered."""

    log_offset: int = 0
    log_ino: int | None = None
    metrics_offset: int = 0
    metrics_ino: int | None = None
    status_key: str | None = None


class StartFailed(Exception):
    """The follow command ended without saying hello."""


class NoPython(StartFailed):
    """The gate found no python that can run the follower: poll the files instead."""


#: Seconds without a byte from the box (the follower's heartbeat comes every second)
#: before the link counts as lost: a busy box or laptop can hold a heartbeat up for
#: seconds (dataloaders on every core), and that is not a lost link.
SILENCE_TIMEOUT = 10.0


@dataclass(frozen=True)
class FollowOptions:
    """How a watch follows: the project whose runs it streams too, the follower's poll,
    heartbeat (a third of ``silence_timeout``) and GPU intervals, how often it looks at
    the project's runs, how much of the log's end a fresh start streams (``log_tail``),
    and whether it starts through the gate (``gated``: then the box checks its needs)."""

    project: str | None = None
    poll_interval: float = 0.25
    silence_timeout: float = SILENCE_TIMEOUT
    gpu_interval: float = 2.0
    runs_interval: float = RUNS_INTERVAL
    log_tail: int = 0
    gated: bool = False


def follow_words(run_dir: str | None, options: FollowOptions,
                 position: Position | None = None) -> list[str]:
    """``-m trainer follow ...`` for ``run_dir`` (``None``: the box chooses), resuming
    at ``position`` (default: a fresh start)."""
    at = position or Position()
    words = ["-m", "trainer", "follow", *([run_dir] if run_dir else []),
             "--log-offset", str(at.log_offset),
             "--log-ino", "none" if at.log_ino is None else str(at.log_ino),
             "--metrics-offset", str(at.metrics_offset),
             "--metrics-ino", "none" if at.metrics_ino is None else str(at.metrics_ino),
             "--poll", f"{min(options.poll_interval, 1.0):g}",
             "--heartbeat", f"{max(0.2, min(1.0, options.silence_timeout / 3)):g}",
             "--gpu-interval", f"{options.gpu_interval:g}"]
    if at.status_key is not None:
        words += ["--status-key", at.status_key]
    if options.project:
        words += ["--project", options.project, "--runs-interval",
                  f"{options.runs_interval:g}"]
    if options.log_tail > 0:
        words += ["--log-tail", str(options.log_tail)]
    if options.gated:
        words += ["--needs", ",".join(NEEDS)]
    return words
