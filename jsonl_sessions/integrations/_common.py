"""What the adapters share: the store key scheme, opening the store they were given
(the default root is the command line's), and finishing a write whose caller was
cancelled before reporting it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from typing import Any, TypeVar, cast

from ..aio import AsyncSessionStore
from ..foreign.claude_code import DEFAULT_PREFIX
from ..jsonl.store import SessionStore
from ..location import resolve_root
from ..protocol import SessionBackend

_T = TypeVar("_T")

#: Between an adapter's namespace and the framework's own id in a store key: every
#: adapter keys its sessions ``<namespace>/<id>``, so one id used by two frameworks is two
#: sessions of one store.
SEPARATOR = "/"

#: Each framework's namespace (the default ``key_prefix`` is the namespace and
#: :data:`SEPARATOR`). Claude's is also the one ``jsonl-sessions import --from claude-code``
#: writes, so the SDK resumes imported transcripts.
NAMESPACES = {
    "openai-agents": "openai-agents",
    "langchain": "langchain",
    "claude-agent-sdk": DEFAULT_PREFIX.removesuffix(SEPARATOR),
    "langgraph": "langgraph",
    "google-adk": "adk",
    "llama-index": "llamaindex",
    "agent-framework": "agent-framework",
}


def default_prefix(framework: str) -> str:
    """The default key prefix of ``framework``'s adapter: ``"<namespace>/"``."""
    return NAMESPACES[framework] + SEPARATOR


def check_prefix(key_prefix: object) -> str:
    """``key_prefix`` if it is a str, else TypeError."""
    if not isinstance(key_prefix, str):
        raise TypeError(f"key_prefix must be a str, not {type(key_prefix).__name__}")
    return key_prefix

StoreLike = SessionBackend | AsyncSessionStore | str | os.PathLike[str] | None


def open_store(store: StoreLike, options: dict[str, Any]) -> SessionBackend:
    """The blocking store behind ``store``: any backend (a :class:`SessionStore`, a
    SQLite store...) as it is, an :class:`AsyncSessionStore`'s ``.sync``, a path opened as
    a :class:`SessionStore` with ``options`` (``durability``, ``lock_timeout``...). ``None``
    is the command line's store: ``$JSONL_SESSIONS_ROOT``, else the per-user data directory
    (:func:`jsonl_sessions.location.resolve_root`, read when the adapter is created).
    Options with a store object are a TypeError: they would be silently ignored."""
    if isinstance(store, AsyncSessionStore):
        backend = store.sync
    elif store is None or isinstance(store, (str, os.PathLike)):
        # (cast: the async store's typing-only __getattr__ makes it look path-like to mypy)
        return SessionStore(resolve_root() if store is None else cast("str | os.PathLike[str]", store), **options)
    elif isinstance(store, SessionBackend):
        backend = store
    else:
        raise TypeError(f"store must be a session store, an AsyncSessionStore, a path or None, not {type(store).__name__}")
    if options:
        raise TypeError(f"store options {sorted(options)} apply only when store is a path")
    return backend


def where(store: SessionBackend) -> str:
    """Where ``store`` keeps its data (its ``root`` directory or database ``path``), for reprs."""
    return str(getattr(store, "root", None) or getattr(store, "path", None) or type(store).__name__)


async def finish(awaitable: Awaitable[_T]) -> _T:
    """Await a write running in a worker thread to its end, even when the caller is
    cancelled meanwhile (the thread cannot be stopped, so its outcome would otherwise be
    unknown when the cancellation arrives); the cancellation is raised after it."""
    task = asyncio.ensure_future(awaitable)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what the caller gets
        raise cancelled
    return task.result()
