"""``JsonlSession``: a durable ``Session`` for the OpenAI Agents SDK.

::

    from agents import Agent, Runner
    from jsonl_sessions.integrations.openai_agents import JsonlSession

    session = JsonlSession("user-42", "sessions")   # a store directory (or a SessionStore, or None)
    result = await Runner.run(Agent(name="a"), "Hi", session=session)

It implements the SDK's ``Session`` protocol (``session_id``, ``session_settings``,
``get_items``, ``add_items``, ``pop_item``, ``clear_session``) with the behaviour of the
SDK's own ``SQLiteSession``, on a :class:`jsonl_sessions.SessionStore`: the session is the
store's session whose key is ``key_prefix + session_id`` (``"openai-agents/user-42"``), one
transcript line per item.

Mapping (lossless: ``get_items`` returns items equal to those added, key order included):
the line's ``content`` is the item's ``"content"`` (so the store's search sees message
text), ``item`` holds every other field of the item, ``content_at`` the position of
``"content"`` among the item's keys (absent when the item has none). ``role`` is the
item's ``role``, else its ``type`` (``"function_call"``, ``"reasoning"``...), else
``"item"``: for reading and filtering only, never used to rebuild the item. An item of
type ``"compaction"`` gets ``kind="compaction"``, so ``page(..., breakpoint=True)`` stops
at it. The item's own ``id`` (``"msg_..."``, ``"fc_..."``) stays in ``item``; the line's
``id`` is the store's ULID. A line written by other code (no ``item`` field) reads back
as ``{"role": ..., "content": ..., **its other fields}``.

Needs the ``openai-agents`` package: ``pip install 'jsonl-sessions[openai-agents]'``.
"""

from __future__ import annotations

try:
    import agents  # noqa: F401  (a missing SDK fails here, with the message below)
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings
except ImportError as exc:  # pragma: no cover - exercised with the package hidden
    from ..extras import install_hint

    raise ImportError(
        "jsonl_sessions.integrations.openai_agents needs the OpenAI Agents SDK (openai-agents >= 0.8): "
        f"{install_hint('openai-agents')} ({exc})"
    ) from exc

import asyncio
from collections.abc import Mapping
from typing import Any, cast

from ..errors import SessionNotFoundError
from ..foreign import responses
from ..keys import validate_key
from ..protocol import SessionBackend
from ..types import ChatMessage
from ._common import StoreLike, check_prefix, default_prefix, finish, open_store, where

__all__ = ["KEY_PREFIX", "JsonlSession", "item_to_message", "message_to_item"]

#: The default ``key_prefix``: this framework's namespace in a shared store.
KEY_PREFIX = default_prefix("openai-agents")

def item_to_message(item: Mapping[str, Any]) -> ChatMessage:
    """The transcript message that stores ``item`` (see the module docstring)."""
    return responses.item_to_message(item)


def message_to_item(message: ChatMessage) -> TResponseInputItem:
    """The item stored as ``message`` (the inverse of :func:`item_to_message`)."""
    return cast("TResponseInputItem", responses.message_to_item(message))


try:
    from agents.memory.session_settings import coerce_session_settings as _coerce_settings
except ImportError:  # pragma: no cover - openai-agents before it validated settings itself

    def _coerce_settings(value: SessionSettings | dict[str, Any]) -> SessionSettings:
        # The same rule as the SDK's coerce_session_settings (a typo is an error, not ignored).
        if isinstance(value, SessionSettings):
            return value
        if not isinstance(value, dict):
            raise TypeError(f"session must be a SessionSettings instance or a dict, got {type(value).__name__}")
        unknown = sorted(str(name) for name in value if name not in SessionSettings.__dataclass_fields__)
        if unknown:
            raise TypeError(f"Unknown session settings: {', '.join(unknown)}")
        return SessionSettings(**value)


def _settings(value: SessionSettings | dict[str, Any] | None) -> SessionSettings:
    # Exactly as the SDK's SQLiteSession: its own coercion, so an unknown key (a typo) or a
    # value that is neither a SessionSettings nor a dict is a TypeError, a bad field value
    # pydantic's ValidationError (a ValueError).
    return SessionSettings() if value is None else _coerce_settings(value)


class JsonlSession:
    """``JsonlSession(session_id, store=None, *, key_prefix="openai-agents/",
    session_settings=None, **store_options)``: the conversation ``session_id`` of a
    jsonl_sessions store (the store session :attr:`key`, ``key_prefix + session_id``), as
    an Agents SDK session.

    ``store``: a :class:`~jsonl_sessions.SessionStore`, an
    :class:`~jsonl_sessions.AsyncSessionStore`, or the path of a store directory, opened
    with ``store_options`` (``durability``, ``lock_timeout``...); None means the command
    line's store (``$JSONL_SESSIONS_ROOT``, else the per-user data directory, see
    :mod:`jsonl_sessions.location`). Sessions sharing a store (also across
    processes) are independent; several ``JsonlSession`` objects, coroutines, threads or
    processes may use one session at once.

    Every method runs the store in a worker thread, so the event loop never waits on file
    I/O. Durability is the store's: with ``durability="fsync"`` (the default) items are on
    stable storage when ``add_items`` returns. A write whose caller is cancelled is still
    awaited to its end before the cancellation is raised (as the SDK's own sessions do).

    Corrupt transcript lines (edited or damaged by hand) are skipped by ``get_items`` with
    a logged warning, as ``SQLiteSession`` skips rows it cannot decode; ``pop_item`` and
    ``clear_session`` refuse to destroy a line they cannot parse and raise
    :class:`~jsonl_sessions.CorruptTranscriptError`, leaving the file unchanged
    (``store.compact(key, repair=True)`` or ``store.delete_session(key)`` deal with it).
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        store: StoreLike = None,
        *,
        key_prefix: str = KEY_PREFIX,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        **store_options: Any,
    ) -> None:
        self.session_id = validate_key(session_id)  # a bad key fails here, not at the first call
        #: The store key of the session.
        self.key = check_prefix(key_prefix) + session_id
        self.session_settings = _settings(session_settings)
        self._store = open_store(store, store_options)

    @property
    def store(self) -> SessionBackend:
        """The store holding the session (its key is :attr:`key`)."""
        return self._store

    def __repr__(self) -> str:
        return f"JsonlSession({self.session_id!r}, {where(self._store)!r})"

    # -- the Session protocol -------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit`` (else
        ``session_settings.limit``) only the ``limit`` newest, still oldest first. ``[]``
        for a missing session and for ``limit == 0``; a negative limit means all (as in
        ``SQLiteSession``). Cost: O(limit) with a limit (the store reads a page from the
        end of the transcript, never the whole file), O(session) without. Takes no lock;
        the result is one consistent state."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        messages = await asyncio.to_thread(self._read, limit)
        return [message_to_item(m) for m in messages]

    def _read(self, limit: int | None) -> list[ChatMessage]:
        if limit is None or limit < 0:
            return self._store.load(self.key)
        if limit == 0:
            return []
        try:
            return self._store.page(self.key, limit=limit).messages
        except SessionNotFoundError:
            return []

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` (creating the session if needed) as one write: all of them or,
        after a crash or an error, none. Raises TypeError for an item that is not a dict,
        :class:`~jsonl_sessions.SerializationError` (a TypeError) for one that is not
        JSON, with nothing written. Cost: O(len(items)), independent of the session size."""
        if not items:
            return
        messages = [item_to_message(cast("Mapping[str, Any]", item)) for item in items]
        await finish(asyncio.to_thread(self._store.append_many, self.key, messages))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it; None when the session is empty (or
        missing). A compare-and-remove: it reads the newest line, then removes the newest
        line only if it is still that one, and tries again otherwise, so an item appended
        meanwhile by another writer (any thread or process) is never removed in place of
        the one returned. Cost: O(1) in the session size."""
        message = await finish(asyncio.to_thread(self._pop))
        return None if message is None else message_to_item(message)

    def _pop(self) -> ChatMessage | None:
        while True:
            try:
                newest = self._store.page(self.key, limit=1).messages
            except SessionNotFoundError:
                return None
            if not newest:
                return None
            if self._store.remove_last(self.key, expected_id=newest[-1].id):
                return newest[-1]

    async def clear_session(self) -> None:
        """Remove every item. The session stays in the store, empty, with its metadata
        (name, owner...). Atomic; refuses a transcript with corrupt lines (see the class
        docstring)."""
        await finish(asyncio.to_thread(self._store.clear_messages, self.key))

    def close(self) -> None:
        """Nothing to release (no file stays open between calls); for code written
        against ``SQLiteSession``, which has a ``close``."""

    # -- extra ------------------------------------------------------------------------------
    async def get_item_count(self) -> int:
        """How many items the session holds (0 when missing). O(1) in the session size."""
        def count() -> int:
            try:
                return self._store.get_message_count(self.key)
            except SessionNotFoundError:
                return 0

        return await asyncio.to_thread(count)

