"""SessionStore: the crash-safe JSONL session store (the public facade).

Each method checks its arguments and hands the work to the object that owns it: a
:class:`~jsonl_sessions.jsonl.session.Session` for everything done to one session's
messages (load, append, change the end, replace, clear, delete, windows, pages, fork,
revert), :mod:`~jsonl_sessions.jsonl.metadata` and :mod:`~jsonl_sessions.jsonl.search` across
sessions, :mod:`~jsonl_sessions.jsonl.maintenance` (compact, cleanup). Mutations run inside
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
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING

from .. import _platform
from ..arguments import check_context, check_options, check_text
from ..compaction import CompactionReport
from ..ids import now_ms
from ..types import (
    ChatMessage,
    Durability,
    MessageLike,
    Page,
    SessionMetadata,
    SessionQuery,
    SessionState,
    TimestampedMessage,
    as_message,
    datetime_of_ms,
)
from ..verification import VerifyReport
from . import maintenance, metadata, prune, search, sidecar
from .guard import REGISTRY, SessionGuard
from .layout import SessionFiles, list_keys
from .session import Session
from .txn import Root, acquire
from .verify import verify_directory

if TYPE_CHECKING:
    from typing_extensions import Self

DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
log = logging.getLogger("jsonl_sessions")


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


class SessionStore:
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
        REGISTRY.fit(_platform.fd_limit())  # what the process keeps open stays within its limit
        if not _platform.is_dir(path):
            _platform.makedirs(path)
            if self._root.durable:
                _platform.fsync_dir(os.path.dirname(path) or ".")
        maintenance.clean_leftovers(self._root)

    @property
    def root(self) -> str:
        return self._root.path

    @property
    def durability(self) -> Durability:
        return self._durability

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._root.path!r}, durability={self._durability!r})"

    def close(self) -> None:
        """Release every descriptor kept open for the sessions of this store's directory:
        their lock files and the transcripts kept open between mutations (those of
        sessions no thread is mutating right now; the guards are shared by every store
        of the directory in the process). Stored data is untouched; the store stays
        usable (it reopens what it needs). Idempotent."""
        self._root.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _files(self, key: str) -> SessionFiles:
        return self._root.files(key)

    def _session(self, key: str) -> Session:
        """The session ``key`` (raises :class:`InvalidSessionKeyError`); cheap: make one per call."""
        return Session(self._root, self._root.files(key))

    def lock(self, key: str) -> contextlib.AbstractContextManager[SessionGuard]:
        """Hold ``key``'s mutation guard for a block, to make several calls one unit for
        other writers (reentrant: the store's own methods work inside it)."""
        return _Held(self._root, self._files(key))

    # -- reading -----------------------------------------------------------------------------
    def load(self, key: str) -> list[ChatMessage]:
        """Every message, oldest first; ``[]`` for a missing session. Lenient: corrupt
        lines (and an unreadable symlink) are skipped with a logged warning, never raised;
        use :meth:`try_load` before writing a history back. Cost: O(transcript)."""
        return self._session(key).load()

    def try_load(self, key: str) -> list[ChatMessage]:
        """Every message, oldest first; ``[]`` only for a missing or empty session.
        Raises :class:`CorruptTranscriptError` (with line and byte offset) for a complete
        line that does not parse, :class:`UnsafePathError` for a symlinked transcript.
        A torn tail is ignored. Takes no lock. Cost: O(transcript)."""
        return self._session(key).try_load()

    def load_with_timestamps(self, key: str) -> list[TimestampedMessage]:
        """Like :meth:`load`, each message with its ``created_at`` as an aware UTC datetime."""
        return [TimestampedMessage(m, datetime_of_ms(m.created_at)) for m in self.load(key)]

    def session_exists(self, key: str) -> bool:
        """Whether the session's transcript exists (a regular file). Takes no lock."""
        return self._session(key).exists()

    def list_sessions(self) -> list[str]:
        """Every session's original key, sorted. Never parses a transcript; skips files the
        store did not make and symlinks. Cost: O(files in root)."""
        return list_keys(self._root.path)

    def get_session_trim_breadcrumb(self, key: str) -> bool | None:
        """The recorded breadcrumb flag; None when the session is missing or never set it.
        Takes no lock, yet never pairs a new transcript with an old flag: the renames of
        a replace happen with the control file's counter odd, and a committed but
        unfinished replace is completed first (see :mod:`jsonl_sessions.jsonl.control`)."""
        return self._session(key).breadcrumb()

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
        return self._session(key).append(as_message(message))

    append_message = append

    def append_many(self, key: str, messages: Iterable[MessageLike]) -> list[str]:
        """Append several messages as one locked, single write (all or none, also after a
        crash: a batch commits a roll-forward record first); their ids."""
        return self._session(key).append_many([as_message(m) for m in messages])

    # -- changing the end --------------------------------------------------------------------
    def remove_last(self, key: str, *, expected_id: str | None = None) -> bool:
        """Remove the newest message; True when one was removed. With ``expected_id``,
        only when the newest message has that id (compare-and-remove). Truncates at the
        line boundary: O(1) in the transcript size. A corrupt last line raises
        :class:`CorruptTranscriptError` and leaves the file byte-for-byte unchanged."""
        return self._session(key).remove_last(expected_id)

    def update_last(self, key: str, message: MessageLike, *, expected_id: str | None = None) -> bool:
        """Replace the newest message; True when one was replaced (with ``expected_id``:
        only when the newest has that id). The new message keeps the old id and
        created_at unless it carries its own. Crash-atomic through a roll-forward record
        (the next guard holder completes an interrupted update); O(1) in the transcript
        size. A corrupt last line raises :class:`CorruptTranscriptError`, file unchanged."""
        return self._session(key).update_last(as_message(message), expected_id)

    # -- replacing everything ----------------------------------------------------------------
    def rewrite_messages(self, key: str, messages: Iterable[MessageLike]) -> None:
        """Atomically replace the whole transcript (creating the session if needed): temp
        file, streamed writes, fsync, rename, directory fsync. Messages without ids get
        ids that keep the order increasing. Refuses (:class:`CorruptTranscriptError`,
        nothing changed) when the current transcript holds corrupt lines. Cost: O(old + new)."""
        self._session(key).rewrite([as_message(m) for m in messages])

    def replace_conversation_state(self, key: str, messages: Iterable[MessageLike], breadcrumb_present: bool) -> None:
        """Replace the transcript and the trim-breadcrumb flag as one crash-atomic unit
        (both temp files written and fsynced, then a roll-forward record committed, then
        both renamed). Creates the session if needed."""
        self._session(key).replace_state([as_message(m) for m in messages], breadcrumb_present, if_exists=False)

    def replace_conversation_state_if_exists(
        self, key: str, messages: Iterable[MessageLike], breadcrumb_present: bool
    ) -> bool:
        """Like :meth:`replace_conversation_state`, but only while the session exists:
        False, and nothing written, when it was deleted. The existence check and both
        writes happen under the guard that delete takes, so a deleted session is never
        recreated."""
        return self._session(key).replace_state([as_message(m) for m in messages], breadcrumb_present,
                                                if_exists=True)

    def set_session_trim_breadcrumb(self, key: str, present: bool) -> None:
        """Record whether the transcript starts with a synthetic trim breadcrumb (sidecar,
        atomic). Raises :class:`SessionNotFoundError` for a missing session."""
        self._session(key).set_breadcrumb(present)

    # -- clearing and deleting ---------------------------------------------------------------
    def clear_messages(self, key: str) -> int:
        """Remove every message, keeping the session (and its metadata); the number
        removed. Refuses a transcript with corrupt lines (:class:`CorruptTranscriptError`)."""
        return self._session(key).clear()

    def delete_session(self, key: str) -> bool:
        """Delete the session's transcript, sidecar and temp files; True if it existed.
        The transcript goes first, so a crash half-way leaves no session (an orphan
        sidecar is not one, and is removed by the next create or delete)."""
        return self._session(key).delete()

    # -- message history ---------------------------------------------------------------------
    def get_message_count(self, key: str) -> int:
        """How many messages the session holds (complete lines: a corrupt line counts, a
        torn tail does not). Raises :class:`SessionNotFoundError` for a missing session.
        Takes no lock; never counts a state being rewritten. Cost: that of the store's
        line count (O(1) in the transcript size with its count cache)."""
        return self._session(key).count()

    def get_message(self, key: str, message_id: str) -> ChatMessage | None:
        """The message with id ``message_id``; None when the session has none (or does not
        exist, or that line is corrupt: logged). Binary search over byte offsets (ids
        increase down the file): O(log n) block reads, one line parsed. Takes no lock."""
        return self._session(key).get_message(message_id)

    def get_messages(self, key: str, *, limit: int | None = None, offset: int = 0) -> list[ChatMessage]:
        """The messages at positions ``[offset, offset + limit)`` (all from ``offset`` when
        ``limit`` is None), oldest first. Raises :class:`SessionNotFoundError` for a
        missing session, ValueError for a negative ``limit`` / ``offset``.

        Positions are those of :meth:`get_message_count` (complete lines); a corrupt line
        in the window is skipped with a logged warning, so concatenated windows equal
        :meth:`load`. A window in the newer half is found by counting newlines backwards
        from the end, one in the older half forwards from the start: only the window's
        lines are parsed, and the bytes read are O(window + the smaller of offset and
        count - offset) (newline counting, no parsing). Takes no lock."""
        return self._session(key).window(limit, offset)

    def page(
        self,
        key: str,
        *,
        limit: int = 100,
        before: str | None = None,
        after: str | None = None,
        ts_before: int | None = None,
        breakpoint: bool = False,
        whole_turns: bool = False,
    ) -> Page:
        """One page of messages, oldest first, for scrolling through a long session (the
        contract: :meth:`jsonl_sessions.protocol.SessionBackend.page`).

        Here: ``ts_before`` skips newer-stamped lines one by one (their time read off the
        line's prefix, not parsed: created_at need not increase down the file);
        ``whole_turns`` looks for a tool result's call among the 1024 lines before it.
        Corrupt lines are skipped (logged); they do not count towards ``limit``. Takes no
        lock; the page is one consistent state. Cost: O(page) reads and parses from the
        end, plus O(log n) block reads to find a cursor; never the whole transcript
        (``ts_before`` and a missing tool call aside)."""
        return self._session(key).page(limit=limit, before=before, after=after, ts_before=ts_before,
                                       breakpoint=breakpoint, whole_turns=whole_turns)

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
        return self._session(source).fork(self._session(target), up_to_message_id)

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
        return self._session(key).truncate(up_to_message_id)

    # -- metadata ----------------------------------------------------------------------------
    def get_session_metadata(self, key: str) -> SessionMetadata | None:
        """The session's metadata; None when it does not exist. Reads the sidecar and file
        stats, never the messages (``message_count`` comes from the count cache: O(1)).
        Raises :class:`CorruptMetadataError` when the sidecar is unreadable (the session
        itself still loads). Takes no lock."""
        return metadata.get_session_metadata(self._root, self._files(key))

    def list_sessions_with_metadata(self) -> list[SessionMetadata]:
        """Every session's metadata, in key order. Parses no transcript: sidecars, file
        stats and the count cache only (O(sessions)). A session whose sidecar is unreadable
        is listed with the fields the stats give (and a logged warning). Takes no lock."""
        return metadata.where(self._root, lambda _look: True)

    def set_session_name(self, key: str, name: str) -> None:
        """Set the human-readable name (any string, "" included). Atomic; raises
        :class:`SessionNotFoundError` for a missing session."""
        metadata.set_field(self._root, self._files(key), "name", check_text("name", name))

    def get_session_name(self, key: str) -> str | None:
        """The name; None when the session is missing or has none. Takes no lock."""
        return sidecar.text(metadata.meta_of(self._files(key)), "name")

    def set_session_agent_alias(self, key: str, agent_alias: str) -> None:
        """Record the agent alias the session is attributed to. Atomic; raises
        :class:`SessionNotFoundError` for a missing session."""
        value = check_text("agent_alias", agent_alias)
        metadata.set_field(self._root, self._files(key), "agent_alias", value)

    def get_session_agent_alias(self, key: str) -> str | None:
        """The agent alias; None when the session is missing or has none. Takes no lock."""
        return sidecar.text(metadata.meta_of(self._files(key)), "agent_alias")

    def set_session_context(self, key: str, context: Mapping[str, str]) -> None:
        """Replace the session's context (a string -> string map; ``{}`` clears it).
        TypeError for a non-mapping or a non-string key/value, ValueError for text JSON
        cannot hold. Atomic; :class:`SessionNotFoundError` for a missing session."""
        metadata.set_field(self._root, self._files(key), "context", check_context(context))

    def set_session_principal(self, key: str, principal_id: str) -> None:
        """Record the authenticated principal that owns the session (a non-empty string;
        ValueError for ""). Atomic, under the guard that :meth:`delete_session_owned`
        takes; :class:`SessionNotFoundError` for a missing session."""
        value = check_text("principal_id", principal_id, empty=False)
        metadata.set_field(self._root, self._files(key), "principal_id", value)

    def delete_session_owned(self, key: str, owner_principal_id: str) -> bool:
        """Delete the session only when its recorded principal equals ``owner_principal_id``;
        True when deleted. Fails closed: a missing session, no recorded owner, another
        owner (or an empty ``owner_principal_id``) -> False and nothing deleted. The check
        and the deletion happen under the session's guard, which every writer (including
        :meth:`set_session_principal`) takes, so no re-stamp can slip in between. An
        unreadable sidecar raises :class:`CorruptMetadataError` (nothing deleted)."""
        return metadata.delete_session_owned(self._root, self._files(key), owner_principal_id)

    # -- run state ---------------------------------------------------------------------------
    def set_session_state(self, key: str, state: str, turn_id: str | None = None) -> None:
        """Set the run state: ``"idle"``, ``"running"`` or ``"error"`` (anything else:
        ValueError). ``turn_id`` names the current turn; it is cleared on ``idle``. The
        time the state was entered (``SessionState.since``, the store's clock) changes
        only when the state or the turn changes, so re-setting the same state and turn
        does not make a stuck turn look fresh. Atomic; :class:`SessionNotFoundError` for
        a missing session."""
        metadata.set_session_state(self._root, self._files(key), state, turn_id)

    def get_session_state(self, key: str) -> SessionState | None:
        """The run state; None when the session is missing or never had one. Takes no lock."""
        return metadata.get_session_state(self._files(key))

    def list_running_sessions(self) -> list[SessionMetadata]:
        """Every session in state ``running``, in key order. Takes no lock."""
        return metadata.where(self._root, lambda look: look.state == "running")

    def list_stuck_sessions(self, threshold_secs: float) -> list[SessionMetadata]:
        """Every session that entered state ``running`` more than ``threshold_secs`` ago
        (by the store's clock), in key order. Takes no lock."""
        return metadata.list_stuck_sessions(self._root, threshold_secs)

    # -- agent attribution -------------------------------------------------------------------
    def count_agent_attribution(self, agent_alias: str) -> int:
        """How many sessions are attributed to ``agent_alias``. Takes no lock."""
        return metadata.count_agent_attribution(self._root, agent_alias)

    def rename_agent_attribution(self, old_alias: str, new_alias: str) -> int:
        """Re-attribute every session of ``old_alias`` to ``new_alias``; the number of
        sessions changed (when the two are equal, nothing is written and the number of
        sessions attributed to it is returned). Each session is changed under its own
        guard with an atomic sidecar replace, so after a crash every session is either
        renamed or not. Never deletes a session."""
        old = check_text("old_alias", old_alias)
        new = check_text("new_alias", new_alias)
        if old == new:
            return self.count_agent_attribution(old)
        return metadata.reattribute(self._root, old, new)

    def clear_agent_attribution(self, agent_alias: str) -> int:
        """Remove the attribution to ``agent_alias`` from every session (its
        ``agent_alias`` becomes None); the number of sessions changed. As
        :meth:`rename_agent_attribution`: per-session guard, atomic, never deletes."""
        return metadata.reattribute(self._root, check_text("agent_alias", agent_alias), None)

    # -- search and maintenance --------------------------------------------------------------
    def search(self, query: SessionQuery) -> list[SessionMetadata]:
        """Sessions whose name or message text contains ``query.keyword``, newest activity
        first (ties: key order), at most ``query.limit`` (None: all), only those attributed
        to ``query.agent_alias`` when it is given.

        Matching is case-insensitive by Unicode case folding (``str.casefold``: ``"STRASSE"``
        matches ``"straße"``), without normalisation (a precomposed "é" does not match "e" +
        combining accent). Message text is a string ``content``, and in a list ``content``
        every string item and every object's ``"text"`` string (a single part object as
        ``content`` counts too); roles, ids and other fields are not searched. An empty
        keyword matches every session.

        Transcripts are streamed in 1 MiB blocks (memory: a block plus the longest line),
        newest-activity sessions first, stopping once ``limit`` sessions matched. A line
        that is pure ASCII without JSON escapes and does not contain the keyword (ASCII
        case-insensitively) is skipped without decoding; any other line is decoded and
        checked exactly. Corrupt lines and a torn tail are skipped, never an error.
        Takes no lock (a read overlapping an in-place change is retried)."""
        return search.search(self._root, query)

    def cleanup_stale(self, ttl_hours: float) -> int:
        """Delete every session with no activity within the last ``ttl_hours`` (newest
        modification time of transcript and sidecar, wall clock); the number deleted.

        Never deletes a session in state ``running``, one whose sidecar is unreadable
        (its state is unknown: logged), or one whose guard is held at that moment (it is
        busy, so not stale). Each deletion happens under the session's guard after the
        staleness and state are checked again, and is :meth:`delete_session`'s (transcript
        first), so a crash half-way leaves the whole session or nothing that lists as one.
        Also removes orphan sidecars (left by a delete or create that crashed half-way)
        older than the TTL, then the lock files of sessions that no longer exist (each
        under its guard, re-checked; see :func:`jsonl_sessions.jsonl.prune.prune_locks`); they
        are not counted. A transcript whose ``lstat`` fails with an I/O error is never
        taken for a missing one: the sweep raises that ``OSError`` (what it deleted before
        stays deleted). Cost: O(sessions) stats and sidecar reads."""
        return len(maintenance.cleanup_stale(self._root, ttl_hours).deleted)

    def compact(self, key: str, *, repair: bool = False) -> int:
        """Rewrite the transcript without what is not a message: a torn tail, a leading
        UTF-8 BOM, and exact duplicates (a line with the same id and the same bytes as an
        earlier one; lines without an id are never duplicates). Returns the number of complete lines dropped (0, and nothing
        written, when there was nothing to drop). Message order and bytes are kept.

        Refuses, with :class:`CorruptTranscriptError` naming the first such line and the
        file unchanged, a transcript holding a line that does not parse or a second line
        with an earlier line's id but different bytes, unless ``repair=True``: then the
        original bytes are first copied to ``<stem>.quarantine-<UTC time>.jsonl.bak``
        (always fsynced, with the directory; never listed as a session, never removed by
        the store), and the rewrite keeps every line that parses (of lines sharing an id,
        the first). Under the guard; the rewrite is atomic (temp + rename).
        :class:`SessionNotFoundError` for a missing session. Cost: O(transcript) time and
        memory."""
        report = compaction_report(self, key, repair=repair)
        if report.quarantine is not None:
            log.warning("compact(repair=True) of session %r: the original transcript is saved as %s", key,
                        report.quarantine)
        return report.dropped

    def verify(self, keys: Iterable[str] | None = None, *, fix: bool = False) -> VerifyReport:
        """Check the store's files (every session, or only ``keys``) as they are on disk:
        torn tails, corrupt lines (line and byte offset), ids out of order, sidecars
        missing, corrupt, mismatched or orphaned, leftover temp files and interrupted
        writes, permissions, symlinks; see :mod:`jsonl_sessions.jsonl.verify`. Read-only
        (no guard taken, no recovery run) unless ``fix``: then the fixable problems
        (temp files, orphan sidecars, interrupted writes) are cleared, each session under
        its guard, and the report describes the store after. Opening this store removed
        the temp files of sessions nobody held; those left since are found. Cost:
        O(total bytes) time, O(longest line) memory."""
        return verify_directory(self._root.path, keys, fix=fix, store=self, lock_timeout=self._root.lock_timeout)



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
