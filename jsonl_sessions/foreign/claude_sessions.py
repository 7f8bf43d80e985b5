"""The operations of a Claude session store, on any session backend.

:class:`ClaudeSessions` keeps Claude Code transcripts (see :mod:`.claude_code` for the
line mapping and the keys) in a store and is what the Claude Agent SDK adapter and the
``import --from claude-code`` command run. Every method is blocking.

Guarantees (on any backend):

- :meth:`ClaudeSessions.append` writes the new entries of a batch as one
  ``append_many``: all or none, also after SIGKILL; on stable storage when it returns in
  ``durability="fsync"`` mode. It runs under the session's guard (the backend's
  ``lock(key)``), so deduplicating by ``uuid`` and appending are one step for every
  writer, in every process: an entry whose ``uuid`` the transcript already holds is
  skipped (the SDK retries a batch whose outcome it did not see), entries without a
  ``uuid`` are always appended.
- The session summary (the SDK's ``fold_session_summary`` output, when a ``fold`` is
  given) is written to the session's sidecar context after the append, under the same
  guard. Its ``mtime`` is the ``created_at`` of the batch's lines, the same clock
  :meth:`ClaudeSessions.list_sessions` reports, so a summary that a crash left behind is
  older than the session and the SDK sees it as stale.
- That ``mtime`` strictly increases from one append to the next of one object, whatever
  the session (the SDK lists sessions by it): it is the clock's time, or one millisecond
  after the object's previous one when the clock has not moved on (or stepped back).
  Within a session it also follows the newest line, so it increases for every writer.
- :meth:`load` returns the first occurrence of a ``uuid`` only, so even a transcript
  written by hand with a repeated ``uuid`` reads without the duplicate.

Costs: ``append`` is O(entries) when this object made the transcript's last change (it
keeps the uuids of the transcripts it appended to, checked against the session's message
count, size and newest line id, all O(1) to read), else O(session): it reads the
transcript's uuids again. ``load`` is O(session); the listings are O(sessions in the store).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import SessionNotFoundError
from ..ids import now_ms
from ..protocol import SessionBackend
from ..types import ChatMessage
from .claude_code import DEFAULT_PREFIX, ClaudeKey, entry_to_message, message_to_entry, project_prefix

__all__ = ["SUMMARY_CONTEXT", "ClaudeSessions", "Fold"]

#: The sidecar context entry holding a session's summary (JSON text).
SUMMARY_CONTEXT = "claude_agent_sdk.summary"

#: How many transcripts' uuids an object keeps in memory at most.
_KNOWN_SESSIONS = 256

#: ``fold(previous_summary, sdk_key, entries) -> summary``: the SDK's ``fold_session_summary``.
Fold = Callable[[Any, Any, Any], Any]


class ClaudeSessions:
    """``ClaudeSessions(store, *, prefix="claude/", fold=None, clock=None)``: the Claude
    sessions kept in ``store`` under keys starting with ``prefix``; ``fold`` maintains
    summaries; ``clock`` gives the mtimes (epoch milliseconds; default the wall clock)."""

    def __init__(self, store: SessionBackend, *, prefix: str = DEFAULT_PREFIX, fold: Fold | None = None,
                 clock: Callable[[], int] | None = None) -> None:
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a string, not {type(prefix).__name__}")
        self.store = store
        self.prefix = prefix
        self._fold = fold
        self._clock = clock or now_ms
        # The last mtime this object gave (appends of several threads run at once).
        self._last_stamp = 0
        self._stamp_lock = threading.Lock()
        # The uuids of the transcripts this object appended to, valid while the session's
        # look (count, size, newest id) is the one after that append (read under the guard).
        self._known: dict[str, _Known] = {}

    # -- writing ----------------------------------------------------------------------
    def append(self, key: ClaudeKey, entries: Sequence[Mapping[str, Any]]) -> int:
        """Append the entries whose ``uuid`` the transcript does not hold yet (creating
        the session if needed); how many were written. TypeError for an entry that is not
        a mapping, :class:`~jsonl_sessions.SerializationError` (a TypeError) for one that
        is not JSON: nothing written. Cost: O(entries) when this object made the
        transcript's last change, else O(session) (it reads the transcript's uuids)."""
        for entry in entries:
            if not isinstance(entry, Mapping):
                raise TypeError(f"a transcript entry must be a mapping (a dict), not {type(entry).__name__}")
        if not entries:
            return 0
        store_key = key.store_key(self.prefix)
        with self.store.lock(store_key):
            look = self._look(store_key)
            known = self._known.pop(store_key, None)
            if known is None or look is None or known.look != look[:3]:
                known = _Known(look[:3] if look else None, _uuids(self.store.load(store_key)))
            fresh = _new_entries(known.uuids, entries)
            if fresh:
                newest = look[3] if look else None
                stamp = self._next_stamp(newest)
                self.store.append_many(store_key, [entry_to_message(e, created_at=stamp) for e in fresh])
                known.uuids.update(u for u in map(_uuid, fresh) if u is not None)
                if key.subpath is None and self._fold is not None:
                    self._write_summary(key, store_key, fresh, newest, stamp)
                look = self._look(store_key)
            if look is not None:
                if len(self._known) >= _KNOWN_SESSIONS:
                    self._known.clear()
                self._known[store_key] = _Known(look[:3], known.uuids)
        return len(fresh)

    def _next_stamp(self, newest: int | None) -> int:
        """The batch's mtime: later than the session's newest line (so a summary can tell
        it is current) and than this object's previous batch (so the SDK's listing order
        is the write order, even for sessions written within one millisecond)."""
        with self._stamp_lock:
            stamp = max(self._clock(), (newest or 0) + 1, self._last_stamp + 1)
            self._last_stamp = stamp
            return stamp

    def _look(self, store_key: str) -> tuple[int, int, str, int | None] | None:
        """``(message count, size, newest line id, its created_at)``: O(1), and different
        after any change to the transcript. None for a missing session."""
        meta = self.store.get_session_metadata(store_key)
        if meta is None:
            return None
        try:
            newest = self.store.page(store_key, limit=1).messages
        except SessionNotFoundError:  # deleted meanwhile (possible only without a guard)
            return None
        last = newest[-1] if newest else None
        return (meta.message_count, meta.size_bytes, last.id if last else "", last.created_at if last else None)

    def _write_summary(self, key: ClaudeKey, store_key: str, fresh: list[dict[str, Any]], newest: int | None,
                       stamp: int) -> None:
        """Fold ``fresh`` into the stored summary when that summary is current (its mtime
        is the newest line's time before this append), else fold the whole transcript."""
        assert self._fold is not None
        sdk_key = {"project_key": key.project_key, "session_id": key.session_id}
        meta = self.store.get_session_metadata(store_key)
        context = dict(meta.context) if meta is not None else {}
        previous = _parse_summary(context.get(SUMMARY_CONTEXT))
        if previous is not None and newest is not None and previous["mtime"] == newest:
            summary = dict(self._fold(previous, sdk_key, fresh))
        else:
            summary = dict(self._fold(None, sdk_key, _new_entries(set(), _entries_of(self.store.load(store_key)))))
        summary["mtime"] = stamp
        context[SUMMARY_CONTEXT] = json.dumps(summary, ensure_ascii=False, separators=(",", ":"))
        self.store.set_session_context(store_key, context)

    def delete(self, key: ClaudeKey) -> None:
        """Delete one transcript; for a main key (no subpath) its subagent transcripts
        first, then the session, so an interrupted delete leaves the session listed and a
        second call finishes it. Each deletion is atomic; a missing key is no error."""
        doomed = [ClaudeKey(key.project_key, key.session_id, sub) for sub in self.list_subkeys(key)] \
            if key.subpath is None else []
        for gone in [*doomed, key]:
            store_key = gone.store_key(self.prefix)
            self._known.pop(store_key, None)
            self.store.delete_session(store_key)

    # -- reading ----------------------------------------------------------------------
    def load(self, key: ClaudeKey) -> list[dict[str, Any]] | None:
        """The entries, in append order, each ``uuid`` once; None for a key never written
        (or deleted). Lines written by other code (no Claude entry) are left out; corrupt
        lines are skipped with a logged warning. Takes no lock; O(session)."""
        store_key = key.store_key(self.prefix)
        if not self.store.session_exists(store_key):
            return None
        return _new_entries(set(), _entries_of(self.store.load(store_key)))

    def list_sessions(self, project_key: str) -> list[tuple[str, int]]:
        """``(session_id, mtime)`` of every main transcript of ``project_key``; ``mtime``
        is the ``created_at`` (epoch ms) of its newest line, the session's last write
        time for an empty one. Unordered; O(sessions in the store)."""
        out = []
        for key in self._keys(project_key):
            if key.subpath is None:
                mtime = self._mtime(key.store_key(self.prefix))
                if mtime is not None:
                    out.append((key.session_id, mtime))
        return out

    def _mtime(self, store_key: str) -> int | None:
        try:
            newest = self.store.page(store_key, limit=1).messages
        except SessionNotFoundError:
            return None  # deleted meanwhile
        if newest and newest[-1].created_at is not None:
            return newest[-1].created_at
        meta = self.store.get_session_metadata(store_key)
        if meta is None:
            return None
        return int(meta.updated_at.timestamp() * 1000) if meta.updated_at is not None else now_ms()

    def summaries(self, project_key: str) -> list[dict[str, Any]]:
        """The stored summary (``{"session_id", "mtime", "data"}``) of every main
        transcript of ``project_key`` that has one. O(sessions in the store)."""
        out = []
        for key in self._keys(project_key):
            if key.subpath is not None:
                continue
            meta = self.store.get_session_metadata(key.store_key(self.prefix))
            text = None if meta is None else meta.context.get(SUMMARY_CONTEXT)
            summary = _parse_summary(text)
            if summary is not None:
                out.append({"session_id": key.session_id, "mtime": summary["mtime"], "data": summary["data"]})
        return out

    def list_subkeys(self, key: ClaudeKey) -> list[str]:
        """The subpaths of the session's subagent transcripts, sorted. O(sessions in the store)."""
        main = key.main
        return sorted(
            k.subpath for k in self._keys(key.project_key) if k.subpath is not None and k.main == main
        )

    def _keys(self, project_key: str) -> Iterator[ClaudeKey]:
        start = project_prefix(project_key, self.prefix)
        for store_key in self.store.list_sessions():
            if store_key.startswith(start):
                key = ClaudeKey.parse(store_key, self.prefix)
                if key is not None and key.project_key == project_key:
                    yield key


def _uuid(entry: Mapping[str, Any]) -> str | None:
    value = entry.get("uuid")
    return value if isinstance(value, str) and value else None


@dataclass
class _Known:
    look: tuple[int, int, str] | None
    uuids: set[str]


def _uuids(messages: list[ChatMessage]) -> set[str]:
    return {u for u in map(_uuid, _entries_of(messages)) if u is not None}


def _new_entries(known: set[str], entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The entries whose ``uuid`` neither ``known`` nor an earlier entry holds."""
    seen = set(known)
    fresh = []
    for entry in entries:
        uuid = _uuid(entry)
        if uuid is not None:
            if uuid in seen:
                continue
            seen.add(uuid)
        fresh.append(dict(entry))
    return fresh


def _entries_of(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The Claude entries held by ``messages`` (lines of other code left out)."""
    return [e for e in (message_to_entry(m) for m in messages) if e is not None]


def _parse_summary(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        summary = json.loads(text)
    except ValueError:
        return None
    if not isinstance(summary, dict) or type(summary.get("mtime")) is not int or not isinstance(summary.get("data"), dict):
        return None
    return summary
