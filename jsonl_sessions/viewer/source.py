"""What the viewer reads from a store, as the few calls its pages need: a page of the
session list, a window of a session's messages, a page of search hits. Every call is a
read of the store's public API; nothing here writes.

- :func:`list_page`: the sessions by last activity (newest first), filtered by name
  prefix, agent alias and run state, paged by the listing's keyset cursor.
- :func:`window`: the newest page of a session, the page before or after a message, or
  the messages around one (``at``): a page before it, the message, a page after it.
  Each is one to three :meth:`~jsonl_sessions.protocol.SessionBackend.page` calls
  (O(page + log n) on every backend), never the whole session. Pages are widened so that
  a tool result is not cut from its call (``whole_turns=True``).
- :func:`search_page`: :meth:`~jsonl_sessions.protocol.SessionBackend.search_messages`.
- :func:`store_warnings`: what the store warned about while a page was read. Reads are
  lenient: a line that does not parse is skipped with a logged warning (line and byte
  offset), so the page says so instead of showing a shorter history as if it were whole.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ..errors import MessageNotFoundError
from ..protocol import SessionBackend
from ..types import ChatMessage, SearchPage, SessionMetadata

#: Messages in a page of a transcript (a window around a message holds twice this, plus it).
PAGE = 50
#: Sessions in a page of the list.
LIST_PAGE = 50
#: Search hits in a page.
SEARCH_PAGE = 50


@dataclass(frozen=True)
class Filters:
    """The session list's filters (None: no filter)."""

    name_prefix: str | None = None
    agent_alias: str | None = None
    state: str | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.name_prefix, self.agent_alias, self.state))


def list_page(store: SessionBackend, filters: Filters, *, cursor: str | None = None,
              limit: int = LIST_PAGE) -> tuple[list[SessionMetadata], str | None]:
    """A page of sessions, most recent activity first, and the cursor of the next page
    (None: this was the last), by the listing's keyset cursor (stable while sessions are
    added or written). Cost: the store's listing."""
    found = store.list_sessions_with_metadata(
        sort="updated_at", descending=True, limit=limit, cursor=cursor,
        state=filters.state, agent_alias=filters.agent_alias, name_prefix=filters.name_prefix)
    return list(found), found.cursor


@dataclass(frozen=True)
class Window:
    """Consecutive messages of a session, oldest first. ``older``: the id to page back
    from (the first message's) when older messages exist, else None; ``newer``: the id to
    page forward from (the last message's) when newer ones exist, else None. ``live``:
    the window reaches the newest message, so new ones are polled for after ``last``
    (``""``: the session is empty, from its start)."""

    messages: list[ChatMessage]
    older: str | None
    newer: str | None
    live: bool
    last: str


def window(store: SessionBackend, key: str, *, before: str | None = None, after: str | None = None,
           at: str | None = None, limit: int = PAGE) -> Window:
    """The messages the session page shows: the newest ``limit`` (no cursor), the
    ``limit`` before ``before``, the ``limit`` after ``after``, or the ``limit // 2``
    either side of ``at`` with ``at`` itself.

    :raises SessionNotFoundError: no such session.
    :raises MessageNotFoundError: a cursor or ``at`` names no message of the session.
    Cost: at most three pages and one lookup by id (O(limit + log n); the lookup of ``at``
    is O(n) on a JSONL transcript when that id is not a ULID, as an older store's can be)."""
    if at is not None:
        message = store.get_message(key, at)
        if message is None:
            store.page(key, limit=1)  # SessionNotFoundError for a missing session
            raise MessageNotFoundError(key=key, message_id=at)
        side = max(limit // 2, 1)
        back = store.page(key, limit=side, before=at, whole_turns=True)
        ahead = store.page(key, limit=side, after=at, whole_turns=True)
        messages = [*back.messages, message, *ahead.messages]
        return Window(messages, messages[0].id if back.has_more else None,
                      messages[-1].id if ahead.has_more else None, not ahead.has_more, messages[-1].id)
    if after is not None:
        page = store.page(key, limit=limit, after=after, whole_turns=True)
        last = page.messages[-1].id if page.messages else after
        first = page.messages[0].id if page.messages else None
        return Window(page.messages, first if after else None, last if page.has_more else None,
                      not page.has_more, last)
    page = store.page(key, limit=limit, before=before, whole_turns=True)
    first = page.messages[0].id if page.messages else None
    if before is None:
        return Window(page.messages, first if page.has_more else None, None, True,
                      page.messages[-1].id if page.messages else "")
    last = page.messages[-1].id if page.messages else before
    # ``before`` itself is newer than this page: the next newer page starts after the last message
    return Window(page.messages, first if page.has_more else None, last if page.messages else None,
                  False, last)


def search_page(store: SessionBackend, text: str, *, roles: list[str] | None = None,
                keys: list[str] | None = None, agent_alias: str | None = None, name: str | None = None,
                cursor: str | None = None, limit: int = SEARCH_PAGE) -> SearchPage:
    """A page of messages matching ``text`` (every word and "quoted phrase"), newest first,
    with the cursor of the next (older) page. Cost: the store's search (a scan, or its
    full-text index when it has one)."""
    return store.search_messages(text, roles=roles, keys=keys, agent_alias=agent_alias, name=name, cursor=cursor,
                                 limit=limit)


class _Collector(logging.Handler):
    """The library logger's warnings, kept for the threads that asked for them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.by_thread: dict[int, list[str]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        kept = self.by_thread.get(record.thread) if record.thread is not None else None
        if kept is not None:
            text = record.getMessage()
            if text not in kept:
                kept.append(text)


_LOGGER = logging.getLogger("jsonl_sessions")
_COLLECTOR = _Collector()
_COLLECTOR_LOCK = threading.Lock()


@contextmanager
def store_warnings() -> Iterator[list[str]]:
    """The warnings the store logs in this thread while the block runs (a corrupt line a
    page or a search skipped, with its line and byte offset), each once, in order. Each
    request of the server runs in a thread of its own, so requests do not see each other's.
    The warnings still reach the logger's other handlers (the terminal of ``serve``); a
    logger silenced below WARNING reports nothing here either."""
    ident = threading.get_ident()
    kept: list[str] = []
    with _COLLECTOR_LOCK:
        if _COLLECTOR not in _LOGGER.handlers:
            _LOGGER.addHandler(_COLLECTOR)
        _COLLECTOR.by_thread[ident] = kept
    try:
        yield kept
    finally:
        with _COLLECTOR_LOCK:
            _COLLECTOR.by_thread.pop(ident, None)


__all__ = ["LIST_PAGE", "PAGE", "SEARCH_PAGE", "Filters", "Window", "list_page", "search_page", "store_warnings",
           "window"]
