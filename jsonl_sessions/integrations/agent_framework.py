"""``JsonlHistoryProvider``: a durable, multi-process history provider for Microsoft Agent Framework.

::

    from agent_framework import Agent
    from jsonl_sessions.integrations.agent_framework import JsonlHistoryProvider

    history = JsonlHistoryProvider("sessions")          # a store directory (or any session backend)
    agent = Agent(client=client, context_providers=[history])
    session = agent.create_session(session_id="user-42")

It implements ``agent_framework.HistoryProvider`` (``get_messages`` and
``save_messages``; loading before and storing after each run come from the base class)
with the behaviour of the framework's own ``FileHistoryProvider``: one history per
session id (``None`` is the session ``"default"``), a save of messages the history
already ends with (a replayed transcript) stores only the new ones, and
``skip_excluded=True`` hides messages a compaction marked excluded. The history of
session ``s`` is the store session ``key_prefix + s`` (``"agent-framework/user-42"``), one
transcript line per message: ``role`` the message's role, ``content`` its text (what
``search`` and the command line see), and the extra field ``agent_framework`` its
``to_dict()``, from which ``Message.from_dict`` rebuilds it.

Where ``FileHistoryProvider`` is safe in one process only, here a save is one append
under the session's guard (the overlap with the stored history is checked under it):
all or nothing after SIGKILL, on stable storage when it returns with
``durability="fsync"``, and exclusive across threads and processes. Cost: a save reads
the history's newest ``len(messages)`` lines (all of it when it is shorter), a read
O(history).

Needs ``agent-framework-core``: ``pip install 'jsonl-sessions[agent-framework]'``.
"""

from __future__ import annotations

try:
    from agent_framework import HistoryProvider, Message
except ImportError as exc:  # pragma: no cover - exercised with the package hidden
    from ..extras import install_hint

    raise ImportError(
        "jsonl_sessions.integrations.agent_framework needs Microsoft Agent Framework (agent-framework-core): "
        f"{install_hint('agent-framework')} ({exc})"
    ) from exc

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ..errors import SessionNotFoundError
from ..protocol import SessionBackend
from ..types import ChatMessage
from ._common import StoreLike, check_prefix, default_prefix, finish, open_store, where

Overlap = Callable[[Sequence[Message], Sequence[Message]], list[Message]]

try:  # the framework's own rule for what of a save is new (FileHistoryProvider uses it)
    from agent_framework._sessions import filter_new_messages as _framework_filter

    _new_messages: Overlap = _framework_filter
except ImportError:  # pragma: no cover - a release that moved it: every saved message is new

    def _new_messages(existing: Sequence[Message], incoming: Sequence[Message]) -> list[Message]:
        return list(incoming)


__all__ = ["JsonlHistoryProvider", "line_to_message", "message_to_line"]

#: The default prefix of a history's session key.
KEY_PREFIX = default_prefix("agent-framework")
#: The extra field of a line written by this adapter.
FIELD = "agent_framework"


def message_to_line(message: Message) -> ChatMessage:
    """The transcript line that stores ``message`` (see the module docstring)."""
    if not isinstance(message, Message):
        raise TypeError(f"a history holds agent_framework.Message objects, not {type(message).__name__}")
    return ChatMessage(str(message.role), message.text or None, extra={FIELD: message.to_dict()})


def line_to_message(line: ChatMessage) -> Message:
    """The message stored as ``line``; a line written by other code (no ``agent_framework``
    field) reads as a text message with the line's role and content."""
    stored = line.extra.get(FIELD)
    if isinstance(stored, dict):
        return Message.from_dict(dict(stored))
    content = line.content if isinstance(line.content, str) else ("" if line.content is None else str(line.content))
    return Message(role=line.role, contents=[content])


class JsonlHistoryProvider(HistoryProvider):
    """``JsonlHistoryProvider(store=None, *, key_prefix="agent-framework/", source_id="jsonl_history",
    load_messages=True, store_inputs=True, store_context_messages=False, store_context_from=None,
    store_outputs=True, skip_excluded=False, **store_options)``.

    ``store``: any session backend (a :class:`~jsonl_sessions.SessionStore`, a SQLite
    store...), an :class:`~jsonl_sessions.AsyncSessionStore`, or the path of a store
    directory, opened with ``store_options`` (``durability``, ``lock_timeout``...); None
    means the command line's store (``$JSONL_SESSIONS_ROOT``, else the per-user data
    directory). The flags are ``HistoryProvider``'s. Both methods
    run the store in a worker thread; a save whose caller is cancelled is awaited to its
    end first. A message with a value that has no JSON form raises
    :class:`~jsonl_sessions.SerializationError` (a TypeError), with nothing written.
    """

    DEFAULT_SOURCE_ID: ClassVar[str] = "jsonl_history"
    DEFAULT_SESSION: ClassVar[str] = "default"

    def __init__(
        self,
        store: StoreLike = None,
        *,
        key_prefix: str = KEY_PREFIX,
        source_id: str = DEFAULT_SOURCE_ID,
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: set[str] | None = None,
        store_outputs: bool = True,
        skip_excluded: bool = False,
        **store_options: Any,
    ) -> None:
        super().__init__(
            source_id, load_messages=load_messages, store_inputs=store_inputs,
            store_context_messages=store_context_messages, store_context_from=store_context_from,
            store_outputs=store_outputs,
        )
        check_prefix(key_prefix)
        self.key_prefix = key_prefix
        self.skip_excluded = skip_excluded
        self._store = open_store(store, store_options)

    @property
    def store(self) -> SessionBackend:
        """The store holding the histories."""
        return self._store

    def __repr__(self) -> str:
        return f"JsonlHistoryProvider({where(self._store)!r}, key_prefix={self.key_prefix!r})"

    def session_key(self, session_id: str | None) -> str:
        """The store session holding the history of ``session_id``."""
        return f"{self.key_prefix}{session_id or self.DEFAULT_SESSION}"


    def _read(self, session_id: str | None) -> list[Message]:
        messages = [line_to_message(m) for m in self._store.load(self.session_key(session_id))]
        if self.skip_excluded:
            messages = [m for m in messages if not m.additional_properties.get("_excluded", False)]
        return messages

    def _save(self, session_id: str | None, messages: Sequence[Message]) -> None:
        key = self.session_key(session_id)
        lines = {id(m): message_to_line(m) for m in messages}  # every message checked before any write
        with self._store.lock(key):
            try:
                count = self._store.get_message_count(key)
            except SessionNotFoundError:
                count = 0
            # the overlap rule looks only at as many stored messages as are being saved, unless
            # the whole history is shorter (then it may be a replay of all of it)
            tail = (self._store.page(key, limit=len(messages)).messages if count > len(messages)
                    else self._store.load(key))
            new = _new_messages([line_to_message(m) for m in tail], messages)
            if new:
                self._store.append_many(key, [lines[id(m)] for m in new])

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Message]:
        """The session's messages, oldest first (``[]`` for a new session). Lock-free;
        corrupt lines are skipped with a logged warning."""
        return await asyncio.to_thread(self._read, session_id)

    async def save_messages(
        self, session_id: str | None, messages: Sequence[Message], *, state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Append the messages the history does not already end with, as one append under
        the session's guard (all or nothing; durable on return in fsync mode)."""
        if messages:
            await finish(asyncio.to_thread(self._save, session_id, list(messages)))
