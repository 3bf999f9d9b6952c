"""How a ``remote.watch.watcher.Watcher`` starts its follower (a mixin): the command's words,
resuming where delivery stands, and through the gate (``remote.link.gate``: one exec that
installs, checks and starts it), once more after the bootstrap the gate asks for."""

from __future__ import annotations

import shlex

from remote.transport.base import Transport, TransportError
from trainer.text import one_line

#: The box tools' needs, checked by the follower (``hello``'s ``box.missing``).
NEEDS = ("psutil", "huggingface_hub")


class StartFailed(Exception):
    """The follow command ended without saying hello."""


class NoPython(StartFailed):
    """The gate found no python that can run the follower: poll the files instead."""


class FollowStart:
    """Starting the follower (``self`` is the watcher)."""

    def follow_words(self) -> list[str]:
        """``-m trainer follow ...``, resuming where delivery stands."""
        words = ["-m", "trainer", "follow", *([self.run_dir] if self.run_dir else []),
                 "--log-offset", str(self.log_offset),
                 "--log-ino", "none" if self.log_ino is None else str(self.log_ino),
                 "--metrics-offset", str(self.metrics_offset),
                 "--metrics-ino", "none" if self.metrics_ino is None else str(self.metrics_ino),
                 "--poll", f"{min(self.poll_interval, 1.0):g}",
                 "--heartbeat", f"{max(0.2, min(1.0, self.silence_timeout / 3)):g}",
                 "--gpu-interval", f"{self.gpu_interval:g}"]
        if self.status_key is not None:
            words += ["--status-key", self.status_key]
        if self.project:
            words += ["--project", self.project, "--runs-interval", f"{self.runs_interval:g}"]
        if self.log_tail > 0:
            words += ["--log-tail", str(self.log_tail)]
        if self.gate is not None:
            words += ["--needs", ",".join(NEEDS)]
        return words

    def follow_command(self, transport: Transport) -> str:
        """The shell command that starts the follower on the box, resuming where
        delivery stands. stderr joins stdout so that a failure to start can be told."""
        return f"{transport.trainer_prefix} {shlex.join(self.follow_words())} 2>&1"

    def _follow(self, transport: Transport) -> None:
        """Follow through the gate (once more after a bootstrap), else plainly."""
        if self.gate is None:
            self._follow_once(transport, self.follow_command(transport), None)
            return
        for _ in range(2):
            command, stdin = self.gate.command(transport, self.follow_words(),
                                               merge_stderr=True)
            probe = self._follow_once(transport, command, stdin)
            if probe is None:
                return
            try:
                self.gate.boot(transport, probe)
            except (TransportError, ValueError) as exc:
                raise NoPython(one_line(exc)) from None
            self._close_stream()
        raise StartFailed("the gate asked for a bootstrap twice")
