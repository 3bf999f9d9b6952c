"""Following one run live from the laptop (the laptop half of ``trainer.watch``): the
``Watcher`` thread, its typed events, and the caps on what a box may send."""

from typing import TYPE_CHECKING

from trainer._exports import typed_exports

if TYPE_CHECKING:  # the face, read by type checkers and by typed_exports
    from remote.watch.events import (
        ChosenEvent,
        ConnectionEvent,
        GpuEvent,
        GpuSample,
        GuardEvent,
        HostEvent,
        HubEvent,
        LogEvent,
        MetricsEvent,
        RunsEvent,
        StatusEvent,
        WatchEvent,
        WeightsEvent,
    )
    from remote.watch.start import LOG_TAIL_BYTES, SILENCE_TIMEOUT, FollowOptions, follow_words
    from remote.watch.watcher import Watcher

__all__, __getattr__ = typed_exports(__name__, __file__)
