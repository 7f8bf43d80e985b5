"""SessionStore: the crash-safe JSONL session store (the public facade).

Arguments are checked by :class:`~jsonl_sessions.base.BaseStore`, which calls the
primitives here; they hand the work to the object that owns it: a
:class:`~jsonl_sessions.jsonl.session.Session` for everything done to one session's
messages (load, append, change the end, replace, clear, delete, windows, pages, fork,
revert), :mod:`~jsonl_sessions.jsonl.metadata` and :mod:`~jsonl_sessions.jsonl.search` across
sessions, :mod:`~jsonl_sessions.jsonl.maintenance` (compact, cleanup),
:mod:`~jsonl_sessions.jsonl.verify` (the health check). Mutations run inside
:func:`jsonl_sessions.jsonl.txn.mutate`, lock-free reads inside
:func:`jsonl_sessions.jsonl.control.consistent`, whose module describes the whole
concurrency protocol; docs/format.md has the bytes.

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
import functools
import os
from collections.abc import Callable, Iterable
from typing import Any

from .. import _platform
from ..base import DEFAULT_MAX_MESSAGE_BYTES, BaseStore, Keep
from ..compaction import CompactionReport
from ..finding import Collector, MessageSearch
from ..listing import Listing
from ..types import (
    ChatMessage,
    Durability,
    MessageLike,
    Page,
    SessionList,
    SessionMetadata,
    as_message,
)
from ..verification import VerifyReport
from . import append as appending
from . import ftsindex, maintenance, metadata, prune, search
from .guard import REGISTRY, SessionGuard
from .layout import SessionFiles, list_keys
from .session import Session
from .txn import Root, acquire
from .verify import Clear, verify_directory


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

    The methods' contract is :class:`~jsonl_sessions.protocol.SessionBackend`'s. What this
    backend adds to it:

    - Reads take no lock and see one committed state (a read overlapping an in-place
      change is retried). A message is a complete line: a torn tail is never one, a
      corrupt line counts as a position and is skipped (logged) by the lenient reads; a
      symlinked transcript is skipped by :meth:`load` and raises
      :class:`UnsafePathError` from :meth:`try_load`; a lock file that is not a regular
      file raises it from :meth:`try_load` too, while :meth:`load` logs it and reads the
      transcript without it. Loads and :meth:`compact` cost
      O(transcript).
    - Counts, windows and pages never parse more than they return: :meth:`get_message_count`
      is O(1) with the count cache; :meth:`get_message` and cursors use a binary search
      over byte offsets (ids increase down the file; O(log n) block reads);
      :meth:`get_messages` counts newlines from the nearer end (O(window + the smaller of
      offset and count - offset) bytes); :meth:`page` reads from the end, ``ts_before``
      reading each line's time off its prefix and ``whole_turns`` looking for a call among
      the 1024 lines before its result.
    - :meth:`append` is one write of one line (fsynced in fsync mode), O(1) in the
      transcript size. A torn tail left by a crash is removed first, its bytes saved to a
      quarantine file (logged). In fsync mode, threads appending to one session at once
      share one write and one fsync (group commit): each returns once its line is
      fsynced, and a failed write or fsync fails every append it covered.
    - :meth:`remove_last` and :meth:`truncate_messages` truncate at a line boundary
      (marked in the control file so lock-free readers retry around it);
      :meth:`update_last` and the replaces commit a roll-forward record that the next
      guard holder completes; whole-file changes go through temp file, fsync, rename and
      directory fsync; :meth:`get_session_trim_breadcrumb` never pairs a new transcript
      with an old flag.
    - :meth:`copy_messages` holds both guards (taken in lock-path order) and streams the
      source's committed lines verbatim (a corrupt line in the range is copied as it is);
      the sidecar is written first (a sidecar alone is not a session), then the
      transcript. :meth:`delete_session` removes the transcript first, so a crash
      half-way leaves no session (an orphan sidecar is removed by the next create or
      delete).
    - Metadata is the sidecar plus file stats: activity is the newest modification time
      of transcript and sidecar. Listings read sidecars, stats and the count cache only,
      O(files in root); :meth:`list_sessions` skips files the store did not make and
      symlinks.
    - :meth:`search` streams transcripts in 1 MiB blocks, newest activity first, stopping
      once ``limit`` sessions matched; a pure-ASCII line without the keyword is skipped
      without decoding.
    - :meth:`cleanup_stale` also spares a session whose guard is held (busy), deletes each
      session under its guard after checking it again, then removes orphan sidecars older
      than the TTL and the lock files of sessions that no longer exist (not counted). A
      transcript whose ``lstat`` fails with an I/O error raises that ``OSError``.
    - :meth:`compact` also drops a leading UTF-8 BOM; ``repair=True`` first copies the
      original bytes to ``<stem>.quarantine-<UTC time>.jsonl.bak`` (fsynced, with the
      directory).
    - :meth:`verify` reads the files as they are on disk (no guard taken, no recovery
      run unless ``fix``): torn tails, corrupt lines, ids out of order, sidecars missing,
      corrupt, mismatched or orphaned, leftover temp files, interrupted writes,
      permissions, symlinks. Opening the store removed the temp files of sessions nobody
      held; those left since are found.
    - :meth:`close` releases the descriptors kept open for the directory's sessions (lock
      files, transcripts kept open between mutations); the store stays usable and
      reopens what it needs.
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
        self._options(durability, lock_timeout, max_message_bytes, clock)
        path = os.path.abspath(os.fspath(root))
        self._root = Root(path, durability == "fsync", lock_timeout, self._clock, max_message_bytes)
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
        self._root.close()

    def _files(self, key: str) -> SessionFiles:
        return self._root.files(key)

    def _session(self, key: str) -> Session:
        """The session ``key`` (raises :class:`InvalidSessionKeyError`); cheap: make one per call."""
        return Session(self._root, self._root.files(key))

    def lock(self, key: str) -> contextlib.AbstractContextManager[SessionGuard]:
        return _Held(self._root, self._files(key))

    # -- reading -----------------------------------------------------------------------------
    def session_exists(self, key: str) -> bool:
        return self._session(key).exists()

    def list_sessions(self) -> list[str]:
        return list_keys(self._root.path)

    def get_session_trim_breadcrumb(self, key: str) -> bool | None:
        return self._session(key).breadcrumb()

    # -- appending ---------------------------------------------------------------------------
    def append(self, key: str, message: MessageLike) -> str:
        # Straight to the append path (what Session.append does), the hottest call of the store,
        # with Root.files' cache looked up here.
        root = self._root
        try:
            files = root.known[key]
        except (KeyError, TypeError):  # a key not seen yet (validated there), or not even hashable
            files = root.files(key)
        return appending.append(root, files, as_message(message))

    # -- changing the end --------------------------------------------------------------------
    def remove_last(self, key: str, *, expected_id: str | None = None) -> bool:
        return self._session(key).remove_last(expected_id)

    # -- clearing and deleting ---------------------------------------------------------------
    def clear_messages(self, key: str) -> int:
        return self._session(key).clear()

    def delete_session(self, key: str) -> bool:
        return self._session(key).delete()

    # -- message history ---------------------------------------------------------------------
    def get_message_count(self, key: str) -> int:
        return self._session(key).count()

    def get_message(self, key: str, message_id: str) -> ChatMessage | None:
        return self._session(key).get_message(message_id)

    def copy_messages(self, source: str, target: str, *, up_to_message_id: str | None = None) -> str | None:
        return self._session(source).fork(self._session(target), up_to_message_id)

    def truncate_messages(self, key: str, up_to_message_id: str) -> int:
        return self._session(key).truncate(up_to_message_id)

    # -- metadata ----------------------------------------------------------------------------
    def get_session_metadata(self, key: str) -> SessionMetadata | None:
        return metadata.get_session_metadata(self._root, self._files(key))

    # -- the primitives of BaseStore ---------------------------------------------------------
    def _load(self, key: str, *, strict: bool) -> list[ChatMessage]:
        session = self._session(key)
        return session.try_load() if strict else session.load()

    def _check_strict(self, key: str) -> int:
        """What :meth:`try_load` raises (:class:`CorruptTranscriptError` naming the file,
        line and byte offset), found with a block of messages in memory, not the session.
        Cost: O(n) reading, O(block) memory."""
        return self._session(key).check()

    def _get_messages(self, key: str, limit: int | None, offset: int) -> list[ChatMessage]:
        return self._session(key).window(limit, offset)

    def _page(self, key: str, limit: int, before: str | None, after: str | None, ts_before: int | None,
              breakpoint: bool, whole_turns: bool) -> Page:
        return self._session(key).page(limit=limit, before=before, after=after, ts_before=ts_before,
                                       breakpoint=breakpoint, whole_turns=whole_turns)

    def _append_many(self, key: str, messages: list[ChatMessage]) -> list[str]:
        return self._session(key).append_many(messages)

    def _update_last(self, key: str, message: ChatMessage, expected_id: str | None) -> bool:
        return self._session(key).update_last(message, expected_id)

    def _rewrite(self, key: str, messages: list[ChatMessage]) -> None:
        self._session(key).rewrite(messages)

    def _replace_state(self, key: str, messages: list[ChatMessage], breadcrumb: bool, *, if_exists: bool) -> bool:
        return self._session(key).replace_state(messages, breadcrumb, if_exists=if_exists)

    def _delete_session_owned(self, key: str, owner: str) -> bool:
        return metadata.delete_session_owned(self._root, self._files(key), owner)

    def _cleanup_stale(self, ttl_hours: float) -> int:
        return len(maintenance.cleanup_stale(self._root, ttl_hours).deleted)

    def _compaction_report(self, key: str, repair: bool) -> CompactionReport:
        return maintenance.compact(self._root, self._files(key), repair=repair)

    def _search(self, needle: str, limit: int | None, alias: str | None) -> list[SessionMetadata]:
        return search.search(self._root, needle, limit, alias)

    def _find_messages(self, found: MessageSearch, collector: Collector) -> None:
        if not ftsindex.find_messages(self._root, found, collector):
            search.find_messages(self._root, found, collector)

    def _meta_of(self, key: str) -> dict[str, Any] | None:
        return metadata.meta_of(self._files(key))

    def _set_field(self, key: str, name: str, value: object) -> None:
        metadata.set_field(self._root, self._files(key), name, value)

    def _set_state(self, key: str, state: str, turn: str | None) -> None:
        metadata.set_session_state(self._root, self._files(key), state, turn)

    def _where(self, keep: Keep) -> list[SessionMetadata]:
        return metadata.where(self._root, lambda look: keep(look.meta))

    def _list(self, listing: Listing) -> SessionList:
        return metadata.listing(self._root, listing)

    def _list_all(self) -> list[SessionMetadata]:
        return metadata.everything(self._root)

    def _count_where(self, keep: Keep) -> int:  # no message count read
        return sum(1 for _files, look in metadata.looks(self._root) if keep(look.meta))

    def _reattribute(self, old: str, new: str | None) -> int:
        return metadata.reattribute(self._root, old, new)

    # -- health check ------------------------------------------------------------------------
    def verify(self, keys: Iterable[str] | None = None, *, fix: bool = False) -> VerifyReport:
        clear = functools.partial(clear_leftovers, self)
        return verify_directory(self._root.path, keys, fix=(lambda: clear) if fix else None)


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


def fixer(root: str, lock_timeout: float | None) -> Callable[[], Clear]:
    """What :func:`~jsonl_sessions.jsonl.verify.verify_directory` takes as ``fix`` to clear
    leftovers in the directory ``root`` without a store at hand: :func:`clear_leftovers` on a
    :class:`SessionStore` opened on ``root`` (guards waiting up to ``lock_timeout``) when
    there is something to clear, not before."""
    return lambda: functools.partial(clear_leftovers, SessionStore(root, lock_timeout=lock_timeout))


__all__ = ["Durability", "MessageLike", "SessionStore", "clear_leftovers", "compaction_report", "fixer", "prune_report"]
