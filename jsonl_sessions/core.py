"""The core of the crash-safe JSONL session store: files, guard, append/load/rewrite/replace.

Layout of a store (docs/format.md has the details): for a session whose key encodes to
``<stem>`` (see :mod:`jsonl_sessions.keys`), ``root`` holds

- ``<stem>.jsonl``      the transcript, one message per line (the truth about messages;
                        its existence is the session's existence);
- ``<stem>.meta.json``  the sidecar (key, times, flags), replaced atomically;
- ``<stem>.lock``       the lock / control file (never unlinked);
- ``.<stem>.jsonl.tmp``, ``.<stem>.meta.json.tmp``  temp files of atomic replaces.

Guarantees:

- Every mutation holds the session's guard (:mod:`jsonl_sessions.locks`): reentrant in a
  thread, exclusive across threads and processes, per session.
- Every mutation is all-or-nothing on disk, also after SIGKILL or an I/O error: appends
  are one write of newline-terminated lines (a torn tail is never a message), removals
  truncate at a line boundary, whole-file changes go through temp + fsync + rename, and
  multi-step changes (update_last, replace_conversation_state) first commit a
  roll-forward record that the next guard holder completes.
- ``durability="fsync"``: a mutation is on stable storage when it returns (file fsync,
  and directory fsync after create / rename / unlink). ``"flush"``: written to the OS
  (survives a process crash, not a power loss).
- Readers take no lock and always see a consistent prefix of committed lines.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar

from . import _platform, codec, ids, sidecar
from ._atomic import atomic_write, unlink_quietly, write_temp
from .errors import (
    CorruptTranscriptError,
    DuplicateMessageError,
    InvalidMessageError,
    LockTimeoutError,
    SessionNotFoundError,
    SessionStoreError,
    UnsafePathError,
)
from .keys import hashed_stem_matches, is_hashed, key_to_stem, stem_to_key
from .locks import REGISTRY, Control, GuardClosed, SessionGuard, parse_record, read_control
from .transcript import Tail, count_newlines, iter_lines_backward, line_number_of, log, parse, read_tail, warn_bad
from .types import ChatMessage, Durability, MessageLike, TimestampedMessage, as_message

TRANSCRIPT_SUFFIX = ".jsonl"
SIDECAR_SUFFIX = ".meta.json"
LOCK_SUFFIX = ".lock"
TMP_SUFFIX = ".tmp"
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
_READ_RETRY_SECONDS = 0.2
_T = TypeVar("_T")


class _Session:
    """Names and paths of one session (cached per store)."""

    __slots__ = ("key", "lock", "sidecar", "stem", "tmp_sidecar", "tmp_transcript", "transcript")

    def __init__(self, root: str, key: str, stem: str) -> None:
        self.key = key
        self.stem = stem
        join = os.path.join
        self.transcript = join(root, stem + TRANSCRIPT_SUFFIX)
        self.sidecar = join(root, stem + SIDECAR_SUFFIX)
        self.lock = join(root, stem + LOCK_SUFFIX)
        self.tmp_transcript = join(root, "." + stem + TRANSCRIPT_SUFFIX + TMP_SUFFIX)
        self.tmp_sidecar = join(root, "." + stem + SIDECAR_SUFFIX + TMP_SUFFIX)


class _Held:
    """``with``-block holding a session's guard."""

    __slots__ = ("_session", "_store", "guard")

    def __init__(self, store: StoreCore, session: _Session) -> None:
        self._store = store
        self._session = session

    def __enter__(self) -> SessionGuard:
        self.guard = self._store._acquire(self._session)
        return self.guard

    def __exit__(self, *exc: object) -> None:
        self.guard.release()


class StoreCore:
    """A directory of sessions, each a JSONL transcript plus a sidecar: the core.

    :class:`jsonl_sessions.SessionStore` is this plus the history and metadata methods
    (history.py, metadata.py), which build on the private helpers here.

    ``root`` is created (mode 0700) if missing. Thread-safe; several processes may open
    the same root at once. ``lock_timeout`` (seconds, None = forever) bounds the wait
    for a session's guard (:class:`LockTimeoutError`). ``max_message_bytes`` bounds one
    encoded message (:class:`InvalidMessageError`, nothing written). ``clock`` returns
    milliseconds since the epoch (for tests of id monotonicity; default: wall clock).
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
        if durability not in ("fsync", "flush"):
            raise ValueError(f"durability must be 'fsync' or 'flush', not {durability!r}")
        if lock_timeout is not None and lock_timeout < 0:
            raise ValueError("lock_timeout must be >= 0 or None")
        if max_message_bytes <= 0:
            raise ValueError("max_message_bytes must be positive")
        self._root = os.path.abspath(os.fspath(root))
        self._durability: Durability = durability
        self._durable = durability == "fsync"
        self._lock_timeout = lock_timeout
        self._max_message_bytes = max_message_bytes
        self._clock = clock or ids.now_ms
        self._sessions: dict[str, _Session] = {}
        if not os.path.isdir(self._root):
            os.makedirs(self._root, mode=0o700, exist_ok=True)
            if self._durable:
                _platform.fsync_dir(os.path.dirname(self._root) or ".")
        self._clean_leftovers()

    # -- properties -------------------------------------------------------------------
    @property
    def root(self) -> str:
        return self._root

    @property
    def durability(self) -> Durability:
        return self._durability

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._root!r}, durability={self._durability!r})"

    # -- names and guard --------------------------------------------------------------
    def _session(self, key: str) -> _Session:
        try:
            s = self._sessions.get(key)
        except TypeError:  # an unhashable non-str key: key_to_stem raises InvalidSessionKeyError
            s = None
        if s is None:
            s = _Session(self._root, key, key_to_stem(key))  # validates the key
            if len(self._sessions) > 4096:
                self._sessions.clear()
            self._sessions[key] = s
        return s

    def _acquire(self, s: _Session, timeout: float | None | Literal[False] = False) -> SessionGuard:
        wait = self._lock_timeout if timeout is False else timeout
        while True:
            guard = REGISTRY.get(s.lock)
            try:
                first = guard.acquire(wait, s.key)
            except GuardClosed:
                continue
            if first and (guard.record is not None or guard.seq & 1):
                try:
                    self._recover(s, guard)
                except BaseException:
                    guard.release()
                    raise
            return guard

    def lock(self, key: str) -> contextlib.AbstractContextManager[SessionGuard]:
        """Hold ``key``'s mutation guard for a block, to make several calls one unit for
        other writers (reentrant: the store's own methods work inside it)."""
        return _Held(self, self._session(key))

    def _recover(self, s: _Session, guard: SessionGuard) -> None:
        """Complete (roll forward) a committed record, or drop a torn one with its temp files.
        Called with the guard just taken. Always durable: it runs after a crash."""
        raw = guard.record
        if raw is not None:
            record = parse_record(raw)
            if record is None:
                log.warning("dropping an uncommitted roll-forward record of session %r", s.key)
                unlink_quietly(s.tmp_transcript)
                unlink_quietly(s.tmp_sidecar)
            else:
                log.info("completing an interrupted %s of session %r", record.get("op"), s.key)
                self._roll_forward(s, guard, record)
            guard.clear_record(durable=True)
        if guard.seq & 1:
            guard.end_in_place()

    def _roll_forward(self, s: _Session, guard: SessionGuard, record: dict[str, Any]) -> None:
        op = record.get("op")
        if op == "moves":
            # One odd stretch of the counter around all the renames: a lock-free reader
            # never sees the new sidecar with the old transcript.
            guard.begin_in_place()
            try:
                for src, dst in record["moves"]:
                    src_path = os.path.join(self._root, src)
                    if os.path.lexists(src_path):
                        _platform.replace(src_path, os.path.join(self._root, dst))
            finally:
                with contextlib.suppress(OSError):  # the next guard holder makes it even
                    guard.end_in_place()
            _platform.fsync_dir(self._root)
        elif op in ("tail", "append"):
            opened = self._open_existing(s, os.O_RDWR)
            if opened is None:
                return
            fd, size = opened
            try:
                if op == "tail":
                    self._write_tail(fd, guard, record["at"], record["line"].encode("utf-8"), durable=True)
                elif record["at"] <= size < record["end"] or (
                        size >= record["end"] > record["at"] and _platform.pread(fd, 1, record["end"] - 1) != b"\n"):
                    # The batch was cut part-way (or a power loss kept its length but not its
                    # last bytes: zeros or stale data where its final newline belongs): it was
                    # never acknowledged, remove all of it.
                    guard.begin_in_place()
                    _platform.truncate(fd, record["at"])
                    _platform.fsync(fd)
                    guard.end_in_place()
            finally:
                _platform.close(fd)
        else:
            raise CorruptTranscriptError(key=s.key, path=s.lock, line=1, offset=16,
                                         reason=f"unknown roll-forward record {op!r}")

    def _clean_leftovers(self) -> None:
        """Remove temp files left by an interrupted write (and complete committed records),
        for every session whose guard is free right now."""
        try:
            names = os.listdir(self._root)
        except OSError:
            return
        stems = set()
        for name in names:
            if name.startswith(".") and name.endswith(TMP_SUFFIX):
                for suffix in (TRANSCRIPT_SUFFIX, SIDECAR_SUFFIX):
                    end = suffix + TMP_SUFFIX
                    if name.endswith(end):
                        stems.add(name[1 : -len(end)])
        for stem in stems:
            key = stem_to_key(stem) or self._key_of_hashed(stem) or f"<stem {stem}>"
            s = _Session(self._root, key, stem)
            try:
                guard = self._acquire(s, timeout=0)
            except (LockTimeoutError, OSError):
                continue
            try:
                unlink_quietly(s.tmp_transcript)
                unlink_quietly(s.tmp_sidecar)
            finally:
                guard.release()

    # -- low-level file helpers -------------------------------------------------------
    def _open_existing(self, s: _Session, flags: int) -> tuple[int, int] | None:
        """Open the transcript: ``(fd, size)``, or None when it does not exist. Raises
        UnsafePathError for a symlink or a non-regular file."""
        opened = self._open_stat(s, flags)
        return None if opened is None else (opened[0], opened[1].st_size)

    def _open_stat(self, s: _Session, flags: int) -> tuple[int, os.stat_result] | None:
        """Open the transcript: ``(fd, fstat)``, or None when it does not exist."""
        try:
            fd = _platform.open_file(s.transcript, flags)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in _platform.SYMLINK_ERRNOS:
                raise UnsafePathError(key=s.key, path=s.transcript) from None
            raise
        st = _platform.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            _platform.close(fd)
            raise UnsafePathError(key=s.key, path=s.transcript)
        return fd, st

    def _read_file(self, s: _Session) -> bytes | None:
        opened = self._open_existing(s, os.O_RDONLY)
        if opened is None:
            return None
        fd, size = opened
        try:
            return _platform.pread(fd, size, 0)
        finally:
            _platform.close(fd)

    def _consistent(self, s: _Session, read: Callable[[Control], _T]) -> _T:
        """Run ``read`` (a lock-free read of the session's files, given the control file as
        it was just before) until no in-place mutation overlapped it: retried while the
        control file's counter is odd or changed meanwhile."""
        started = time.monotonic()
        delay = 0.0001
        completed = False
        while True:
            control = read_control(s.lock)
            if control.pending and not completed:
                # A committed roll-forward record: its mutation counts as done, so the
                # state it replaces must not be returned. If its writer died, taking the
                # guard (if free) completes it; if the guard is held, the writer is still
                # running and the state before its mutation is still the current one.
                # Best effort: a failed completion is left to the next writer, and the
                # read goes on (load never raises for what it cannot recover).
                completed = True
                with contextlib.suppress(SessionStoreError, OSError):
                    self._acquire(s, timeout=0).release()
                continue
            if not control.seq & 1:
                result = read(control)
                if read_control(s.lock).seq == control.seq:
                    return result
            elif time.monotonic() - started > _READ_RETRY_SECONDS:
                # An odd counter for this long: its writer may have died. Taking the
                # guard (if free) runs recovery, which makes it even again.
                with contextlib.suppress(SessionStoreError, OSError):
                    self._acquire(s, timeout=0).release()
                started = time.monotonic()
            time.sleep(delay)
            delay = min(delay * 2, 0.005)

    def _read_transcript(self, s: _Session) -> bytes | None:
        """The transcript's bytes without taking the guard, never spliced by an in-place
        mutation running meanwhile. None when the session does not exist."""
        return self._consistent(s, lambda _control: self._read_file(s))

    def _count(self, s: _Session) -> int | None:
        """How many messages (complete lines) the transcript holds; None when the session
        does not exist. Takes no lock. O(1) while the count cache in the control file is
        current (writers keep it so); lines appended since it was written are counted from
        where it stops (O(new bytes)); after a change it cannot vouch for (another tool, a
        crash), one full newline count (no parsing) rebuilds it."""

        seen: list[int] = []

        def count(control: Control) -> tuple[int, os.stat_result | None] | None:
            seen.append(control.seq)
            opened = self._open_stat(s, os.O_RDONLY)
            if opened is None:
                return None
            fd, st = opened
            try:
                if control.cache is not None and control.cache.matches(st, control.seq):
                    return control.cache.lines, None
                return count_newlines(fd, 0, st.st_size), st
            finally:
                _platform.close(fd)

        result = self._consistent(s, count)
        if result is None:
            return None
        lines, counted = result
        if counted is not None:  # a full count: store it, if the guard is free and nothing changed since
            with contextlib.suppress(SessionStoreError, OSError):
                guard = self._acquire(s, timeout=0)
                try:
                    now = os.lstat(s.transcript)
                    if guard.seq == seen[-1] and (now.st_ino, now.st_size, now.st_mtime_ns) == (
                            counted.st_ino, counted.st_size, counted.st_mtime_ns):
                        guard.write_count(counted, lines)
                finally:
                    guard.release()
        return lines

    @staticmethod
    def _known_count(guard: SessionGuard, st: os.stat_result) -> int | None:
        """The number of complete lines before a mutation (``st``: the transcript's fstat
        then), if the count cache vouches for it; None otherwise. O(1)."""
        cache = guard.count
        return cache.lines if cache is not None and cache.matches(st, guard.seq) else None

    @staticmethod
    def _note_count(guard: SessionGuard, file: int | str, count: int | None) -> None:
        """Keep the count cache current after a mutation: ``count`` lines in the transcript
        (``file``: its descriptor or path, stat'ed now). Nothing when the count is unknown:
        the cache then no longer matches, and the next reader rebuilds it."""
        if count is not None:
            try:
                guard.write_count(_platform.fstat(file) if isinstance(file, int) else os.lstat(file), count)
            except OSError:
                pass

    def _newest(self, s: _Session, fd: int, size: int) -> tuple[Tail, dict[str, Any]] | None:
        """The tail and the newest message's record; None when there is no complete line.
        A corrupt newest line raises :class:`CorruptTranscriptError` (O(1) unless it does:
        its line number is counted)."""
        tail = read_tail(fd, size)
        if tail.last_line is None:
            return None
        try:
            return tail, codec.decode_record(tail.last_line)
        except ValueError as exc:
            raise CorruptTranscriptError(key=s.key, path=s.transcript, line=line_number_of(fd, tail.last_start),
                                         offset=tail.last_start, reason=str(exc)) from None

    def _last_id(self, fd: int, tail: Tail) -> str | None:
        """The id of the newest parseable line (normally the last one: O(1))."""
        if tail.last_line is None:
            return None
        try:
            return codec.id_of_line(tail.last_line) or None
        except ValueError:
            pass
        for _start, line, _committed in iter_lines_backward(fd, tail.size):
            try:
                return codec.id_of_line(line) or None
            except ValueError:
                continue
        return None

    def _has_id(self, fd: int, size: int, message_id: str) -> bool:
        """Whether ``message_id`` is in the file (ids increase, so the backward scan stops
        at the first smaller id)."""
        for _start, line, _committed in iter_lines_backward(fd, size):
            try:
                found = codec.id_of_line(line)
            except ValueError:
                continue
            if found == message_id:
                return True
            if found < message_id:
                return False
        return False

    def _check_clean(self, s: _Session) -> None:
        """Refuse (CorruptTranscriptError) to replace a transcript holding bytes that do not
        parse: they would be destroyed. Cost: O(transcript)."""
        data = self._read_file(s)
        if data:
            parse(data, strict=True, key=s.key, path=s.transcript)

    # -- ids and encoding -------------------------------------------------------------
    def _assign(
        self, s: _Session, messages: Sequence[ChatMessage], previous: str | None, fd: int | None = None, size: int = 0
    ) -> list[dict[str, Any]]:
        """Records for ``messages`` with ids (kept when given, new ULIDs otherwise) that
        strictly increase after ``previous``, and created_at (now when missing)."""
        now = self._clock()
        n = len(messages)
        if n == 1 and not messages[0].id:  # the common append
            m = messages[0]
            nxt = ids.next_id(previous, now)
            if nxt is None:
                raise self._no_id_after(s, previous)
            return [codec.record_of(m, nxt, now if m.created_at is None else m.created_at)]
        records: list[dict[str, Any]] = []
        i = 0
        prev = previous
        while i < n:
            m = messages[i]
            created = m.created_at
            if m.id:
                if prev is not None and m.id <= prev:
                    raise self._order_error(s, m.id, prev, records, fd, size)
                records.append(codec.record_of(m, m.id, now if created is None else created))
                prev = m.id
                i += 1
                continue
            j = i + 1
            while j < n and not messages[j].id:
                j += 1
            if j == n:
                new_ids: list[str] = []
                for _ in range(i, j):
                    nxt = ids.next_id(prev, now)
                    if nxt is None:
                        raise self._no_id_after(s, prev)
                    new_ids.append(nxt)
                    prev = nxt
            else:
                # A duplicate / out-of-order id after id-less messages is reported as such,
                # not as "no id fits" between it and the previous one.
                if prev is not None and messages[j].id <= prev:
                    raise self._order_error(s, messages[j].id, prev, records, fd, size)
                got = ids.ids_between(prev, messages[j].id, j - i, now)
                if got is None:
                    raise InvalidMessageError(key=s.key, reason=f"no id fits between {prev!r} and "
                                              f"{messages[j].id!r}; give the messages ids explicitly")
                new_ids = got
            for m2, mid in zip(messages[i:j], new_ids):
                records.append(codec.record_of(m2, mid, now if m2.created_at is None else m2.created_at))
            prev = new_ids[-1]
            i = j
        return records

    def _no_id_after(self, s: _Session, previous: str | None) -> InvalidMessageError:
        return InvalidMessageError(key=s.key, reason=f"no ULID sorts after the custom id {previous!r}; "
                                   "give the message an id explicitly")

    def _order_error(
        self, s: _Session, message_id: str, prev: str, records: list[dict[str, Any]], fd: int | None, size: int
    ) -> InvalidMessageError:
        if any(r["id"] == message_id for r in records) or (fd is not None and self._has_id(fd, size, message_id)):
            return DuplicateMessageError(key=s.key, message_id=message_id)
        return InvalidMessageError(key=s.key, message_id=message_id,
                                   reason=f"id {message_id!r} does not sort after the previous id {prev!r} "
                                   "(ids in a session must strictly increase)")

    def _encode(self, s: _Session, records: Iterable[dict[str, Any]]) -> list[bytes]:
        limit = self._max_message_bytes
        lines = []
        for record in records:
            line = codec.encode_record(record, s.key)
            if len(line) > limit:
                raise InvalidMessageError(key=s.key, message_id=record["id"],
                                          reason=f"message is {len(line)} bytes, over max_message_bytes={limit}")
            lines.append(line)
        return lines

    # -- creation / sidecar -----------------------------------------------------------
    def _create(
        self, s: _Session, chunks: Iterable[bytes], breadcrumb: bool | None = None, meta: dict[str, Any] | None = None
    ) -> None:
        """Create the session from whole-line ``chunks``: sidecar first (``meta``, or a new
        one; so the key is on disk before the transcript exists), then the transcript by
        atomic rename. Called under the guard when the transcript does not exist. On error
        nothing that looks like a session remains."""
        if meta is None:
            meta = sidecar.new_sidecar(s.key, self._clock())
            meta["trim_breadcrumb"] = breadcrumb
        atomic_write(s.sidecar, s.tmp_sidecar, [sidecar.encode(meta)], durable=self._durable, directory=self._root)
        try:
            self._install_transcript(s, chunks)
        except BaseException:
            # The rename may already have happened (the directory fsync failed): take the
            # transcript away again; drop the sidecar only once no transcript is left.
            unlink_quietly(s.transcript)
            if not os.path.lexists(s.transcript):
                unlink_quietly(s.sidecar)
            raise

    def _install_transcript(self, s: _Session, chunks: Iterable[bytes]) -> None:
        """Replace (or create) the transcript with whole-line ``chunks`` (streamed), all or
        nothing: temp file, fsync, rename, directory fsync; the count cache follows. Under
        the guard."""
        guard = REGISTRY.get(s.lock)
        lines = 0

        def counted() -> Iterator[bytes]:
            nonlocal lines
            for chunk in chunks:
                lines += chunk.count(b"\n")
                yield chunk

        write_temp(s.tmp_transcript, counted(), self._durable)
        try:
            self._rename_in_place(guard, s.tmp_transcript, s.transcript)
        except BaseException:
            unlink_quietly(s.tmp_transcript)
            raise
        if self._durable:
            _platform.fsync_dir(self._root)
        self._note_count(guard, s.transcript, lines)

    @staticmethod
    def _rename_in_place(guard: SessionGuard, src: str, dst: str) -> None:
        """Rename ``src`` over ``dst`` with the counter odd, so no count cached for an older
        file survives it (inode numbers are reused)."""
        guard.begin_in_place()
        try:
            _platform.replace(src, dst)
        finally:
            with contextlib.suppress(OSError):  # the next guard holder makes it even
                guard.end_in_place()

    def _sidecar(self, s: _Session) -> dict[str, Any]:
        meta = sidecar.read(s.sidecar, s.key)
        return meta if meta is not None else sidecar.new_sidecar(s.key, self._clock())

    def _write_sidecar(self, s: _Session, meta: dict[str, Any]) -> None:
        meta["updated_at"] = self._clock()
        atomic_write(s.sidecar, s.tmp_sidecar, [sidecar.encode(meta)], durable=self._durable, directory=self._root)

    def _key_of_hashed(self, stem: str) -> str | None:
        try:
            meta = sidecar.read(os.path.join(self._root, stem + SIDECAR_SUFFIX))
        except (OSError, SessionStoreError) as exc:
            log.warning("cannot read the key of session file %s: %s", stem, exc)
            return None
        if meta is None or not hashed_stem_matches(stem, meta["key"]):
            return None
        return meta["key"]  # type: ignore[no-any-return]

    # -- reading ----------------------------------------------------------------------
    def load(self, key: str) -> list[ChatMessage]:
        """Every message, oldest first; ``[]`` for a missing session. Lenient: corrupt
        lines (and an unreadable symlink) are skipped with a logged warning, never raised;
        use :meth:`try_load` before writing a history back. Cost: O(transcript)."""
        s = self._session(key)
        try:
            data = self._read_transcript(s)
        except UnsafePathError as exc:
            log.warning("%s", exc)
            return []
        if not data:
            return []
        parsed = parse(data, strict=False, key=s.key, path=s.transcript)
        warn_bad(parsed.bad, s.key, s.transcript)
        return parsed.messages

    def try_load(self, key: str) -> list[ChatMessage]:
        """Every message, oldest first; ``[]`` only for a missing or empty session.
        Raises :class:`CorruptTranscriptError` (with line and byte offset) for a complete
        line that does not parse, :class:`UnsafePathError` for a symlinked transcript.
        A torn tail is ignored. Takes no lock. Cost: O(transcript)."""
        s = self._session(key)
        data = self._read_transcript(s)
        if not data:
            return []
        return parse(data, strict=True, key=s.key, path=s.transcript).messages

    def load_with_timestamps(self, key: str) -> list[TimestampedMessage]:
        """Like :meth:`load`, each message with its ``created_at`` as an aware UTC datetime."""
        out = []
        for m in self.load(key):
            ms = m.created_at
            when = None if ms is None else datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
            out.append(TimestampedMessage(m, when))
        return out

    def session_exists(self, key: str) -> bool:
        """Whether the session's transcript exists (a regular file). Takes no lock."""
        s = self._session(key)
        try:
            return stat.S_ISREG(os.lstat(s.transcript).st_mode)
        except FileNotFoundError:
            return False

    def list_sessions(self) -> list[str]:
        """Every session's original key, sorted. Never parses a transcript; skips files the
        store did not make and symlinks. Cost: O(files in root)."""
        keys = []
        with os.scandir(self._root) as entries:
            for entry in entries:
                name = entry.name
                if not name.endswith(TRANSCRIPT_SUFFIX) or name.startswith("."):
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue
                stem = name[: -len(TRANSCRIPT_SUFFIX)]
                key = self._key_of_hashed(stem) if is_hashed(stem) else stem_to_key(stem)
                if key is not None:
                    keys.append(key)
        keys.sort()
        return keys

    def get_session_trim_breadcrumb(self, key: str) -> bool | None:
        """The recorded breadcrumb flag; None when the session is missing or never set it.
        Takes no lock, yet never pairs a new transcript with an old flag: the renames of
        a replace happen with the control file's counter odd, and a committed but
        unfinished replace is completed first (see :meth:`_consistent`)."""
        s = self._session(key)
        if not self.session_exists(key):
            return None
        meta = self._consistent(s, lambda _control: sidecar.read(s.sidecar, s.key))
        if meta is None:
            return None
        value = meta.get("trim_breadcrumb")
        return value if isinstance(value, bool) else None

    # -- appending --------------------------------------------------------------------
    def append(self, key: str, message: MessageLike) -> str:
        """Append one message (creating the session if needed); return its id.

        One write of one newline-terminated line; fsynced in fsync mode. A torn tail left
        by a crash is removed first; a corrupt line is never touched. Raises
        :class:`SerializationError` / :class:`InvalidMessageError` /
        :class:`DuplicateMessageError` with nothing written. Cost: O(1) in the
        transcript size."""
        return self.append_many(key, (message,))[0]

    append_message = append

    def append_many(self, key: str, messages: Iterable[MessageLike]) -> list[str]:
        """Append several messages as one locked, single write (all or none); their ids."""
        s = self._session(key)
        msgs = [as_message(m) for m in messages]
        if not msgs:
            return []
        guard = self._acquire(s)
        try:
            opened = self._open_stat(s, os.O_RDWR | os.O_APPEND)
            if opened is None:
                records = self._assign(s, msgs, None)
                self._create(s, self._encode(s, records))
                return [r["id"] for r in records]
            fd, st = opened
            try:
                tail = read_tail(fd, st.st_size)
                records = self._assign(s, msgs, self._last_id(fd, tail), fd, tail.size)
                lines = self._encode(s, records)
                data = lines[0] if len(lines) == 1 else b"".join(lines)
                before = self._known_count(guard, st)
                self._append_bytes(fd, guard, tail, data, len(lines))
                self._note_count(guard, fd, None if before is None else before + len(lines))
            finally:
                _platform.close(fd)
            return [r["id"] for r in records]
        finally:
            guard.release()

    def _append_bytes(self, fd: int, guard: SessionGuard, tail: Tail, data: bytes, lines: int) -> None:
        """Write ``data`` (``lines`` complete lines) after the committed bytes.

        One line is atomic by the torn-tail rule. A batch of several is made atomic by an
        ``append`` roll-forward record naming its byte range, committed before the write:
        if the writer dies part-way, recovery cuts the batch off again (a kill can stop a
        long write between pages). Readers retry around the write (odd counter)."""
        batch = lines > 1
        if batch:
            end = tail.committed + len(data)
            guard.write_record({"op": "append", "at": tail.committed, "end": end}, self._durable)
        in_place = tail.torn or batch
        if in_place:
            guard.begin_in_place()
            if tail.torn:
                _platform.truncate(fd, tail.committed)
        try:
            _platform.write(fd, data)
            if self._durable:
                _platform.fsync(fd)
        except BaseException:
            # Not acknowledged, so it must not appear later (a retry would duplicate it).
            in_place = True
            with contextlib.suppress(OSError):
                guard.begin_in_place()
            with contextlib.suppress(OSError):  # even if the counter could not be marked
                _platform.truncate(fd, tail.committed)
            raise
        finally:
            # Failing to finish the bookkeeping must not report a committed append as
            # failed (a retry would duplicate it): the next guard holder completes it
            # (an odd counter is made even; a batch record finds the batch whole and is
            # dropped).
            if in_place:
                try:
                    guard.end_in_place()
                    if batch:
                        guard.clear_record(self._durable)
                except OSError:
                    pass

    # -- changing the end -------------------------------------------------------------
    def remove_last(self, key: str, *, expected_id: str | None = None) -> bool:
        """Remove the newest message; True when one was removed. With ``expected_id``,
        only when the newest message has that id (compare-and-remove). Truncates at the
        line boundary: O(1) in the transcript size. A corrupt last line raises
        :class:`CorruptTranscriptError` and leaves the file byte-for-byte unchanged."""
        s = self._session(key)
        with _Held(self, s) as guard:
            opened = self._open_stat(s, os.O_RDWR)
            if opened is None:
                return False
            fd, st = opened
            try:
                newest = self._newest(s, fd, st.st_size)
                if newest is None:
                    return False
                tail, record = newest
                if expected_id is not None and (record.get("id") or "") != expected_id:
                    return False
                before = self._known_count(guard, st)
                guard.begin_in_place()
                try:
                    _platform.truncate(fd, tail.last_start)
                    if self._durable:
                        _platform.fsync(fd)
                finally:
                    guard.end_in_place()
                self._note_count(guard, fd, None if before is None else before - 1)
                return True
            finally:
                _platform.close(fd)

    def update_last(self, key: str, message: MessageLike, *, expected_id: str | None = None) -> bool:
        """Replace the newest message; True when one was replaced (with ``expected_id``:
        only when the newest has that id). The new message keeps the old id and
        created_at unless it carries its own. Crash-atomic through a roll-forward record
        (the next guard holder completes an interrupted update); O(1) in the transcript
        size. A corrupt last line raises :class:`CorruptTranscriptError`, file unchanged."""
        s = self._session(key)
        m = as_message(message)
        with _Held(self, s) as guard:
            opened = self._open_stat(s, os.O_RDWR)
            if opened is None:
                return False
            fd, st = opened
            try:
                newest = self._newest(s, fd, st.st_size)
                if newest is None:
                    return False
                tail, old = newest
                old_id = old.get("id") or ""
                if expected_id is not None and old_id != expected_id:
                    return False
                new_id = m.id or old_id
                if m.created_at is None and isinstance(old.get("created_at"), int):
                    m = m.replace(created_at=old["created_at"])
                if new_id != old_id or not new_id:
                    previous = self._previous_id(fd, tail)
                    if not new_id:
                        records = self._assign(s, [m], previous)
                    else:
                        records = self._assign(s, [m], previous, fd, tail.last_start)
                else:
                    created = m.created_at if m.created_at is not None else self._clock()
                    records = [codec.record_of(m, new_id, created)]
                line = self._encode(s, records)[0]
                before = self._known_count(guard, st)
                guard.write_record({"op": "tail", "at": tail.last_start, "line": line.decode("utf-8")}, self._durable)
                try:
                    self._write_tail(fd, guard, tail.last_start, line, durable=self._durable)
                    guard.clear_record(self._durable)
                except BaseException:
                    self._settle(s, guard)
                    raise
                self._note_count(guard, fd, before)
                return True
            finally:
                _platform.close(fd)

    def _previous_id(self, fd: int, tail: Tail) -> str | None:
        lines = iter_lines_backward(fd, tail.size)
        next(lines, None)
        for _start, line, _committed in lines:
            try:
                return codec.id_of_line(line) or None
            except ValueError:
                continue
        return None

    def _write_tail(self, fd: int, guard: SessionGuard, at: int, line: bytes, *, durable: bool) -> None:
        guard.begin_in_place()
        try:
            _platform.truncate(fd, at)
            _platform.pwrite(fd, line, at)
            if durable:
                _platform.fsync(fd)
        finally:
            guard.end_in_place()

    def _settle(self, s: _Session, guard: SessionGuard) -> None:
        """After a failure past the commit point: try to complete the mutation now; if that
        fails too, the next guard holder completes it."""
        with contextlib.suppress(OSError):
            self._recover(s, guard)

    # -- replacing everything ---------------------------------------------------------
    def rewrite_messages(self, key: str, messages: Iterable[MessageLike]) -> None:
        """Atomically replace the whole transcript (creating the session if needed): temp
        file, streamed writes, fsync, rename, directory fsync. Messages without ids get
        ids that keep the order increasing. Refuses (:class:`CorruptTranscriptError`,
        nothing changed) when the current transcript holds corrupt lines. Cost: O(old + new)."""
        s = self._session(key)
        msgs = [as_message(m) for m in messages]
        with _Held(self, s):
            lines = self._encode(s, self._assign(s, msgs, None))
            if not self.session_exists(key):
                self._create(s, lines)
                return
            self._check_clean(s)
            self._install_transcript(s, lines)

    def replace_conversation_state(self, key: str, messages: Iterable[MessageLike], breadcrumb_present: bool) -> None:
        """Replace the transcript and the trim-breadcrumb flag as one crash-atomic unit
        (both temp files written and fsynced, then a roll-forward record committed, then
        both renamed). Creates the session if needed."""
        self._replace_state(key, messages, breadcrumb_present, if_exists=False)

    def replace_conversation_state_if_exists(
        self, key: str, messages: Iterable[MessageLike], breadcrumb_present: bool
    ) -> bool:
        """Like :meth:`replace_conversation_state`, but only while the session exists:
        False, and nothing written, when it was deleted. The existence check and both
        writes happen under the guard that delete takes, so a deleted session is never
        recreated."""
        return self._replace_state(key, messages, breadcrumb_present, if_exists=True)

    def _replace_state(self, key: str, messages: Iterable[MessageLike], breadcrumb: bool, *, if_exists: bool) -> bool:
        s = self._session(key)
        msgs = [as_message(m) for m in messages]
        with _Held(self, s) as guard:
            exists = self.session_exists(key)
            if if_exists and not exists:
                return False
            lines = self._encode(s, self._assign(s, msgs, None))
            if not exists:
                self._create(s, lines, breadcrumb=bool(breadcrumb))
                return True
            self._check_clean(s)
            meta = self._sidecar(s)
            meta["trim_breadcrumb"] = bool(breadcrumb)
            meta["updated_at"] = self._clock()
            write_temp(s.tmp_transcript, lines, self._durable)
            try:
                write_temp(s.tmp_sidecar, [sidecar.encode(meta)], self._durable)
                if self._durable:
                    _platform.fsync_dir(self._root)
                moves = [[os.path.basename(s.tmp_sidecar), os.path.basename(s.sidecar)],
                         [os.path.basename(s.tmp_transcript), os.path.basename(s.transcript)]]
                guard.write_record({"op": "moves", "moves": moves}, self._durable)
            except BaseException:
                unlink_quietly(s.tmp_transcript)
                unlink_quietly(s.tmp_sidecar)
                with contextlib.suppress(OSError):
                    guard.clear_record(self._durable)
                raise
            try:
                self._roll_forward(s, guard, {"op": "moves", "moves": moves})
                guard.clear_record(self._durable)
            except BaseException:
                self._settle(s, guard)
                raise
            self._note_count(guard, s.transcript, len(lines))
            return True

    def set_session_trim_breadcrumb(self, key: str, present: bool) -> None:
        """Record whether the transcript starts with a synthetic trim breadcrumb (sidecar,
        atomic). Raises :class:`SessionNotFoundError` for a missing session."""
        s = self._session(key)
        with _Held(self, s):
            if not self.session_exists(key):
                raise SessionNotFoundError(key=key)
            meta = self._sidecar(s)
            meta["trim_breadcrumb"] = bool(present)
            self._write_sidecar(s, meta)

    # -- clearing and deleting --------------------------------------------------------
    def clear_messages(self, key: str) -> int:
        """Remove every message, keeping the session (and its metadata); the number
        removed. Refuses a transcript with corrupt lines (:class:`CorruptTranscriptError`)."""
        s = self._session(key)
        with _Held(self, s) as guard:
            opened = self._open_stat(s, os.O_RDWR)
            if opened is None:
                return 0
            fd, st = opened
            try:
                data = _platform.pread(fd, st.st_size, 0)
                count = len(parse(data, strict=True, key=s.key, path=s.transcript).messages)
                guard.begin_in_place()
                try:
                    _platform.truncate(fd, 0)
                    if self._durable:
                        _platform.fsync(fd)
                finally:
                    guard.end_in_place()
                self._note_count(guard, fd, 0)
                return count
            finally:
                _platform.close(fd)

    def delete_session(self, key: str) -> bool:
        """Delete the session's transcript, sidecar and temp files; True if it existed.
        The transcript goes first, so a crash half-way leaves no session (an orphan
        sidecar is not one, and is removed by the next create or delete)."""
        s = self._session(key)
        with _Held(self, s) as guard:
            existed = self.session_exists(key)
            if guard.count is not None:
                guard.drop_count()
            for path in (s.transcript, s.sidecar):
                with contextlib.suppress(FileNotFoundError):
                    _platform.unlink(path)
            unlink_quietly(s.tmp_transcript)
            unlink_quietly(s.tmp_sidecar)
            if self._durable:
                _platform.fsync_dir(self._root)
            return existed
