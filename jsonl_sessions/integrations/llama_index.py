"""``JsonlChatStore``: a durable, multi-process llama-index chat store.

::

    from llama_index.core.memory import ChatMemoryBuffer
    from jsonl_sessions.integrations.llama_index import JsonlChatStore

    chat_store = JsonlChatStore("sessions")             # a store directory (or any session backend)
    memory = ChatMemoryBuffer.from_defaults(chat_store=chat_store, chat_store_key="user-42")

It implements ``llama_index.core.storage.chat_store.BaseChatStore`` (``set_messages``,
``get_messages``, ``add_message`` with its optional ``idx``, ``delete_messages``,
``delete_message``, ``delete_last_message``, ``get_keys`` and the async forms) with the
behaviour of llama-index's own ``SimpleChatStore``, on any session backend: chat key
``k`` is the store session ``key_prefix + k`` (``"llamaindex/user-42"``), one transcript
line per message.

Mapping (lossless: messages read back equal to those stored, blocks, images and
additional kwargs included): the line's ``role`` is the message's role, its ``content``
the message's text (what ``search`` and the command line see), and the extra field
``llama_index`` holds ``message.model_dump(mode="json")``. A line written by other code
(no ``llama_index`` field) reads back as ``ChatMessage(role=..., content=...)``.

Atomic and durable: ``add_message`` is one append; ``set_messages`` one atomic replace;
the index-based edits (``add_message(idx=...)``, ``delete_message``,
``delete_last_message``) and ``delete_messages`` read and rewrite under the session's
guard, so a message another process appends meanwhile is never lost. Each is all or
nothing after SIGKILL, and on stable storage when it returns with ``durability="fsync"``.
Cost: ``add_message`` O(message); the others O(session).

Needs ``llama-index-core``: ``pip install 'jsonl-sessions[llama-index]'``.
"""

from __future__ import annotations

try:
    from llama_index.core.bridge.pydantic import PrivateAttr
    from llama_index.core.llms import ChatMessage as LlamaMessage
    from llama_index.core.storage.chat_store.base import BaseChatStore
except ImportError as exc:  # pragma: no cover - exercised with the package hidden
    from ..extras import install_hint

    raise ImportError(
        "jsonl_sessions.integrations.llama_index needs llama-index (llama-index-core): "
        f"{install_hint('llama-index')} ({exc})"
    ) from exc

import asyncio
from collections.abc import Sequence
from typing import Any

from ..errors import SerializationError, SessionNotFoundError
from ..protocol import SessionBackend
from ..types import ChatMessage
from ._common import StoreLike, default_prefix, finish, open_store, where

__all__ = ["JsonlChatStore", "line_to_llama", "llama_to_line"]

#: The default prefix of a chat key's session key.
KEY_PREFIX = default_prefix("llama-index")
#: The extra field of a line written by this adapter.
LLAMA_FIELD = "llama_index"


def llama_to_line(message: LlamaMessage, key: str = "") -> ChatMessage:
    """The transcript line that stores ``message`` (see the module docstring). A message
    with a value that has no JSON form raises :class:`SerializationError`."""
    if not isinstance(message, LlamaMessage):
        raise TypeError(f"a chat store holds llama-index ChatMessage objects, not {type(message).__name__}")
    try:
        dumped = message.model_dump(mode="json")
    except Exception as exc:  # pydantic's PydanticSerializationError
        raise SerializationError(key=key, reason=str(exc)) from exc
    return ChatMessage(str(dumped.get("role") or "user"), message.content, extra={LLAMA_FIELD: dumped})


def line_to_llama(line: ChatMessage) -> LlamaMessage:
    """The message stored as ``line`` (the inverse of :func:`llama_to_line`)."""
    dumped = line.extra.get(LLAMA_FIELD)
    if isinstance(dumped, dict):
        return LlamaMessage.model_validate(dumped)
    content = line.content if isinstance(line.content, str) or line.content is None else str(line.content)
    return LlamaMessage(role=line.role, content=content)


class JsonlChatStore(BaseChatStore):
    """``JsonlChatStore(store=None, *, key_prefix="llamaindex/", **store_options)``.

    ``store``: any session backend (a :class:`~jsonl_sessions.SessionStore`, a SQLite
    store...), an :class:`~jsonl_sessions.AsyncSessionStore`, or the path of a store
    directory, opened with ``store_options`` (``durability``, ``lock_timeout``...); None
    means the command line's store (``$JSONL_SESSIONS_ROOT``, else the per-user data
    directory). Any number of chat stores, threads and processes
    may share a store and a key. The async methods run the store in a worker thread; an
    async write whose caller is cancelled is awaited to its end first.

    Differences from ``SimpleChatStore``: ``delete_last_message`` of an empty chat returns
    None (``SimpleChatStore`` raises IndexError); an index out of range for
    ``delete_message`` returns None at both ends (a negative index counts from the end, as
    in a list).
    """

    key_prefix: str = KEY_PREFIX
    _store: SessionBackend = PrivateAttr()

    def __init__(self, store: StoreLike = None, *, key_prefix: str = KEY_PREFIX, **store_options: Any) -> None:
        super().__init__(key_prefix=key_prefix)  # type: ignore[call-arg]  # a pydantic field of this class
        self._store = open_store(store, store_options)

    @classmethod
    def class_name(cls) -> str:
        return "JsonlChatStore"

    @property
    def store(self) -> SessionBackend:
        """The store holding the chats."""
        return self._store

    def __repr__(self) -> str:
        return f"JsonlChatStore({where(self._store)!r}, key_prefix={self.key_prefix!r})"

    def _key(self, key: str) -> str:
        return f"{self.key_prefix}{key}"


    def _lines(self, key: str, messages: Sequence[LlamaMessage]) -> list[ChatMessage]:
        return [llama_to_line(m, key) for m in messages]

    # -- the chat store ----------------------------------------------------------------------
    def set_messages(self, key: str, messages: list[LlamaMessage]) -> None:
        """Replace the chat's messages (creating it): one atomic replace."""
        skey = self._key(key)
        self._store.rewrite_messages(skey, self._lines(skey, messages))

    def get_messages(self, key: str) -> list[LlamaMessage]:
        """The chat's messages, oldest first; ``[]`` for a missing chat. Lock-free; corrupt
        lines are skipped with a logged warning."""
        return [line_to_llama(m) for m in self._store.load(self._key(key))]

    def add_message(self, key: str, message: LlamaMessage, idx: int | None = None) -> None:
        """Append ``message`` (one append), or insert it at position ``idx`` (a rewrite
        under the session's guard)."""
        skey = self._key(key)
        line = llama_to_line(message, skey)
        if idx is None:
            self._store.append(skey, line)
            return
        with self._store.lock(skey):
            lines = self._store.try_load(skey)
            lines.insert(idx, line)
            at = next(n for n, m in enumerate(lines) if m is line)
            # lines before it keep their ids and times; it and those after get new, increasing ones
            self._store.rewrite_messages(skey, lines[:at] + [_fresh(m) for m in lines[at:]])

    def delete_messages(self, key: str) -> list[LlamaMessage] | None:
        """Remove the chat, returning its messages; None when it does not exist."""
        skey = self._key(key)
        with self._store.lock(skey):
            if not self._store.session_exists(skey):
                return None
            lines = self._store.try_load(skey)
            self._store.delete_session(skey)
        return [line_to_llama(m) for m in lines]

    def delete_message(self, key: str, idx: int) -> LlamaMessage | None:
        """Remove and return the message at ``idx``; None when the chat or the index does not exist."""
        skey = self._key(key)
        with self._store.lock(skey):
            lines = self._store.try_load(skey)
            if not -len(lines) <= idx < len(lines):
                return None
            removed = lines.pop(idx)
            self._store.rewrite_messages(skey, lines)
        return line_to_llama(removed)

    def delete_last_message(self, key: str) -> LlamaMessage | None:
        """Remove and return the newest message; None when the chat is missing or empty.
        A compare-and-remove of the line it read (a message appended meanwhile is never
        removed in its place)."""
        skey = self._key(key)
        while True:
            try:
                newest = self._store.page(skey, limit=1).messages
            except SessionNotFoundError:
                return None
            if not newest:
                return None
            if self._store.remove_last(skey, expected_id=newest[0].id):
                return line_to_llama(newest[0])

    def get_keys(self) -> list[str]:
        """Every chat key of the store (sorted)."""
        n = len(self.key_prefix)
        return [k[n:] for k in self._store.list_sessions() if k.startswith(self.key_prefix) and len(k) > n]

    # -- async -------------------------------------------------------------------------------
    async def aset_messages(self, key: str, messages: list[LlamaMessage]) -> None:
        await finish(asyncio.to_thread(self.set_messages, key, messages))

    async def aget_messages(self, key: str) -> list[LlamaMessage]:
        return await asyncio.to_thread(self.get_messages, key)

    async def async_add_message(self, key: str, message: LlamaMessage, idx: int | None = None) -> None:
        await finish(asyncio.to_thread(self.add_message, key, message, idx))

    async def adelete_messages(self, key: str) -> list[LlamaMessage] | None:
        return await finish(asyncio.to_thread(self.delete_messages, key))

    async def adelete_message(self, key: str, idx: int) -> LlamaMessage | None:
        return await finish(asyncio.to_thread(self.delete_message, key, idx))

    async def adelete_last_message(self, key: str) -> LlamaMessage | None:
        return await finish(asyncio.to_thread(self.delete_last_message, key))

    async def aget_keys(self) -> list[str]:
        return await asyncio.to_thread(self.get_keys)


def _fresh(line: ChatMessage) -> ChatMessage:
    """``line`` without its id and time, so a rewrite numbers the lines in their new order."""
    return ChatMessage(line.role, line.content, kind=line.kind, extra=line.extra)
