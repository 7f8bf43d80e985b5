"""The message-history API and pagination (agent-pool and coding-agent designs).

Methods of :class:`jsonl_sessions.SessionStore`, kept in their own module: they build on
the store's transcript format, guard and readers (see store.py) and add id lookup,
windows, pages, fork (copy_messages) and revert (truncate_messages).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import SessionStore  # noqa: F401  (the self type of the methods below)


class HistoryMethods:
    """Mixed into :class:`SessionStore`; every method takes ``self: SessionStore``."""
