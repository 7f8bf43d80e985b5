"""``JsonlSessionStore``: a durable ``SessionStore`` for the Claude Agent SDK.

::

    from claude_agent_sdk import ClaudeAgentOptions, query
    from jsonl_sessions.integrations.claude_agent_sdk import JsonlSessionStore

    store = JsonlSessionStore("sessions")   # a store directory (or any session store)
    async for msg in query(prompt="Hi", options=ClaudeAgentOptions(session_store=store)):
        ...

It implements the SDK's ``SessionStore`` protocol: ``append`` and ``load``, and the
optional ``list_sessions``, ``list_session_summaries``, ``delete`` (a main key cascades to
its subagent transcripts) and ``list_subkeys``. Each SDK key (``project_key``,
``session_id``, optional ``subpath``) is one session of the store, keyed
``claude/<project>/<session>[/<subpath>]``; each entry (one Claude Code transcript line)
is one transcript line (see :mod:`jsonl_sessions.foreign.claude_code`), so ``search``,
``page``, forks, metadata and the command line work on it too.

``append`` deduplicates by the entries' ``uuid`` (the SDK retries a batch whose outcome
it did not see) and writes the rest as one crash-atomic append under the session's
guard, durable when it returns with ``durability="fsync"``; the session summary the SDK
folds is kept in the session's sidecar. :mod:`jsonl_sessions.foreign.claude_sessions`
states the guarantees and costs. Every method runs the store in a worker thread
(anyio's, so asyncio and trio both work); a write whose caller is cancelled is awaited
to its end before the cancellation is raised.

Needs ``claude-agent-sdk``: ``pip install 'jsonl-sessions[claude-agent-sdk]'``.
"""

from __future__ import annotations

try:
    import claude_agent_sdk  # noqa: F401  (a missing SDK fails here, with the message below)
    from claude_agent_sdk import fold_session_summary
    from claude_agent_sdk.types import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStore,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
    )
except ImportError as exc:  # pragma: no cover - exercised with the package hidden
    from ..extras import install_hint

    raise ImportError(
        "jsonl_sessions.integrations.claude_agent_sdk needs the Claude Agent SDK (claude-agent-sdk): "
        f"{install_hint('claude-agent-sdk')} ({exc})"
    ) from exc

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar, cast

import anyio
import anyio.lowlevel
import anyio.to_thread
import sniffio

from ..foreign.claude_code import DEFAULT_PREFIX, ClaudeKey
from ..foreign.claude_sessions import ClaudeSessions
from ..protocol import SessionBackend
from ._common import StoreLike, finish, open_store, where

__all__ = ["JsonlSessionStore"]

_T = TypeVar("_T")


async def _read(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in a worker thread, under whichever event loop runs the SDK (asyncio
    or trio: the SDK itself runs on anyio)."""
    return await anyio.to_thread.run_sync(fn, *args)


async def _write(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in a worker thread, awaited to its end even when the caller is
    cancelled meanwhile (a thread cannot be stopped, so the write's outcome would be
    unknown); the cancellation is raised after it."""
    if sniffio.current_async_library() == "asyncio":
        # asyncio's task.cancel() goes through anyio's shielded scopes: keep it out with a task
        return await finish(asyncio.to_thread(fn, *args))
    try:
        with anyio.CancelScope(shield=True):
            result = await anyio.to_thread.run_sync(fn, *args)
    finally:
        await anyio.lowlevel.checkpoint_if_cancelled()  # a cancellation that came meanwhile
    return result


class JsonlSessionStore(SessionStore):
    """``JsonlSessionStore(store=None, *, prefix="claude/", clock=None, **store_options)``: Claude
    Agent SDK transcripts in a jsonl_sessions store.

    ``store``: any session backend (a :class:`~jsonl_sessions.SessionStore`...), an
    :class:`~jsonl_sessions.AsyncSessionStore`, or
    the path of a store directory, opened with ``store_options`` (``durability``,
    ``lock_timeout``...); None means the command line's store (``$JSONL_SESSIONS_ROOT``,
    else the per-user data directory). ``prefix`` starts the store key of every Claude session (so they can share
    a store with other sessions). Any number of objects, coroutines, threads and
    processes may use one store at once.

    ``mtime`` (in ``list_sessions`` and the summaries) is the append's time by ``clock``
    (epoch milliseconds, default the wall clock) and strictly increases from one append
    of this object to the next, whatever the session, as in the SDK's reference store:
    an append within the same millisecond as the previous one (or after the clock stepped
    back) gets the previous mtime plus one.

    Raises :class:`~jsonl_sessions.InvalidSessionKeyError` (a ValueError) for a key with
    an empty ``project_key``, ``session_id`` or ``subpath``; TypeError for an entry that
    is not a dict, :class:`~jsonl_sessions.SerializationError` (a TypeError) for one that
    is not JSON, with nothing written.
    """

    def __init__(self, store: StoreLike = None, *, prefix: str = DEFAULT_PREFIX,
                 clock: Callable[[], int] | None = None, **store_options: Any) -> None:
        self._sessions = ClaudeSessions(open_store(store, store_options), prefix=prefix, fold=fold_session_summary,
                                        clock=clock)

    @property
    def store(self) -> SessionBackend:
        """The store holding the transcripts."""
        return self._sessions.store

    @property
    def prefix(self) -> str:
        return self._sessions.prefix

    def __repr__(self) -> str:
        return f"JsonlSessionStore({where(self.store)!r}, prefix={self.prefix!r})"

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Append the entries not already stored (by ``uuid``) as one write: all of them
        or, after a crash or an error, none. Cost: O(session)."""
        claude_key = ClaudeKey.of(key)
        batch = list(entries)
        if batch:
            await _write(self._sessions.append, claude_key, batch)

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """Every entry, in append order, each ``uuid`` once; None for a key never written.
        Takes no lock. Cost: O(session)."""
        loaded = await _read(self._sessions.load, ClaudeKey.of(key))
        return None if loaded is None else cast("list[SessionStoreEntry]", loaded)

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The main sessions of ``project_key`` with their last write time (epoch ms)."""
        listed = await _read(self._sessions.list_sessions, _project(project_key))
        return [{"session_id": session_id, "mtime": mtime} for session_id, mtime in listed]

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The summaries kept with each main session of ``project_key``."""
        summaries = await _read(self._sessions.summaries, _project(project_key))
        return cast("list[SessionSummaryEntry]", summaries)

    async def delete(self, key: SessionKey) -> None:
        """Delete a transcript; a main key also deletes its subagent transcripts."""
        await _write(self._sessions.delete, ClaudeKey.of(key))

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The subpaths of the session's subagent transcripts."""
        main = ClaudeKey.of(key).main
        return await _read(self._sessions.list_subkeys, main)


def _project(project_key: str) -> str:
    return ClaudeKey(project_key, "-").project_key  # validates it
