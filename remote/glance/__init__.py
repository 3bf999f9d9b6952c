"""A glance from a phone: a read-only web page of every instance and every run the
laptop knows, served by the standard library behind a token. ``run``: start it, its URL;
``record``: the running page's link (the TUI's key reads it); ``server``: the HTTP side,
GET only, strict CSP; ``gather``: the background pass it answers from; ``boxruns``: one
box's runs read on one connection; ``shape``: what an answer may hold, bounded."""

from typing import TYPE_CHECKING

from trainer._exports import typed_exports

if TYPE_CHECKING:  # the face, read by type checkers and by typed_exports
    from remote.glance.gather import EVERY, MIN_EVERY, Gatherer, Snapshot
    from remote.glance.record import record_path, running_url
    from remote.glance.run import (
        LISTEN,
        PORT,
        Glance,
        is_loopback,
        new_token,
        open_glance,
        page_url,
    )
    from remote.glance.server import CSP, GlanceServer

__all__, __getattr__ = typed_exports(__name__, __file__)
