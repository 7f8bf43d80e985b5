"""What both adapters share: opening the store they were given, and finishing a write
whose caller was cancelled before reporting it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from typing import Any, TypeVar

from ..aio import AsyncSessionStore
from ..store import SessionStore

_T = TypeVar("_T")

#: The store directory used when an adapter is given no store (relative to the working directory).
DEFAULT_ROOT = "sessions"

StoreLike = SessionStore | AsyncSessionStore | str | os.PathLike[str] | None


def open_store(store: StoreLike, options: dict[str, Any]) -> SessionStore:
    """The blocking store behind ``store``: a :class:`SessionStore` as it is, an
    :class:`AsyncSessionStore`'s ``.sync``, a path (``None``: :data:`DEFAULT_ROOT`) opened
    with ``options`` (``durability``, ``lock_timeout``...). Options with a store object
    are a TypeError: they would be silently ignored."""
    if isinstance(store, (SessionStore, AsyncSessionStore)):
        if options:
            raise TypeError(f"store options {sorted(options)} apply only when store is a path")
        return store if isinstance(store, SessionStore) else store.sync
    root = DEFAULT_ROOT if store is None else store
    if not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"store must be a SessionStore, an AsyncSessionStore, a path or None, not {type(root).__name__}")
    return SessionStore(root, **options)


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
