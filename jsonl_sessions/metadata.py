"""Session metadata and lifecycle (the rest of the Rust ``SessionBackend`` trait).

Methods of :class:`jsonl_sessions.SessionStore`, kept in their own module: names,
agent attribution, ownership, run state, TTL cleanup, search and compact/repair, all on
the sidecar (replaced atomically under the session's guard) and file stats.

Rules shared by every method here:

- **Setters** (``set_session_name``, ``set_session_agent_alias``,
  ``set_session_context``, ``set_session_principal``, ``set_session_state``) never
  create a session: on a missing one they raise :class:`SessionNotFoundError`, like
  ``set_session_trim_breadcrumb``. Each takes the session's guard, reads the sidecar,
  changes it and replaces it atomically (temp + fsync + rename + directory fsync in
  fsync mode). A sidecar that cannot be read (:class:`CorruptMetadataError`, which
  includes one written in a newer format) is never overwritten: the setter raises.
- **Getters** (``get_session_*``, ``list_*``, ``count_agent_attribution``, ``search``)
  take no lock, so a supervisor is never blocked by a long turn holding a session's
  guard. The sidecar is always read whole (it is replaced by rename), but it and the
  transcript's stats are two reads, not one snapshot. A getter returns None for a
  missing session; for a session whose sidecar is unreadable, the single-session getters
  raise :class:`CorruptMetadataError`, and the listings log a warning and go on (a
  broken sidecar never hides a session from ``list_sessions_with_metadata``: it is
  listed with what the file stats tell).
- **Activity** (``SessionMetadata.updated_at``, the order of ``search``, the TTL of
  ``cleanup_stale``) is the newest modification time of the transcript and the sidecar,
  so a transcript appended by another tool counts, and so does any metadata change.
  It is the file system's clock (which may lag the wall clock by a few ms), while
  ``created_at`` and ``state_since`` come from the store's clock: compare like with like.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from . import _platform, codec, sidecar
from .core import SIDECAR_SUFFIX, TRANSCRIPT_SUFFIX, StoreCore, _Held, _Session
from .errors import (
    CorruptMetadataError,
    CorruptTranscriptError,
    LockTimeoutError,
    SessionNotFoundError,
    UnsafePathError,
)
from .keys import hashed_stem_matches, is_hashed, stem_to_key
from .locks import Control
from .transcript import BOM, log
from .types import SESSION_STATES, SessionMetadata, SessionQuery, SessionState

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_SEARCH_BLOCK = 1 << 20
QUARANTINE_MARK = ".quarantine-"
QUARANTINE_SUFFIX = ".jsonl.bak"


def _from_ms(ms: int | None) -> datetime | None:
    return None if ms is None else _EPOCH + timedelta(milliseconds=ms)


def _from_ns(ns: int) -> datetime:
    return _EPOCH + timedelta(microseconds=ns // 1000)


def _check_text(what: str, value: object, *, empty: bool = True) -> str:
    """``value`` if it is a string JSON can hold (TypeError / ValueError otherwise)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not empty and not value:
        raise ValueError(f"{what} must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid Unicode text (lone surrogate): {value!r}") from None
    return str(value)


def _check_number(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a finite number >= 0, not {value!r}")
    return float(value)


class _Look(NamedTuple):
    """A lock-free look at one session: its sidecar (None when absent or unreadable, then
    ``error`` says why), the transcript's stat, the sidecar's mtime."""

    meta: dict[str, Any] | None
    error: CorruptMetadataError | None
    transcript: os.stat_result
    sidecar_mtime_ns: int | None

    @property
    def activity_ns(self) -> int:
        """Newest modification time of transcript and sidecar (ns since the epoch)."""
        return max(self.transcript.st_mtime_ns, self.sidecar_mtime_ns or 0)

    @property
    def state(self) -> str | None:
        value = sidecar.text(self.meta, "state")
        return value if value in SESSION_STATES else None


class _Plan(NamedTuple):
    """What compact would write: the kept lines, how many complete lines it drops, and the
    first line that only ``repair`` may drop (line number, offset, reason) or None."""

    kept: list[bytes]
    dropped: int
    problem: tuple[int, int, str] | None
    changed: bool


class MetadataMethods(StoreCore):
    """Part of :class:`jsonl_sessions.SessionStore` (which inherits it)."""

    # -- looking at a session without a lock -----------------------------------------
    def _look(self, s: _Session) -> _Look | None:
        """None when the session does not exist (or its transcript is not a regular file)."""
        try:
            st = os.lstat(s.transcript)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        try:
            meta, mtime = sidecar.read_with_mtime(s.sidecar, s.key)
        except CorruptMetadataError as exc:
            try:
                mtime = os.lstat(s.sidecar).st_mtime_ns
            except OSError:
                mtime = None
            return _Look(None, exc, st, mtime)
        return _Look(meta, None, st, mtime)

    def _look_strict(self, key: str) -> _Look | None:
        look = self._look(self._session(key))
        if look is not None and look.error is not None:
            raise look.error
        return look

    def _meta_of(self, key: str) -> dict[str, Any] | None:
        """The sidecar of an existing session ({} when it has none); None when the session
        does not exist. Raises :class:`CorruptMetadataError`."""
        look = self._look_strict(key)
        if look is None:
            return None
        return look.meta if look.meta is not None else {}

    def _metadata(self, s: _Session, look: _Look) -> SessionMetadata | None:
        """The session's metadata from a look plus its message count (O(1): the count cache);
        None when it vanished meanwhile. Parses no transcript."""
        count = self._count(s)
        if count is None:
            return None
        meta = look.meta
        crumb = None if meta is None else meta.get("trim_breadcrumb")
        state = look.state
        return SessionMetadata(
            key=s.key,
            name=sidecar.text(meta, "name"),
            agent_alias=sidecar.text(meta, "agent_alias"),
            principal_id=sidecar.text(meta, "principal_id"),
            state=state,
            turn_id=sidecar.text(meta, "turn_id") if state is not None else None,
            created_at=_from_ms(sidecar.millis(meta, "created_at")),
            updated_at=_from_ns(look.activity_ns),
            message_count=count,
            size_bytes=look.transcript.st_size,
            trim_breadcrumb=crumb if isinstance(crumb, bool) else None,
            context=sidecar.context(meta),
            parent=sidecar.text(meta, "parent"),
            fork_point=sidecar.text(meta, "fork_point"),
        )

    def _looks(self) -> Iterator[tuple[_Session, _Look]]:
        """Every session with a look at it, in key order; unreadable sidecars are logged."""
        for key in self.list_sessions():
            s = self._session(key)
            look = self._look(s)
            if look is None:
                continue
            if look.error is not None:
                log.warning("%s", look.error)
            yield s, look

    # -- metadata ---------------------------------------------------------------------
    def get_session_metadata(self, key: str) -> SessionMetadata | None:
        """The session's metadata; None when it does not exist. Reads the sidecar and file
        stats, never the messages (``message_count`` comes from the count cache: O(1)).
        Raises :class:`CorruptMetadataError` when the sidecar is unreadable (the session
        itself still loads). Takes no lock."""
        s = self._session(key)
        look = self._look_strict(key)
        return None if look is None else self._metadata(s, look)

    def list_sessions_with_metadata(self) -> list[SessionMetadata]:
        """Every session's metadata, in key order. Parses no transcript: sidecars, file
        stats and the count cache only (O(sessions)). A session whose sidecar is unreadable
        is listed with the fields the stats give (and a logged warning). Takes no lock."""
        out = []
        for s, look in self._looks():
            md = self._metadata(s, look)
            if md is not None:
                out.append(md)
        return out

    def _update(self, key: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Apply ``change`` to the sidecar of an existing session, under its guard, and
        replace the sidecar atomically. SessionNotFoundError for a missing session."""
        s = self._session(key)
        with _Held(self, s):
            if not self.session_exists(key):
                raise SessionNotFoundError(key=key)
            meta = self._sidecar(s)
            change(meta)
            self._write_sidecar(s, meta)

    def set_session_name(self, key: str, name: str) -> None:
        """Set the human-readable name (any string, "" included). Atomic; raises
        :class:`SessionNotFoundError` for a missing session."""
        value = _check_text("name", name)
        self._update(key, lambda meta: meta.__setitem__("name", value))

    def get_session_name(self, key: str) -> str | None:
        """The name; None when the session is missing or has none. Takes no lock."""
        return sidecar.text(self._meta_of(key), "name")

    def set_session_agent_alias(self, key: str, agent_alias: str) -> None:
        """Record the agent alias the session is attributed to. Atomic; raises
        :class:`SessionNotFoundError` for a missing session."""
        value = _check_text("agent_alias", agent_alias)
        self._update(key, lambda meta: meta.__setitem__("agent_alias", value))

    def get_session_agent_alias(self, key: str) -> str | None:
        """The agent alias; None when the session is missing or has none. Takes no lock."""
        return sidecar.text(self._meta_of(key), "agent_alias")

    def set_session_context(self, key: str, context: Mapping[str, str]) -> None:
        """Replace the session's context (a string -> string map; ``{}`` clears it).
        TypeError for a non-mapping or a non-string key/value, ValueError for text JSON
        cannot hold. Atomic; :class:`SessionNotFoundError` for a missing session."""
        if not isinstance(context, Mapping):
            raise TypeError(f"context must be a mapping of str to str, not {type(context).__name__}")
        value = {_check_text("context key", k): _check_text(f"context[{k!r}]", v) for k, v in context.items()}
        self._update(key, lambda meta: meta.__setitem__("context", value))

    def set_session_principal(self, key: str, principal_id: str) -> None:
        """Record the authenticated principal that owns the session (a non-empty string;
        ValueError for ""). Atomic, under the guard that :meth:`delete_session_owned`
        takes; :class:`SessionNotFoundError` for a missing session."""
        value = _check_text("principal_id", principal_id, empty=False)
        self._update(key, lambda meta: meta.__setitem__("principal_id", value))

    def delete_session_owned(self, key: str, owner_principal_id: str) -> bool:
        """Delete the session only when its recorded principal equals ``owner_principal_id``;
        True when deleted. Fails closed: a missing session, no recorded owner, another
        owner (or an empty ``owner_principal_id``) -> False and nothing deleted. The check
        and the deletion happen under the session's guard, which every writer (including
        :meth:`set_session_principal`) takes, so no re-stamp can slip in between. An
        unreadable sidecar raises :class:`CorruptMetadataError` (nothing deleted)."""
        owner = _check_text("owner_principal_id", owner_principal_id)
        s = self._session(key)
        with _Held(self, s):
            if not owner or not self.session_exists(key):
                return False
            if sidecar.text(sidecar.read(s.sidecar, s.key), "principal_id") != owner:
                return False
            return self.delete_session(key)

    # -- run state --------------------------------------------------------------------
    def set_session_state(self, key: str, state: str, turn_id: str | None = None) -> None:
        """Set the run state: ``"idle"``, ``"running"`` or ``"error"`` (anything else:
        ValueError). ``turn_id`` names the current turn; it is cleared on ``idle``. The
        time the state was entered (``SessionState.since``, the store's clock) changes
        only when the state or the turn changes, so re-setting the same state and turn
        does not make a stuck turn look fresh. Atomic; :class:`SessionNotFoundError` for
        a missing session."""
        if not isinstance(state, str) or state not in SESSION_STATES:
            raise ValueError(f"state must be one of {sorted(SESSION_STATES)}, not {state!r}")
        turn = None if turn_id is None else _check_text("turn_id", turn_id)
        if state == "idle":
            turn = None

        def change(meta: dict[str, Any]) -> None:
            same = meta.get("state") == state and meta.get("turn_id") == turn
            if not (same and sidecar.millis(meta, "state_since") is not None):
                meta["state_since"] = self._clock()
            meta["state"] = state
            meta["turn_id"] = turn

        self._update(key, change)

    def get_session_state(self, key: str) -> SessionState | None:
        """The run state; None when the session is missing or never had one. Takes no lock."""
        meta = self._meta_of(key)
        state = sidecar.text(meta, "state")
        if meta is None or state not in SESSION_STATES:
            return None
        since = sidecar.millis(meta, "state_since")
        if since is None:
            since = sidecar.millis(meta, "updated_at") or 0
        return SessionState(str(state), sidecar.text(meta, "turn_id"), _EPOCH + timedelta(milliseconds=since))

    def list_running_sessions(self) -> list[SessionMetadata]:
        """Every session in state ``running``, in key order. Takes no lock."""
        return self._where(lambda look: look.state == "running")

    def list_stuck_sessions(self, threshold_secs: float) -> list[SessionMetadata]:
        """Every session that entered state ``running`` more than ``threshold_secs`` ago
        (by the store's clock), in key order. Takes no lock."""
        threshold_ms = _check_number("threshold_secs", threshold_secs) * 1000
        now = self._clock()

        def stuck(look: _Look) -> bool:
            since = sidecar.millis(look.meta, "state_since")
            return look.state == "running" and since is not None and now - since > threshold_ms

        return self._where(stuck)

    def _where(self, keep: Callable[[_Look], bool]) -> list[SessionMetadata]:
        out = []
        for s, look in self._looks():
            if keep(look):
                md = self._metadata(s, look)
                if md is not None:
                    out.append(md)
        return out

    # -- agent attribution ------------------------------------------------------------
    def count_agent_attribution(self, agent_alias: str) -> int:
        """How many sessions are attributed to ``agent_alias``. Takes no lock."""
        alias = _check_text("agent_alias", agent_alias)
        return sum(1 for _s, look in self._looks() if sidecar.text(look.meta, "agent_alias") == alias)

    def rename_agent_attribution(self, old_alias: str, new_alias: str) -> int:
        """Re-attribute every session of ``old_alias`` to ``new_alias``; the number of
        sessions changed (when the two are equal, nothing is written and the number of
        sessions attributed to it is returned). Each session is changed under its own
        guard with an atomic sidecar replace, so after a crash every session is either
        renamed or not. Never deletes a session."""
        old = _check_text("old_alias", old_alias)
        new = _check_text("new_alias", new_alias)
        if old == new:
            return self.count_agent_attribution(old)
        return self._reattribute(old, new)

    def clear_agent_attribution(self, agent_alias: str) -> int:
        """Remove the attribution to ``agent_alias`` from every session (its
        ``agent_alias`` becomes None); the number of sessions changed. As
        :meth:`rename_agent_attribution`: per-session guard, atomic, never deletes."""
        return self._reattribute(_check_text("agent_alias", agent_alias), None)

    def _reattribute(self, old: str, new: str | None) -> int:
        changed = 0
        for s, look in self._looks():
            if sidecar.text(look.meta, "agent_alias") != old:
                continue  # lock-free prefilter; re-checked under the guard
            with _Held(self, s):
                if not self.session_exists(s.key):
                    continue
                try:
                    meta = sidecar.read(s.sidecar, s.key)
                except CorruptMetadataError as exc:
                    log.warning("%s", exc)
                    continue
                if meta is None or sidecar.text(meta, "agent_alias") != old:
                    continue
                meta["agent_alias"] = new
                self._write_sidecar(s, meta)
                changed += 1
        return changed

    # -- TTL cleanup ------------------------------------------------------------------
    def cleanup_stale(self, ttl_hours: float) -> int:
        """Delete every session with no activity within the last ``ttl_hours`` (newest
        modification time of transcript and sidecar, wall clock); the number deleted.

        Never deletes a session in state ``running``, one whose sidecar is unreadable
        (its state is unknown: logged), or one whose guard is held at that moment (it is
        busy, so not stale). Each deletion happens under the session's guard after the
        staleness and state are checked again, and is :meth:`delete_session`'s (transcript
        first), so a crash half-way leaves the whole session or nothing that lists as one.
        Also removes orphan sidecars (left by a delete or create that crashed half-way)
        older than the TTL; they are not counted. Cost: O(sessions) stats and sidecar reads."""
        cutoff = time.time_ns() - int(_check_number("ttl_hours", ttl_hours) * 3600e9)

        def stale(look: _Look | None) -> bool:
            return (look is not None and look.error is None and look.state != "running"
                    and look.activity_ns < cutoff)

        removed = 0
        for s, look in self._looks():
            if not stale(look):
                continue
            try:
                guard = self._acquire(s, timeout=0)
            except LockTimeoutError:
                continue
            try:
                if stale(self._look(s)):
                    removed += self.delete_session(s.key)
            finally:
                guard.release()
        self._remove_orphan_sidecars(cutoff)
        return removed

    def _remove_orphan_sidecars(self, cutoff_ns: int) -> None:
        """Unlink sidecars without a transcript (not sessions) last modified before the cutoff."""
        with os.scandir(self._root) as entries:
            names = [e.name for e in entries if e.name.endswith(SIDECAR_SUFFIX) and not e.name.startswith(".")]
        for name in names:
            stem = name[: -len(SIDECAR_SUFFIX)]
            path = os.path.join(self._root, name)
            if os.path.lexists(os.path.join(self._root, stem + TRANSCRIPT_SUFFIX)):
                continue
            key = self._orphan_key(stem, path)
            if key is None:
                continue
            s = self._session(key)
            if s.sidecar != path:
                continue
            try:
                guard = self._acquire(s, timeout=0)
            except LockTimeoutError:
                continue
            try:
                st = os.lstat(path)
                if not os.path.lexists(s.transcript) and stat.S_ISREG(st.st_mode) and st.st_mtime_ns < cutoff_ns:
                    _platform.unlink(path)
                    if self._durable:
                        _platform.fsync_dir(self._root)
            except FileNotFoundError:
                pass
            finally:
                guard.release()

    @staticmethod
    def _orphan_key(stem: str, path: str) -> str | None:
        if not is_hashed(stem):
            return stem_to_key(stem)
        try:
            meta = sidecar.read(path)
        except (OSError, CorruptMetadataError):
            return None
        key = sidecar.text(meta, "key")
        return key if key is not None and hashed_stem_matches(stem, key) else None

    # -- search -----------------------------------------------------------------------
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
        if not isinstance(query, SessionQuery):
            raise TypeError(f"query must be a SessionQuery, not {type(query).__name__}")
        needle = _check_text("keyword", query.keyword).casefold()
        limit = query.limit
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ValueError(f"limit must be None or an int >= 0, not {limit!r}")
        alias = None if query.agent_alias is None else _check_text("agent_alias", query.agent_alias)
        found: list[tuple[int, str, _Session, _Look]] = []
        for s, look in self._looks():
            if alias is not None and sidecar.text(look.meta, "agent_alias") != alias:
                continue
            found.append((-look.activity_ns, s.key, s, look))
        found.sort(key=lambda item: (item[0], item[1]))
        out: list[SessionMetadata] = []
        for _neg, _key, s, look in found:
            if limit is not None and len(out) >= limit:
                break
            name = sidecar.text(look.meta, "name")
            if (name is not None and needle in name.casefold()) or not needle or self._mentions(s, needle):
                md = self._metadata(s, look)
                if md is not None:
                    out.append(md)
        return out

    def _mentions(self, s: _Session, needle: str) -> bool:
        """Whether a message of the session has text containing ``needle`` (casefolded)."""
        ascii_needle = needle.encode("ascii") if needle.isascii() else None

        def scan(_control: Control) -> bool:
            try:
                fd = _platform.open_file(s.transcript, os.O_RDONLY)
            except FileNotFoundError:
                return False
            except OSError as exc:
                if exc.errno in _platform.SYMLINK_ERRNOS:
                    log.warning("%s", UnsafePathError(key=s.key, path=s.transcript))
                    return False
                raise
            try:
                if not stat.S_ISREG(_platform.fstat(fd).st_mode):
                    return False
                for line in _lines(fd):
                    # A pure-ASCII line without escapes holds its strings as they are,
                    # and ASCII text casefolds to ASCII: only an ASCII needle can be in it.
                    plain = line.isascii() and b"\\" not in line
                    if plain and (ascii_needle is None or ascii_needle not in line.lower()):
                        continue
                    if _line_mentions(line, needle):
                        return True
                return False
            finally:
                _platform.close(fd)

        return self._consistent(s, scan)

    # -- compact / repair -------------------------------------------------------------
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
        s = self._session(key)
        with _Held(self, s):
            data = self._read_file(s)
            if data is None:
                raise SessionNotFoundError(key=key)
            plan = _plan(data)
            if plan.problem is not None:
                line, offset, reason = plan.problem
                if not repair:
                    raise CorruptTranscriptError(key=key, path=s.transcript, line=line, offset=offset, reason=reason)
                self._quarantine(s, data)
            if plan.changed:
                self._install_transcript(s, plan.kept)
            return plan.dropped

    def _quarantine(self, s: _Session, data: bytes) -> str:
        """Copy ``data`` to a new quarantine file (fsynced, directory too); its path."""
        now = _from_ms(self._clock()) or _EPOCH
        stamp = now.strftime("%Y%m%dT%H%M%S") + f"{now.microsecond // 1000:03d}Z"
        n = 0
        while True:
            suffix = "" if n == 0 else f"-{n}"
            path = os.path.join(self._root, f"{s.stem}{QUARANTINE_MARK}{stamp}{suffix}{QUARANTINE_SUFFIX}")
            try:
                fd = _platform.open_file(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                n += 1
                continue
            break
        try:
            try:
                _platform.write(fd, data)
                _platform.fsync(fd)
            finally:
                _platform.close(fd)
            _platform.fsync_dir(self._root)
        except BaseException:
            with contextlib.suppress(OSError):
                _platform.unlink(path)
            raise
        log.warning("compact(repair=True) of session %r: the original transcript is saved as %s", s.key, path)
        return path


def _lines(fd: int) -> Iterator[bytes]:
    """The complete lines of the file (without newlines, a leading BOM dropped), read in
    blocks; a final fragment without a newline (torn tail) is not yielded."""
    pos = 0
    partial: list[bytes] = []
    while True:
        chunk = _platform.pread(fd, _SEARCH_BLOCK, pos)
        if not chunk:
            return
        if pos == 0 and chunk.startswith(BOM):
            chunk = chunk[len(BOM):]
            pos = len(BOM)
        pos += len(chunk)
        pieces = chunk.split(b"\n")
        if len(pieces) == 1:
            partial.append(chunk)
            continue
        if partial:
            partial.append(pieces[0])
            yield b"".join(partial)
            partial = []
        else:
            yield pieces[0]
        yield from pieces[1:-1]
        if pieces[-1]:
            partial.append(pieces[-1])


def _line_mentions(line: bytes, needle: str) -> bool:
    try:
        record = codec.decode_record(line)
    except ValueError:  # a corrupt line (JSONDecodeError is a ValueError): skipped
        return False
    return any(needle in text.casefold() for text in _texts(record.get("content")))


def _texts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                yield part
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]
    elif isinstance(content, dict) and isinstance(content.get("text"), str):
        yield content["text"]


def _plan(data: bytes) -> _Plan:
    """Which lines compact keeps (see :meth:`MetadataMethods.compact`)."""
    start = len(BOM) if data.startswith(BOM) else 0
    committed = data.rfind(b"\n") + 1
    kept: list[bytes] = []
    seen: dict[str, bytes] = {}
    dropped = 0
    problem: tuple[int, int, str] | None = None
    offset = start
    if committed > start:
        for number, line in enumerate(data[start : committed - 1].split(b"\n"), 1):
            try:
                record = codec.decode_record(line)
            except ValueError as exc:
                dropped += 1
                problem = problem or (number, offset, str(exc) or type(exc).__name__)
            else:
                mid = record.get("id") or ""
                first = seen.get(mid) if mid else None
                if first is None:
                    if mid:
                        seen[mid] = line
                    kept.append(line + b"\n")
                else:
                    dropped += 1
                    if first != line:
                        problem = problem or (number, offset, f"id {mid!r} is already used by an earlier, different line")
            offset += len(line) + 1
    changed = dropped > 0 or start > 0 or committed != len(data)
    return _Plan(kept, dropped, problem, changed)
