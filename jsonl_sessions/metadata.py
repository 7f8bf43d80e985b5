"""Session metadata and lifecycle (the rest of the Rust ``SessionBackend`` trait).

Methods of :class:`jsonl_sessions.SessionStore`, kept in their own module: names,
agent attribution, ownership, run state, TTL cleanup, search and compact/repair, all on
the sidecar (replaced atomically under the session's guard) and file stats.
"""

from __future__ import annotations

from .core import StoreCore


class MetadataMethods(StoreCore):
    """Part of :class:`jsonl_sessions.SessionStore` (which inherits it)."""
