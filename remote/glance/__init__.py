"""A glance from a phone: a read-only web page of every instance and every run the
laptop knows, served by the standard library behind a token. ``run``: start it, its URL;
``record``: the running page's link (the TUI's key reads it); ``server``: the HTTP side,
GET only, strict CSP; ``gather``: the background pass it answers from; ``boxruns``: one
box's runs read on one connection; ``shape``: what an answer may hold, bounded."""

from trainer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "run": ["LISTEN", "PORT", "Glance", "is_loopback", "new_token", "open_glance",
            "page_url"],
    "record": ["record_path", "running_url"],
    "gather": ["EVERY", "MIN_EVERY", "Gatherer", "Snapshot"],
    "server": ["CSP", "GlanceServer"],
})
