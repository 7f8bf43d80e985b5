"""``JsonlChatMessageHistory``: a durable LangChain chat message history.

::

    from jsonl_sessions.integrations.langchain import JsonlChatMessageHistory

    history = JsonlChatMessageHistory("user-42", "sessions")   # a store directory (or a SessionStore)
    history.add_messages([HumanMessage("Hi"), AIMessage("Hello!")])
    chain = RunnableWithMessageHistory(model, lambda sid: JsonlChatMessageHistory(sid, "sessions"))

It implements ``langchain_core.chat_history.BaseChatMessageHistory`` (``messages``,
``add_messages``, ``clear`` and their async forms) on a :class:`jsonl_sessions.SessionStore`:
the history is the store's session whose key is ``key_prefix + session_id``
(``"langchain/user-42"``), one transcript line per message.

Mapping (lossless: a message reads back equal to the one added, with its type, tool calls,
additional kwargs, response metadata, id and name): LangChain's own
``message_to_dict(message)`` is ``{"type": ..., "data": {...}}``; the line's ``content`` is
``data["content"]`` (so the store's search sees the text), the extra field ``langchain``
holds ``{"type": ..., "data": <every other field of data>}``, and ``messages_from_dict``
rebuilds the message. ``role`` is derived from the type: ``human`` -> ``user``, ``ai`` ->
``assistant``, ``system``, ``tool``, ``function`` as they are, ``chat`` -> the message's
own role, any other type as it is (chunk types as their message type). A line written by
other code (no ``langchain`` field) reads back by its role: ``user`` -> HumanMessage,
``assistant`` -> AIMessage, ``system`` -> SystemMessage, ``tool`` -> ToolMessage (its
``tool_call_id`` extra), anything else -> ChatMessage with that role.

Needs ``langchain-core``: ``pip install 'jsonl-sessions[langchain]'``.
"""

from __future__ import annotations

try:
    import langchain_core  # noqa: F401  (a missing package fails here, with the message below)
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        message_to_dict,
        messages_from_dict,
    )
    from langchain_core.messages import ChatMessage as LCChatMessage
except ImportError as exc:  # pragma: no cover - exercised with the package hidden
    from ..extras import install_hint

    raise ImportError(
        "jsonl_sessions.integrations.langchain needs LangChain (langchain-core): "
        f"{install_hint('langchain')} ({exc})"
    ) from exc

import asyncio
from collections.abc import Sequence
from typing import Any

from ..keys import validate_key
from ..protocol import SessionBackend
from ..types import ChatMessage
from ._common import StoreLike, check_prefix, default_prefix, finish, open_store, where

__all__ = ["KEY_PREFIX", "JsonlChatMessageHistory", "lc_to_message", "message_to_lc"]

#: The extra field of a line written by this adapter.
LANGCHAIN_FIELD = "langchain"

_ROLES = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "function",
    "HumanMessageChunk": "user",
    "AIMessageChunk": "assistant",
    "SystemMessageChunk": "system",
    "ToolMessageChunk": "tool",
    "FunctionMessageChunk": "function",
}


def lc_to_message(message: BaseMessage) -> ChatMessage:
    """The transcript message that stores the LangChain ``message`` (see the module docstring)."""
    if not isinstance(message, BaseMessage):
        raise TypeError(f"a chat history holds BaseMessage objects, not {type(message).__name__}")
    as_dict = message_to_dict(message)
    kind_of = as_dict["type"]
    rest = dict(as_dict["data"])
    content = rest.pop("content", None)
    role = _ROLES.get(kind_of)
    if role is None:
        own = rest.get("role")
        role = own if kind_of in ("chat", "ChatMessageChunk") and isinstance(own, str) else str(kind_of)
    return ChatMessage(role, content, extra={LANGCHAIN_FIELD: {"type": kind_of, "data": rest}})


def message_to_lc(message: ChatMessage) -> BaseMessage:
    """The LangChain message stored as ``message`` (the inverse of :func:`lc_to_message`)."""
    extra = message.extra
    stored = extra.get(LANGCHAIN_FIELD)
    if isinstance(stored, dict) and isinstance(stored.get("type"), str) and isinstance(stored.get("data"), dict):
        data = dict(stored["data"])
        data["content"] = message.content
        return messages_from_dict([{"type": stored["type"], "data": data}])[0]
    # Not written by this adapter: by role, from the line's fields.
    content = message.content
    if content is None:
        content = ""
    elif isinstance(content, dict):
        content = [content]
    role = message.role
    if role == "user":
        return HumanMessage(content=content)
    if role == "assistant":
        return AIMessage(content=content)
    if role == "system":
        return SystemMessage(content=content)
    if role == "tool":
        return ToolMessage(content=content, tool_call_id=str(extra.get("tool_call_id") or ""))
    return LCChatMessage(content=content, role=role)


#: The default ``key_prefix``: this framework's namespace in a shared store.
KEY_PREFIX = default_prefix("langchain")


class JsonlChatMessageHistory(BaseChatMessageHistory):
    """``JsonlChatMessageHistory(session_id, store=None, *, key_prefix="langchain/",
    **store_options)``: the conversation ``session_id`` of a jsonl_sessions store (the
    store session :attr:`key`, ``key_prefix + session_id``), as a LangChain chat history.

    ``store``: a :class:`~jsonl_sessions.SessionStore`, an
    :class:`~jsonl_sessions.AsyncSessionStore`, or the path of a store directory, opened
    with ``store_options`` (``durability``, ``lock_timeout``...); None means the command
    line's store (``$JSONL_SESSIONS_ROOT``, else the per-user data directory, see
    :mod:`jsonl_sessions.location`). Cheap to create (one per request is fine, as
    ``RunnableWithMessageHistory`` does); any number of objects, threads, coroutines and
    processes may use one session at once.

    ``add_messages`` is one append of all the messages (all or none, also after a crash);
    with ``durability="fsync"`` (the default) they are on stable storage when it returns.
    The async methods run the store in a worker thread (the event loop never waits on
    file I/O); an async write whose caller is cancelled is still awaited to its end before
    the cancellation is raised. ``messages`` skips corrupt transcript lines with a logged
    warning; ``clear`` refuses to destroy a line it cannot parse and raises
    :class:`~jsonl_sessions.CorruptTranscriptError`, leaving the file unchanged.
    """

    def __init__(self, session_id: str, store: StoreLike = None, *, key_prefix: str = KEY_PREFIX,
                 **store_options: Any) -> None:
        super().__init__()
        self.session_id = validate_key(session_id)  # a bad key fails here, not at the first call
        #: The store key of the history.
        self.key = check_prefix(key_prefix) + session_id
        self._store = open_store(store, store_options)

    @property
    def store(self) -> SessionBackend:
        """The store holding the history (its key is :attr:`key`)."""
        return self._store

    def __repr__(self) -> str:
        return f"JsonlChatMessageHistory({self.session_id!r}, {where(self._store)!r})"

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]  # the base declares an attribute
        """Every message, oldest first (``[]`` for a missing session). O(session); takes no
        lock; one consistent state."""
        return [message_to_lc(m) for m in self._store.load(self.key)]

    async def aget_messages(self) -> list[BaseMessage]:
        """:attr:`messages`, read in a worker thread."""
        loaded = await asyncio.to_thread(self._store.load, self.key)
        return [message_to_lc(m) for m in loaded]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` (creating the session if needed) as one write: all or none.
        Raises TypeError for a non-message, :class:`~jsonl_sessions.SerializationError`
        (a TypeError) for one that is not JSON, with nothing written. Cost:
        O(len(messages)), independent of the history's size."""
        lines = [lc_to_message(m) for m in messages]
        if lines:
            self._store.append_many(self.key, lines)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """:meth:`add_messages` in a worker thread."""
        lines = [lc_to_message(m) for m in messages]
        if lines:
            await finish(asyncio.to_thread(self._store.append_many, self.key, lines))

    def clear(self) -> None:
        """Remove every message. The session stays in the store, empty, with its metadata.
        Atomic; refuses a transcript with corrupt lines (see the class docstring)."""
        self._store.clear_messages(self.key)

    async def aclear(self) -> None:
        """:meth:`clear` in a worker thread."""
        await finish(asyncio.to_thread(self._store.clear_messages, self.key))
