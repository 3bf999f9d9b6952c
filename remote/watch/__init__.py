"""Following one run live from the laptop (the laptop half of ``trainer.watch``): the
``Watcher`` thread, its typed events, and the caps on what a box may send."""

from trainer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "watcher": ["Watcher"],
    "start": ["LOG_TAIL_BYTES", "SILENCE_TIMEOUT", "FollowOptions", "follow_words"],
    "events": ["ChosenEvent", "ConnectionEvent", "GpuEvent", "GpuSample", "GuardEvent",
               "HostEvent", "HubEvent", "LogEvent", "MetricsEvent", "RunsEvent",
               "StatusEvent", "WatchEvent", "WeightsEvent"],
})
