"""AsyncSessionStore: the session store for asyncio code.

Every method of the backend contract (:class:`jsonl_sessions.protocol.SessionBackend`)
is here as a coroutine with the same name, arguments, result and errors, so an
``AsyncSessionStore`` is an :class:`~jsonl_sessions.protocol.AsyncSessionBackend`. Each
call runs the blocking method in a worker thread (``asyncio.to_thread``), so the event
loop never waits on file I/O, fsync or a session's guard; stores are thread-safe and
the guard serialises concurrent calls on one session, so any number of coroutines may
use one store. It wraps a :class:`jsonl_sessions.SessionStore` by default and any other
backend through :meth:`AsyncSessionStore.wrapping`.

The wrappers are generated from the contract when this module is imported
(:data:`WRAPPED` lists them), so a method added to the contract is covered without a
change here.

Not wrapped: ``lock(key)``. The guard is bound to the thread that takes it (a
re-entrant lock) and each wrapped call may run in a different worker thread, so a
guard held across ``await`` points would block or time out the calls meant to run under
it. To make several calls one unit, run them in one worker thread::

    def rename(store: SessionStore) -> None:
        with store.lock("chat"):
            messages = store.try_load("chat")
            store.rewrite_messages("chat", messages[-10:])

    await astore.run(rename)
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from .jsonl.store import SessionStore
from .protocol import SessionBackend, backend_methods
from .types import Durability

if TYPE_CHECKING:
    from typing_extensions import Self

_T = TypeVar("_T")

#: Public members of SessionStore that are not wrapped (see the module docstring).
NOT_WRAPPED = frozenset({"lock"})


def public_methods(cls: type = SessionStore) -> list[str]:
    """The names of ``cls``'s public methods (functions not starting with ``_``), sorted."""
    return sorted(name for name, value in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_"))


def _wrapper(name: str, method: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def call(self: AsyncSessionStore, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self._store, name), *args, **kwargs)

    call.__qualname__ = f"AsyncSessionStore.{name}"
    call.__doc__ = inspect.getdoc(method)  # the contract, which the store's method inherits
    return call


class AsyncSessionStore:
    """``AsyncSessionStore(root, **options)``: a :class:`SessionStore` (same ``root`` and
    options) whose methods are coroutines, run in worker threads.

    The constructor itself does the store's small amount of set-up I/O (creating
    ``root``, removing temp files left by a crash) in the calling thread; inside a
    running event loop, ``await AsyncSessionStore.open(root, ...)`` does it in a worker
    thread instead. :attr:`sync` is the underlying store; :meth:`run` runs a function of
    it in one worker thread (e.g. several calls under ``store.lock(key)``)."""

    def __init__(self, root: str | os.PathLike[str], **options: Any) -> None:
        self._store: SessionBackend = SessionStore(root, **options)

    @classmethod
    async def open(cls, root: str | os.PathLike[str], **options: Any) -> AsyncSessionStore:
        """Create the store in a worker thread (its set-up I/O never blocks the loop)."""
        store = await asyncio.to_thread(SessionStore, root, **options)
        return cls.wrapping(store)

    @classmethod
    def wrapping(cls, store: SessionBackend) -> AsyncSessionStore:
        """An async front for an existing store of any backend (both may be used side
        by side)."""
        self = cls.__new__(cls)
        self._store = store
        return self

    @property
    def sync(self) -> SessionBackend:
        """The blocking store underneath."""
        return self._store

    @property
    def root(self) -> str:
        """Where the store lives (its ``root``, or ``path`` for a single-file backend)."""
        return str(getattr(self._store, "root", None) or getattr(self._store, "path", ""))

    @property
    def durability(self) -> Durability:
        return self._store.durability

    async def aclose(self) -> None:
        """Close the store underneath, in a worker thread."""
        await asyncio.to_thread(self._store.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def run(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``fn(store, *args, **kwargs)`` in one worker thread, with the blocking store."""
        return await asyncio.to_thread(fn, self._store, *args, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.root!r}, durability={self._store.durability!r})"

    if TYPE_CHECKING:
        # The generated coroutine methods (below) are invisible to a type checker.
        def __getattr__(self, name: str) -> Callable[..., Coroutine[Any, Any, Any]]: ...


#: The contract's methods AsyncSessionStore exposes as coroutines.
WRAPPED = tuple(backend_methods())

for _name in WRAPPED:
    # The default backend's method: same signature as the contract's, and its docstring
    # tells the JSONL specifics.
    setattr(AsyncSessionStore, _name, _wrapper(_name, getattr(SessionStore, _name)))
del _name

__all__ = ["NOT_WRAPPED", "WRAPPED", "AsyncSessionStore", "public_methods"]
