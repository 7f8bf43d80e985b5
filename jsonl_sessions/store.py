"""SessionStore: the crash-safe JSONL session store, put together.

The core (files, guard, append/load/rewrite/replace) is in core.py; the message-history
API and pagination in history.py; metadata and lifecycle in metadata.py. Each part is a
class built on :class:`StoreCore`; this one joins them.
"""

from __future__ import annotations

from .core import Durability, MessageLike
from .history import HistoryMethods
from .metadata import MetadataMethods


class SessionStore(HistoryMethods, MetadataMethods):
    """A directory of sessions, each a JSONL transcript plus a sidecar.

    ``SessionStore(root, *, durability="fsync", lock_timeout=30.0,
    max_message_bytes=16 MiB, clock=None)``: see :class:`jsonl_sessions.core.StoreCore`
    for the options and guarantees.
    """


__all__ = ["Durability", "MessageLike", "SessionStore"]
