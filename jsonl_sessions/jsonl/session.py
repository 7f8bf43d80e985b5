"""One session of a JSONL store: every per-session operation, with its body.

A :class:`Session` is the store's :class:`~jsonl_sessions.jsonl.txn.Root` and the session's
:class:`~jsonl_sessions.jsonl.layout.SessionFiles`, nothing more: it is made per call
(:meth:`jsonl_sessions.SessionStore._session`) and holds no state of its own. The
contracts (errors, atomicity, cost) are those of the :class:`jsonl_sessions.SessionStore`
methods that call these.

Two ways in, and nothing else touches the files:

- reads take no lock: they run inside :func:`jsonl_sessions.jsonl.control.with_transcript`
  (or :func:`~jsonl_sessions.jsonl.control.consistent`), which retries a read that an
  in-place mutation overlapped, so a reader sees one committed state;
- mutations run inside ``with mutate(root, files) as tx`` (:mod:`jsonl_sessions.jsonl.txn`),
  holding the session's guard; each is a few :class:`~jsonl_sessions.jsonl.txn.Tx`
  primitives, each all-or-nothing on disk.

What makes the reads cheap is the format: ULIDs strictly increase down the transcript and
every line starts with its id, so a message is found by binary search over byte offsets
(:func:`~jsonl_sessions.jsonl.lines.find_line`), and a window or page near the end is found
by counting newlines backwards. No index file exists to go stale.

Appends are not written here: :meth:`Session.append` and :meth:`Session.append_many` hand
them to the one append path, :mod:`jsonl_sessions.jsonl.append` (group commit included).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .. import _platform, codec, sidecar
from ..arguments import check_page_arguments, check_window
from ..corruption import BOM, BOM_INSIDE, BadLine
from ..errors import (
    CorruptTranscriptError,
    MessageNotFoundError,
    SessionExistsError,
    SessionNotFoundError,
    UnsafePathError,
)
from ..ids import assign_ids, replacement_record
from ..pagination import TURN_SEARCH_LINES, Cursor, Lines, Reading, page_back, page_forward
from ..records import calls, decode_or_none
from ..types import ChatMessage, Page
from . import append as appending
from . import control
from .append import has_id, last_id, new_meta, previous_id
from .layout import FileState, SessionFiles
from .lines import (
    copy_chunks,
    find_line,
    iter_lines_backward,
    iter_lines_forward,
    line_number_of,
    line_starting_at,
    read_tail,
    skip_backward,
    skip_forward,
    starts_file,
)
from .transcript import Parsed, check_file, parse, parse_file, warn_bad
from .txn import Root, Tx, mutate

log = logging.getLogger("jsonl_sessions")

#: How often a window read retries when the file keeps changing under it before it
#: counts forwards (which needs no count).
_WINDOW_ATTEMPTS = 5


class Session:
    """One session of a store (cheap: two references; make one per call)."""

    __slots__ = ("files", "root")

    def __init__(self, root: Root, files: SessionFiles) -> None:
        self.root = root
        self.files = files

    @property
    def key(self) -> str:
        return self.files.key

    # -- reading (no lock) -----------------------------------------------------------------
    def exists(self) -> bool:
        """Whether the transcript exists (a regular file)."""
        return self.files.transcript_exists()

    def load(self) -> list[ChatMessage]:
        """Every message, lenient: corrupt lines and a symlinked (or otherwise not regular)
        transcript are logged, skipped. A control file that is not a regular file (a
        directory, symlink or FIFO where ``<stem>.lock`` belongs) does not hide the
        transcript: it is logged, and the transcript read without it (no writer can take
        the session's guard then, so nothing rewrites it in place; the torn tail of an
        append by another tool is ignored as always)."""
        files = self.files

        def read(fd: int, size: int) -> Parsed:
            return parse_file(fd, size, strict=False, key=files.key, path=files.transcript)

        try:
            try:
                parsed = control.with_transcript(self.root, files, read)
            except UnsafePathError as exc:
                if exc.path != files.lock:
                    raise
                log.warning("%s; reading the transcript without it", exc)
                parsed = control.without_control(files, read)
        except UnsafePathError as exc:
            log.warning("%s", exc)
            return []
        if parsed is None:
            return []
        warn_bad(parsed.bad, files.key, files.transcript)
        return parsed.messages

    def try_load(self) -> list[ChatMessage]:
        """Every message, strict: the first corrupt line raises :class:`CorruptTranscriptError`."""
        files = self.files
        parsed = control.with_transcript(
            self.root, files, lambda fd, size: parse_file(fd, size, strict=True, key=files.key, path=files.transcript))
        return [] if parsed is None else parsed.messages

    def check(self) -> int:
        """Raise what :meth:`try_load` raises, holding a block of messages at a time, never
        the session (:func:`~jsonl_sessions.jsonl.transcript.check_file`); the number of
        messages (0 for a missing session)."""
        files = self.files
        counted = control.with_transcript(
            self.root, files, lambda fd, size: check_file(fd, size, key=files.key, path=files.transcript))
        return 0 if counted is None else counted

    def breadcrumb(self) -> bool | None:
        """The breadcrumb flag, read consistently with the transcript (a replace renames both
        with the counter odd)."""
        files = self.files
        if not files.transcript_exists():
            return None
        meta = control.consistent(self.root, files, lambda _head: files.read_sidecar())
        value = None if meta is None else meta.get("trim_breadcrumb")
        return value if isinstance(value, bool) else None

    def count(self) -> int:
        """Complete lines (SessionNotFoundError for a missing session). O(1) with the count cache."""
        count = control.count(self.root, self.files)
        if count is None:
            raise SessionNotFoundError(key=self.files.key)
        return count

    def get_message(self, message_id: str) -> ChatMessage | None:
        """The message with ``message_id`` (None when absent or its line is corrupt: logged)."""
        bad: list[BadLine] = []

        def read(fd: int, size: int) -> ChatMessage | None:
            bad.clear()
            found = find_line(fd, size, message_id)
            if found is None:
                return None
            start, _end, line = found
            try:
                return codec.decode_message(line)
            except ValueError as exc:
                bad.append(BadLine.of(line_number_of(fd, start), start, exc))
                return None

        message = control.with_transcript(self.root, self.files, read)
        warn_bad(bad, self.files.key, self.files.transcript)
        return message

    def window(self, limit: int | None, offset: int) -> list[ChatMessage]:
        """The messages at positions ``[offset, offset + limit)``: from the end (the newer
        half, when the count is known) or from the start."""
        check_window(limit, offset)
        root, files = self.root, self.files
        bad: list[BadLine] = []
        attempts = [0]

        def read(fd: int, size: int) -> list[ChatMessage] | None:
            bad.clear()
            if limit == 0:
                return []
            # Counted inside the read, so the counter check around it covers the count too.
            counted = control.count_with_size(root, files)
            count = None if counted is None else counted[0]
            if counted is None or not self._count_describes(fd, size, counted[1]):
                attempts[0] += 1
                if attempts[0] < _WINDOW_ATTEMPTS:
                    return None  # appended or replaced since the descriptor was opened: again
                count = None  # still moving: go forwards, which needs no count
            return self._window(fd, size, count, offset, limit, bad)

        while True:
            got = control.with_transcript(root, files, read)
            if got is not None:
                warn_bad(bad, files.key, files.transcript)
                return got
            if not files.transcript_exists():
                raise SessionNotFoundError(key=files.key)

    def page(self, *, limit: int = 100, before: str | None = None, after: str | None = None,
             ts_before: int | None = None, breakpoint: bool = False, whole_turns: bool = False) -> Page:
        """One page of messages for scrolling. Read backwards from the end (or from a cursor
        found by binary search) or forwards after a cursor; only the page's lines (and one
        more, for ``has_more``) are parsed, the usual backward page without a filter in one
        go. Lenient: a corrupt line is skipped with one logged warning per call (it does
        not count towards ``limit``)."""
        check_page_arguments(limit, before, after, ts_before)
        reading = Reading(ts_before)

        first_line: list[int] = []

        def read(fd: int, size: int) -> Page:
            reading.bad.clear()
            first_line.clear()
            if after is None:
                got = self._page_backward(fd, size, limit, before, reading, breakpoint, whole_turns)
            else:
                got = self._page_forward(fd, size, limit, after, reading, breakpoint, whole_turns)
            if reading.bad:  # its line number: counted from the start, only for a page with damage
                first_line.append(line_number_of(fd, min(reading.bad)))
            return got

        got = control.with_transcript(self.root, self.files, read)
        if got is None:
            raise SessionNotFoundError(key=self.files.key)
        if reading.bad:
            first = min(reading.bad)
            log.warning("skipped %d corrupt line(s) in %s (session %r); first at line %d, byte offset %d: %s",
                        len(reading.bad), self.files.transcript, self.files.key, first_line[0], first,
                        reading.bad[first])
        return got

    # -- appending (the append path: see the module docstring) -----------------------------
    def append(self, message: ChatMessage) -> str:
        """Append one message; its id."""
        return appending.append(self.root, self.files, message)

    def append_many(self, msgs: Sequence[ChatMessage]) -> list[str]:
        """Append ``msgs`` as one locked write (all or none); their ids."""
        return appending.append_many(self.root, self.files, msgs)

    # -- changing the end (under the guard) ------------------------------------------------
    def remove_last(self, expected_id: str | None) -> bool:
        """Remove the newest message (compare-and-remove with ``expected_id``)."""
        with mutate(self.root, self.files) as tx:
            if not tx.open():
                return False
            record = _newest(tx)
            if record is None or (expected_id is not None and (record.get("id") or "") != expected_id):
                return False
            tx.truncate_to(tx.tail().last_start, 1)
            return True

    def update_last(self, m: ChatMessage, expected_id: str | None) -> bool:
        """Replace the newest message (keeping its id and created_at unless ``m`` has its own)."""
        root, files = self.root, self.files
        with mutate(root, files) as tx:
            if not tx.open():
                return False
            old = _newest(tx)
            if old is None:
                return False
            if expected_id is not None and (old.get("id") or "") != expected_id:
                return False
            tail = tx.tail()
            fd = tx.fd
            record = replacement_record(files.key, m, old, root.clock, lambda: previous_id(fd, tail),
                                        lambda mid: has_id(fd, tail.last_start, mid))
            tx.rewrite_tail(tail.last_start, self._encode([record])[0])
            return True

    def truncate(self, up_to: str) -> int:
        """Revert to ``up_to``: the number of messages removed (strictly parsed first)."""
        with mutate(self.root, self.files) as tx:
            if not tx.open():
                raise SessionNotFoundError(key=self.files.key)
            tail = tx.tail()
            end = _find_valid(tx, tail.committed, up_to)[1]
            count = _count_removed(tx, end, _platform.pread(tx.fd, tail.committed - end, end))
            if count == 0 and not tail.torn:
                return 0
            tx.truncate_to(end, count)
            return count

    # -- replacing everything (under the guard) --------------------------------------------
    def rewrite(self, msgs: Sequence[ChatMessage]) -> None:
        """Replace the whole transcript (temp + rename), creating the session if needed."""
        root, files = self.root, self.files
        with mutate(root, files) as tx:
            lines = self._encode(assign_ids(files.key, msgs, None, root.clock()))
            if not files.transcript_exists():
                tx.create(lines, new_meta(root, files.key, None))
                return
            _check_clean(tx)
            tx.install(lines)
            tx.mark_clean()

    def replace_state(self, msgs: Sequence[ChatMessage], breadcrumb: bool, *, if_exists: bool) -> bool:
        """Replace transcript and breadcrumb flag as one unit; False (nothing written) when
        ``if_exists`` and the session does not exist."""
        root, files = self.root, self.files
        with mutate(root, files) as tx:
            exists = files.transcript_exists()
            if if_exists and not exists:
                return False
            lines = self._encode(assign_ids(files.key, msgs, None, root.clock()))
            if not exists:
                tx.create(lines, new_meta(root, files.key, bool(breadcrumb)))
                return True
            _check_clean(tx)
            meta = tx.read_sidecar()
            meta["trim_breadcrumb"] = bool(breadcrumb)
            meta["updated_at"] = root.clock()
            tx.move_together(lines, meta)
            return True

    def update_sidecar(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Apply ``change(meta)`` to the sidecar of an existing session under its guard and
        replace the sidecar atomically. :class:`SessionNotFoundError` for a missing session;
        :class:`CorruptMetadataError` (nothing written) for an unreadable sidecar."""
        with mutate(self.root, self.files) as tx:
            if not self.files.transcript_exists():
                raise SessionNotFoundError(key=self.files.key)
            meta = tx.read_sidecar()
            change(meta)
            tx.write_sidecar(meta)

    # -- clearing and deleting (under the guard) -------------------------------------------
    def clear(self) -> int:
        """Remove every message (refusing corrupt lines); the number removed."""
        files = self.files
        with mutate(self.root, files) as tx:
            if not tx.open():
                return 0
            count = len(parse(tx.read_all(), strict=True, key=files.key, path=files.transcript).messages)
            tx.truncate_to(0, count, remaining=0)
            return count

    def delete(self) -> bool:
        """Delete transcript, sidecar and temp files; True if the session existed."""
        with mutate(self.root, self.files) as tx:
            existed = self.files.transcript_exists()
            tx.delete()
            return existed

    # -- forking (both guards) -------------------------------------------------------------
    def fork(self, target: Session, up_to: str | None) -> str | None:
        """Copy this session into the new session ``target`` up to ``up_to`` (both guards,
        taken in lock-path order); the fork point."""
        root, source, dest = self.root, self.files, target.files
        with contextlib.ExitStack() as held:
            txs: dict[str, Tx] = {}
            for one in sorted({source.lock: source, dest.lock: dest}.values(), key=lambda x: x.lock):
                txs[one.lock] = held.enter_context(mutate(root, one))
            src = txs[source.lock]
            if not src.open():
                raise SessionNotFoundError(key=source.key)
            if dest.transcript_exists():
                raise SessionExistsError(key=dest.key)
            tail = src.tail()
            if up_to is None:
                end, fork_point = tail.committed, last_id(src.fd, tail)
            else:
                end, fork_point = _find_valid(src, tail.committed, up_to)[1], up_to
            txs[dest.lock].create(copy_chunks(src.fd, end), self._fork_meta(dest, fork_point))
        return fork_point

    # -- private ---------------------------------------------------------------------------
    def _encode(self, records: list[dict[str, Any]]) -> list[bytes]:
        return codec.encode_records(records, self.files.key, self.root.max_message_bytes)

    def _fork_meta(self, target: SessionFiles, fork_point: str | None) -> dict[str, Any]:
        """The target's sidecar: parent, fork point, and this session's breadcrumb flag."""
        meta = sidecar.new_sidecar(target.key, self.root.clock())
        source_meta = self.files.read_sidecar()
        meta["trim_breadcrumb"] = source_meta.get("trim_breadcrumb") if source_meta else None
        meta["parent"] = self.files.key
        meta["fork_point"] = fork_point
        return meta

    def _count_describes(self, fd: int, size: int, counted_size: int) -> bool:
        """Whether a count just taken (of the first ``counted_size`` bytes) describes the file
        open as ``fd`` as read at ``size`` bytes (the visible part: a durable append in flight
        is not read): the same size, still the same file (no rename; an in-place change moves
        the sequence counter, which the read checks)."""
        opened = FileState.of(_platform.fstat(fd))
        try:
            return counted_size == size and opened.same_file(_platform.lstat(self.files.transcript))
        except OSError:
            return False

    def _window(self, fd: int, size: int, count: int | None, offset: int, limit: int | None,
                bad: list[BadLine]) -> list[ChatMessage]:
        """The window read from the end (the newer half, when the count is known) or the start."""
        stop = None if limit is None else offset + limit
        if count is not None:
            if offset >= count:
                return []
            stop = count if stop is None else min(stop, count)
            if count - offset < offset:  # the newer half: count lines backwards from the end
                end = skip_backward(fd, read_tail(fd, size).committed, count - stop)
                return self._parse_range(fd, skip_backward(fd, end, stop - offset), end, offset, bad)
        begin = skip_forward(fd, 0, size, offset)
        end = read_tail(fd, size).committed if stop is None else skip_forward(fd, begin, size, stop - offset)
        return self._parse_range(fd, begin, end, offset, bad)

    def _parse_range(self, fd: int, begin: int, end: int, first_line: int,
                     bad: list[BadLine]) -> list[ChatMessage]:
        """Parse the whole lines in bytes ``[begin, end)`` (line ``first_line``, 0-based, starts
        at ``begin``); corrupt lines are skipped and listed in ``bad``."""
        if end <= begin:
            return []
        data = _platform.pread(fd, end - begin, begin)
        skip = 0
        if begin > 0 and data.startswith(BOM):  # not a BOM at the file start: a corrupt line
            skip = data.index(b"\n") + 1
            bad.append(BadLine(first_line + 1, begin, BOM_INSIDE))
        parsed = parse(data[skip:] if skip else data, strict=False, key=self.files.key, path=self.files.transcript)
        lines_before = 1 if skip else 0
        for b in parsed.bad:
            bad.append(BadLine(first_line + lines_before + b.line, begin + skip + b.offset, b.reason))
        return parsed.messages

    def _find_cursor(self, fd: int, size: int, cursor: str) -> tuple[int, int]:
        """``(start, end)`` of the line a page cursor names (see :func:`_cursor`):
        ``<id>@<offset>`` when the line at that offset still has that id, else the line
        with that id (a cursor from before a rewrite: its id). MessageNotFoundError when none."""
        message_id, mark, at = cursor.rpartition(CURSOR_MARK)
        if mark and at.isascii() and at.isdigit():
            start = int(at)
            line = line_starting_at(fd, start, size)
            if line is not None:
                try:
                    if codec.id_of_line(line) == message_id:
                        return start, start + len(line) + 1
                except ValueError:
                    pass
        found = find_line(fd, size, cursor)
        if found is None and mark and message_id:
            found = find_line(fd, size, message_id)
        if found is None:
            raise MessageNotFoundError(key=self.files.key, message_id=cursor)
        return found[0], found[1]

    def _page_backward(self, fd: int, size: int, limit: int, before: str | None, reading: Reading,
                       breakpoint: bool, whole_turns: bool) -> Page:
        if before is None:
            end = size
            newer = False
        else:
            end = self._find_cursor(fd, size, before)[0]
            newer = True
        if reading.ts_before is None:
            bulk = self._page_back_in_bulk(fd, size, end, limit, newer, breakpoint, whole_turns)
            if bulk is not None:
                return bulk
        return page_back(Lines(_backward(fd, end)), reading, limit, breakpoint, whole_turns, newer,
                         _cursor(fd, size))

    def _page_back_in_bulk(self, fd: int, size: int, end: int, limit: int, newer: bool, breakpoint: bool,
                           whole_turns: bool) -> Page | None:
        """The usual backward page (no filter) the fast way: find the start of the
        ``limit + 1`` lines before ``end`` by counting newlines, read them with one pread
        and parse them in one go (C-level loops). None when the line-by-line way is needed:
        a corrupt line among them, or a page beginning with a tool result (whole_turns)."""
        if not newer:
            end = read_tail(fd, end).committed  # no cursor: before the torn tail, if any
        start = skip_backward(fd, end, limit + 1)
        if start >= end:
            return Page([], False, None, None)
        data = _platform.pread(fd, end - start, start)
        if start > 0 and data.startswith(BOM):
            return None
        parsed = parse(data, strict=False, key=self.files.key, path=self.files.transcript)
        if parsed.bad or parsed.committed != len(data):
            return None
        messages = parsed.messages
        older = len(messages) > limit  # the extra line read: a message before the page
        page = messages[-limit:]
        if breakpoint:
            for i in range(len(page) - 1, -1, -1):
                if page[i].kind == "compaction":
                    older = older or i > 0
                    page = page[i:]
                    break
        if whole_turns and isinstance(page[0].extra.get("tool_call_id"), str):
            return None
        cursor = _cursor(fd, size)
        first = at = 3 if start == 0 and data.startswith(BOM) else 0
        for _ in range(len(messages) - len(page)):  # to page[0]'s line (every line read is a message)
            at = data.index(b"\n", at) + 1
        last = data.rfind(b"\n", 0, len(data) - 1) + 1 or first
        return Page(page, older, cursor(start + at, page[0].id) if older else None,
                    cursor(start + last, page[-1].id) if newer else None)

    def _page_forward(self, fd: int, size: int, limit: int, after: str, reading: Reading, breakpoint: bool,
                      whole_turns: bool) -> Page:
        pos = 0 if after == "" else self._find_cursor(fd, size, after)[1]
        return page_forward(Lines(iter_lines_forward(fd, pos, size)), reading, limit, breakpoint, whole_turns,
                            lambda start, tool_call_id: _call_before(fd, start, tool_call_id),
                            lambda start: starts_file(fd, start), _cursor(fd, size))


#: Separates a page cursor's id from the offset of its line (see :func:`_cursor`).
CURSOR_MARK = "@"


def _cursor(fd: int, size: int) -> Cursor:
    """The page cursors of the transcript open as ``fd``: a message's id when the id names
    that line (:func:`find_line` finds it there: always, unless the transcript repeats the
    id or holds it out of order), else ``<id>@<byte offset of the line>``, which names the
    line whatever its id. Cost: one :func:`find_line` (O(log n)) per cursor."""
    def cursor(start: int, message_id: str) -> str:
        if message_id and CURSOR_MARK not in message_id:
            found = find_line(fd, size, message_id)
            if found is not None and found[0] == start:
                return message_id
        return f"{message_id}{CURSOR_MARK}{start}"

    return cursor


def _backward(fd: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(start, line)`` for the complete lines before ``end``, newest first."""
    for start, line, _committed in iter_lines_backward(fd, end):
        yield start, line


def _call_before(fd: int, start: int, tool_call_id: str) -> bool:
    """Whether the call of ``tool_call_id`` is among the TURN_SEARCH_LINES lines before ``start``."""
    for n, (_start, line) in enumerate(_backward(fd, start)):
        if n >= TURN_SEARCH_LINES:
            return False
        if b"tool_calls" in line:
            record = decode_or_none(line)
            if record is not None and calls(record, tool_call_id):
                return True
    return False


def _find_valid(tx: Tx, size: int, message_id: str) -> tuple[int, int, bytes]:
    """The line of ``message_id`` for a mutation: MessageNotFoundError when absent,
    CorruptTranscriptError when its line does not parse."""
    found = find_line(tx.fd, size, message_id)
    if found is None:
        raise MessageNotFoundError(key=tx.files.key, message_id=message_id)
    try:
        codec.decode_record(found[2])
    except ValueError as exc:
        raise BadLine.of(line_number_of(tx.fd, found[0]), found[0], exc).error(tx.files.key,
                                                                                tx.files.transcript) from None
    return found


def _count_removed(tx: Tx, at: int, removed: bytes) -> int:
    """How many messages ``removed`` (the bytes from offset ``at``) holds; raises
    CorruptTranscriptError (absolute line and offset) if one does not parse."""
    files = tx.files
    if not removed:
        return 0
    if removed.startswith(BOM):  # a BOM is only skipped at the file start
        raise BadLine(line_number_of(tx.fd, at), at, BOM_INSIDE).error(files.key, files.transcript)
    try:
        return len(parse(removed, strict=True, key=files.key, path=files.transcript).messages)
    except CorruptTranscriptError as exc:
        line = line_number_of(tx.fd, at) + (exc.line or 1) - 1
        raise BadLine(line, at + (exc.offset or 0), exc.reason or "").error(files.key, files.transcript) from None


# -- checks on an open transcript, under the guard -----------------------------------------
def _newest(tx: Tx) -> dict[str, Any] | None:
    """The newest message's record of the open transcript; None when it has no complete
    line. A corrupt newest line raises :class:`CorruptTranscriptError` (its line number
    counted: O(n) then, O(1) otherwise)."""
    tail = tx.tail()
    if tail.last_line is None:
        return None
    try:
        return codec.decode_record(tail.last_line)
    except ValueError as exc:
        bad = BadLine.of(line_number_of(tx.fd, tail.last_start), tail.last_start, exc)
        raise bad.error(tx.files.key, tx.files.transcript) from None


def _check_clean(tx: Tx) -> None:
    """Refuse (CorruptTranscriptError) to replace a transcript holding bytes that do not
    parse: they would be destroyed. O(transcript), or O(1) when the transcript is known
    to be clean (written or checked by this process, unchanged since: :attr:`Tx.clean`)."""
    if tx.open() and not tx.clean:
        data = tx.read_all()
        if data:
            parse(data, strict=True, key=tx.files.key, path=tx.files.transcript)
        tx.clean = True
