"""SessionStore: the crash-safe JSONL session store (the public facade).

Each method checks its arguments and hands the work to the module that owns it:
:mod:`~jsonl_sessions.jsonl.messages` (load, append, change the end, replace, delete),
:mod:`~jsonl_sessions.jsonl.history` and :mod:`~jsonl_sessions.jsonl.paging` (ids, windows, pages,
fork, revert), :mod:`~jsonl_sessions.jsonl.metadata` and :mod:`~jsonl_sessions.jsonl.search`,
:mod:`~jsonl_sessions.jsonl.maintenance` (compact, cleanup). Mutations run inside
:func:`jsonl_sessions.jsonl.txn.mutate`, lock-free reads inside :mod:`jsonl_sessions.jsonl.reads`;
docs/format.md has the bytes.

Guarantees:

- Every mutation holds the session's guard: reentrant in a thread, exclusive across
  threads and processes, per session.
- Every mutation is all-or-nothing on disk, also after SIGKILL or an I/O error: appends
  are one write of newline-terminated lines (a torn tail is never a message), removals
  truncate at a line boundary, whole-file changes go through temp + fsync + rename, and
  multi-step changes first commit a roll-forward record that the next guard holder
  completes.
- ``durability="fsync"``: a mutation is on stable storage when it returns (file fsync,
  and directory fsync after create / rename / unlink). ``"flush"``: written to the OS
  (survives a process crash, not a power loss).
- Readers take no lock and always see a consistent prefix of committed lines.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from .. import _platform
from ..arguments import check_options
from ..base import BaseStore, Keep
from ..compaction import CompactionReport
from ..ids import now_ms
from ..types import (
    ChatMessage,
    Durability,
    MessageLike,
    Page,
    SessionMetadata,
    as_message,
)
from . import append as warm
from . import group_commit as group
from . import history, maintenance, metadata, paging, prune, search
from . import messages as ops
from .guard import REGISTRY, SessionGuard
from .layout import SessionFiles, list_keys
from .txn import Root, acquire

DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class _Held:
    """``with``-block holding a session's guard."""

    __slots__ = ("_files", "_root", "guard")

    def __init__(self, root: Root, files: SessionFiles) -> None:
        self._root = root
        self._files = files

    def __enter__(self) -> SessionGuard:
        self.guard = acquire(self._root, self._files)
        return self.guard

    def __exit__(self, *exc: object) -> None:
        self.guard.release()


class SessionStore(BaseStore):
    """A directory of sessions, each a JSONL transcript plus a sidecar.

    ``root`` is created (mode 0700) if missing. Thread-safe; several processes may open
    the same root at once. ``lock_timeout`` (seconds, None = forever) bounds the wait
    for a session's guard (:class:`LockTimeoutError`). ``max_message_bytes`` bounds one
    encoded message (:class:`InvalidMessageError`, nothing written). ``clock`` returns
    milliseconds since the epoch (for tests of id monotonicity; default: wall clock).
    Opening a store removes temp files left by interrupted writes of sessions nobody
    holds (completing their committed records first).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        durability: Durability = "fsync",
        lock_timeout: float | None = 30.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        clock: Callable[[], int] | None = None,
    ) -> None:
        check_options(durability, lock_timeout, max_message_bytes)
        path = os.path.abspath(os.fspath(root))
        self._durability: Durability = durability
        self._root = Root(path, durability == "fsync", lock_timeout, clock or now_ms, max_message_bytes)
        self._clock = self._root.clock
        REGISTRY.fit(_platform.fd_limit())  # what the process keeps open stays within its limit
        if not _platform.is_dir(path):
            _platform.makedirs(path)
            if self._root.durable:
                _platform.fsync_dir(os.path.dirname(path) or ".")
        maintenance.clean_leftovers(self._root)

    @property
    def root(self) -> str:
        return self._root.path

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._root.path!r}, durability={self._durability!r})"

    def close(self) -> None:
        """Release every descriptor kept open for the sessions of this store's directory:
        their lock files and the transcripts kept open between mutations (those of
        sessions no thread is mutating right now; the guards are shared by every store
        of the directory in the process). Stored data is untouched; the store stays
        usable (it reopens what it needs). Idempotent."""
        self._root.close()

    def _files(self, key: str) -> SessionFiles:
        return self._root.files(key)

    def lock(self, key: str) -> contextlib.AbstractContextManager[SessionGuard]:
        """Hold ``key``'s mutation guard for a block, to make several calls one unit for
        other writers (reentrant: the store's own methods work inside it)."""
        return _Held(self._root, self._files(key))

    # -- reading -----------------------------------------------------------------------------
    def session_exists(self, key: str) -> bool:
        """Whether the session's transcript exists (a regular file). Takes no lock."""
        return self._files(key).transcript_exists()

    def list_sessions(self) -> list[str]:
        """Every session's original key, sorted. Never parses a transcript; skips files the
        store did not make and symlinks. Cost: O(files in root)."""
        return list_keys(self._root.path)

    def get_session_trim_breadcrumb(self, key: str) -> bool | None:
        """The recorded breadcrumb flag; None when the session is missing or never set it.
        Takes no lock, yet never pairs a new transcript with an old flag: the renames of
        a replace happen with the control file's counter odd, and a committed but
        unfinished replace is completed first (see :mod:`jsonl_sessions.jsonl.reads`)."""
        return ops.get_trim_breadcrumb(self._root, self._files(key))

    # -- appending ---------------------------------------------------------------------------
    def append(self, key: str, message: MessageLike) -> str:
        """Append one message (creating the session if needed); return its id.

        One write of one newline-terminated line; fsynced in fsync mode. A torn tail left
        by a crash (or by a truncate) is removed first, its bytes saved to a quarantine
        file (logged); a corrupt line is never touched. Raises
        :class:`SerializationError` / :class:`InvalidMessageError` /
        :class:`DuplicateMessageError` with nothing written. Cost: O(1) in the
        transcript size. In fsync mode, threads appending to the same session at once
        share one write and one fsync (group commit): each returns only once its line
        is fsynced, and a failed write or fsync fails every append it covered, none of
        which appears later."""
        if self._root.durable:
            return self.append_many(key, (message,))[0]
        return warm.append(self._root, self._files(key), as_message(message))

    # -- changing the end --------------------------------------------------------------------
    def remove_last(self, key: str, *, expected_id: str | None = None) -> bool:
        """Remove the newest message; True when one was removed. With ``expected_id``,
        only when the newest message has that id (compare-and-remove). Truncates at the
        line boundary: O(1) in the transcript size. A corrupt last line raises
        :class:`CorruptTranscriptError` and leaves the file byte-for-byte unchanged."""
        return ops.remove_last(self._root, self._files(key), expected_id)

    # -- clearing and deleting ---------------------------------------------------------------
    def clear_messages(self, key: str) -> int:
        """Remove every message, keeping the session (and its metadata); the number
        removed. Refuses a transcript with corrupt lines (:class:`CorruptTranscriptError`)."""
        return ops.clear(self._root, self._files(key))

    def delete_session(self, key: str) -> bool:
        """Delete the session's transcript, sidecar and temp files; True if it existed.
        The transcript goes first, so a crash half-way leaves no session (an orphan
        sidecar is not one, and is removed by the next create or delete)."""
        return ops.delete(self._root, self._files(key))

    # -- message history ---------------------------------------------------------------------
    def get_message_count(self, key: str) -> int:
        """How many messages the session holds (complete lines: a corrupt line counts, a
        torn tail does not). Raises :class:`SessionNotFoundError` for a missing session.
        Takes no lock; never counts a state being rewritten. Cost: that of the store's
        line count (O(1) in the transcript size with its count cache)."""
        return history.get_message_count(self._root, self._files(key))

    def get_message(self, key: str, message_id: str) -> ChatMessage | None:
        """The message with id ``message_id``; None when the session has none (or does not
        exist, or that line is corrupt: logged). Binary search over byte offsets (ids
        increase down the file): O(log n) block reads, one line parsed. Takes no lock."""
        return history.get_message(self._root, self._files(key), message_id)

    def copy_messages(self, source: str, target: str, *, up_to_message_id: str | None = None) -> str | None:
        """Fork / share: create session ``target`` holding ``source``'s messages up to and
        including ``up_to_message_id`` (all when None), with the same ids and timestamps;
        record ``parent`` (= source) and ``fork_point`` (the last copied id) in the
        target's sidecar, along with the source's trim-breadcrumb flag (it describes the
        copied first message). Returns the fork-point id; None when nothing was copied
        (an empty source still gets an empty target).

        Raises :class:`SessionNotFoundError` (missing source), :class:`SessionExistsError`
        (the target exists, also when it is the source), :class:`MessageNotFoundError`
        (unknown id; nothing created), :class:`CorruptTranscriptError` (the named
        message's line does not parse).

        Both guards are held (taken in lock-path order, so two opposite forks cannot
        deadlock). The bytes of the source's committed lines are streamed verbatim: no
        parse, no re-encode, so a corrupt line inside the range is copied as it is (the
        fork reads exactly like the source). Crash-atomic: the sidecar is written first
        (a sidecar alone is not a session), then the transcript via temp file, fsync,
        rename and directory fsync: the target appears whole or not at all.
        Cost: O(log n) to find the id, plus the copy."""
        return history.copy_messages(self._root, self._files(source), self._files(target), up_to_message_id)

    def truncate_messages(self, key: str, up_to_message_id: str) -> int:
        """Revert: keep the messages up to and including ``up_to_message_id``, remove the
        newer ones; returns how many were removed (0: it is the newest).

        Raises :class:`SessionNotFoundError` (missing session), :class:`MessageNotFoundError`
        (unknown id) and :class:`CorruptTranscriptError` (a removed line, or the named
        one, does not parse), each with the file unchanged. Under the guard: the line is
        found by binary search, the removed bytes are parsed strictly, then one
        ``ftruncate`` at the line boundary (fsynced in fsync mode), marked in the control
        file so lock-free readers retry around it. Crash-atomic (a truncate is all or
        nothing). A torn tail goes too. Cost: O(log n + removed part)."""
        return history.truncate_messages(self._root, self._files(key), up_to_message_id)

    # -- metadata ----------------------------------------------------------------------------
    def get_session_metadata(self, key: str) -> SessionMetadata | None:
        """The session's metadata; None when it does not exist. Reads the sidecar and file
        stats, never the messages (``message_count`` comes from the count cache: O(1)).
        Raises :class:`CorruptMetadataError` when the sidecar is unreadable (the session
        itself still loads). Takes no lock."""
        return metadata.get_session_metadata(self._root, self._files(key))

    # -- the primitives of BaseStore ---------------------------------------------------------
    def _load(self, key: str, *, strict: bool) -> list[ChatMessage]:
        files = self._files(key)
        return ops.try_load(self._root, files) if strict else ops.load(self._root, files)

    def _get_messages(self, key: str, limit: int | None, offset: int) -> list[ChatMessage]:
        return history.get_messages(self._root, self._files(key), limit, offset)

    def _page(self, key: str, limit: int, before: str | None, after: str | None, ts_before: int | None,
              breakpoint: bool, whole_turns: bool) -> Page:
        return paging.page(self._root, self._files(key), limit=limit, before=before, after=after, ts_before=ts_before,
                           breakpoint=breakpoint, whole_turns=whole_turns)

    def _append_many(self, key: str, messages: list[ChatMessage]) -> list[str]:
        files = self._files(key)
        if len(messages) == 1 and self._root.durable:  # threads appending to one session share the fsync
            return [group.append(self._root, files, messages[0])]
        return ops.append_many(self._root, files, messages)

    def _update_last(self, key: str, message: ChatMessage, expected_id: str | None) -> bool:
        return ops.update_last(self._root, self._files(key), message, expected_id)

    def _rewrite(self, key: str, messages: list[ChatMessage]) -> None:
        ops.rewrite(self._root, self._files(key), messages)

    def _replace_state(self, key: str, messages: list[ChatMessage], breadcrumb: bool, *, if_exists: bool) -> bool:
        return ops.replace_state(self._root, self._files(key), messages, breadcrumb, if_exists=if_exists)

    def _delete_session_owned(self, key: str, owner: str) -> bool:
        return metadata.delete_session_owned(self._root, self._files(key), owner)

    def _cleanup_stale(self, ttl_hours: float) -> int:
        return len(maintenance.cleanup_stale(self._root, ttl_hours).deleted)

    def _compaction_report(self, key: str, repair: bool) -> CompactionReport:
        return maintenance.compact(self._root, self._files(key), repair=repair)

    def _search(self, needle: str, limit: int | None, alias: str | None) -> list[SessionMetadata]:
        return search.search(self._root, needle, limit, alias)

    def _meta_of(self, key: str) -> dict[str, Any] | None:
        return metadata.meta_of(self._files(key))

    def _set_field(self, key: str, name: str, value: object) -> None:
        metadata.set_field(self._root, self._files(key), name, value)

    def _set_state(self, key: str, state: str, turn: str | None) -> None:
        metadata.set_session_state(self._root, self._files(key), state, turn)

    def _where(self, keep: Keep) -> list[SessionMetadata]:
        return metadata.where(self._root, lambda look: keep(look.meta))

    def _count_where(self, keep: Keep) -> int:  # no message count read
        return sum(1 for _files, look in metadata.looks(self._root) if keep(look.meta))

    def _reattribute(self, old: str, new: str | None) -> int:
        return metadata.reattribute(self._root, old, new)


def compaction_report(store: SessionStore, key: str, *, repair: bool = False) -> CompactionReport:
    """:meth:`SessionStore.compact` returning its whole report (what was kept and dropped,
    where the original bytes were saved, whether an interrupted write was completed
    first) instead of a count; logs nothing. Same errors, atomicity and cost."""
    return maintenance.compact(store._root, store._files(key), repair=repair)


def prune_report(store: SessionStore, *, orphans: bool = True) -> prune.PruneReport:
    """Remove the lock files of sessions that no longer exist (with ``orphans``, first the
    sidecars without a transcript and the temp files they left), each under its session's
    guard, skipping busy ones; what was removed. See :func:`jsonl_sessions.jsonl.prune.prune_locks`."""
    return prune.prune_locks(store._root, orphans=orphans)


def clear_leftovers(store: SessionStore, stem: str) -> list[str]:
    """Remove the temp files and a transcript-less sidecar of the session with file stem
    ``stem``, under its guard (waiting up to the store's ``lock_timeout``; recovery runs
    first); the paths removed. See :func:`jsonl_sessions.jsonl.prune.clear_leftovers`."""
    return prune.clear_leftovers(store._root, stem, store._root.lock_timeout)


__all__ = ["Durability", "MessageLike", "SessionStore", "clear_leftovers", "compaction_report", "prune_report"]
