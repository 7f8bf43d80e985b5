"""The message-history API and pagination (agent-pool and coding-agent designs).

Methods of :class:`jsonl_sessions.SessionStore`, kept in their own module: they build on
the store's transcript format, guard and readers (see store.py) and add id lookup,
windows, pages, fork (copy_messages) and revert (truncate_messages).
"""

from __future__ import annotations

from .core import StoreCore


class HistoryMethods(StoreCore):
    """Part of :class:`jsonl_sessions.SessionStore` (which inherits it)."""
