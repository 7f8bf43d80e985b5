"""The operations of a Claude session store, on any session backend.

:class:`ClaudeSessions` keeps Claude Code transcripts (see :mod:`.claude_code` for the
line mapping and the keys) in a store and is what the Claude Agent SDK adapter and the
``import --from claude-code`` command run. Every method is blocking.

Guarantees (with :class:`jsonl_sessions.SessionStore`, or any backend that has a
``lock(key)`` guard like it):

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
- A backend without ``lock`` still gets all-or-nothing appends, but two processes
  sending the same ``uuid`` at the same moment may both write it; :meth:`load` returns
  the first occurrence only, so readers never see the duplicate.

Costs: ``append`` and ``load`` read the whole transcript (O(session)); the listings are
O(sessions in the store).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ..errors import SessionNotFoundError
from ..ids import now_ms
from ..protocol import SessionBackend
from ..types import ChatMessage
from .claude_code import DEFAULT_PREFIX, ClaudeKey, entry_to_message, message_to_entry, project_prefix

__all__ = ["SUMMARY_CONTEXT", "ClaudeSessions", "Fold", "guard"]

#: The sidecar context entry holding a session's summary (JSON text).
SUMMARY_CONTEXT = "claude_agent_sdk.summary"

#: ``fold(previous_summary, sdk_key, entries) -> summary``: the SDK's ``fold_session_summary``.
Fold = Callable[[Any, Any, Any], Any]


class ClaudeSessions:
    """``ClaudeSessions(store, *, prefix="claude/", fold=None)``: the Claude sessions kept
    in ``store`` under keys starting with ``prefix``; ``fold`` maintains summaries."""

    def __init__(self, store: SessionBackend, *, prefix: str = DEFAULT_PREFIX, fold: Fold | None = None) -> None:
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a string, not {type(prefix).__name__}")
        self.store = store
        self.prefix = prefix
        self._fold = fold

    # -- writing ----------------------------------------------------------------------
    def append(self, key: ClaudeKey, entries: Sequence[Mapping[str, Any]]) -> int:
        """Append the entries whose ``uuid`` the transcript does not hold yet (creating
        the session if needed); how many were written. TypeError for an entry that is not
        a mapping, :class:`~jsonl_sessions.SerializationError` (a TypeError) for one that
        is not JSON: nothing written."""
        for entry in entries:
            if not isinstance(entry, Mapping):
                raise TypeError(f"a transcript entry must be a mapping (a dict), not {type(entry).__name__}")
        if not entries:
            return 0
        store_key = key.store_key(self.prefix)
        with guard(self.store, store_key):
            existing = self.store.load(store_key)
            known = _first_of_each(_entries_of(existing))
            every = _first_of_each(known + [dict(e) for e in entries])
            fresh = every[len(known):]
            if not fresh:
                return 0
            newest = existing[-1].created_at if existing else None
            stamp = max(now_ms(), (newest or 0) + 1)  # each batch a later time: summaries can tell
            self.store.append_many(store_key, [entry_to_message(e, created_at=stamp) for e in fresh])
            if key.subpath is None and self._fold is not None:
                self._write_summary(key, store_key, every, stamp)
        return len(fresh)

    def _write_summary(self, key: ClaudeKey, store_key: str, entries: list[dict[str, Any]], stamp: int) -> None:
        assert self._fold is not None
        sdk_key = {"project_key": key.project_key, "session_id": key.session_id}
        summary = dict(self._fold(None, sdk_key, entries))
        summary["mtime"] = stamp
        meta = self.store.get_session_metadata(store_key)
        context = dict(meta.context) if meta is not None else {}
        context[SUMMARY_CONTEXT] = json.dumps(summary, ensure_ascii=False, separators=(",", ":"))
        self.store.set_session_context(store_key, context)

    def delete(self, key: ClaudeKey) -> None:
        """Delete one transcript; for a main key (no subpath) its subagent transcripts
        first, then the session, so an interrupted delete leaves the session listed and a
        second call finishes it. Each deletion is atomic; a missing key is no error."""
        if key.subpath is None:
            for subpath in self.list_subkeys(key):
                self.store.delete_session(ClaudeKey(key.project_key, key.session_id, subpath).store_key(self.prefix))
        self.store.delete_session(key.store_key(self.prefix))

    # -- reading ----------------------------------------------------------------------
    def load(self, key: ClaudeKey) -> list[dict[str, Any]] | None:
        """The entries, in append order, each ``uuid`` once; None for a key never written
        (or deleted). Lines written by other code (no Claude entry) are left out; corrupt
        lines are skipped with a logged warning. Takes no lock; O(session)."""
        store_key = key.store_key(self.prefix)
        if not self.store.session_exists(store_key):
            return None
        return _first_of_each(_entries_of(self.store.load(store_key)))

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


def guard(store: SessionBackend, key: str) -> contextlib.AbstractContextManager[Any]:
    """The session's guard when the backend has one (``lock(key)``), to make a read and a
    write one step for every writer; otherwise a no-op."""
    lock = getattr(store, "lock", None)
    return lock(key) if callable(lock) else contextlib.nullcontext()


def _uuid(entry: Mapping[str, Any]) -> str | None:
    value = entry.get("uuid")
    return value if isinstance(value, str) and value else None


def _entries_of(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The Claude entries held by ``messages`` (lines of other code left out)."""
    return [e for e in (message_to_entry(m) for m in messages) if e is not None]


def _first_of_each(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``entries`` without the repeats of a ``uuid`` (the first one stays)."""
    seen: set[str] = set()
    out = []
    for entry in entries:
        uuid = _uuid(entry)
        if uuid is not None:
            if uuid in seen:
                continue
            seen.add(uuid)
        out.append(entry)
    return out


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
