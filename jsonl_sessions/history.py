"""The message-history API and pagination (agent-pool and coding-agent designs).

Methods of :class:`jsonl_sessions.SessionStore`, kept in their own module: they build on
the store's transcript format, guard and readers (see core.py) and add id lookup,
windows, pages, fork (copy_messages) and revert (truncate_messages).

What makes them cheap is the format: ids strictly increase down the transcript and
every line starts with its id (``{"id":"<ULID>",...``), so the file is sorted by id and
a line's id can be read off its first bytes. A message is found by binary search over
byte offsets (O(log n) block reads), a page is read backwards from the end or from a
cursor found that way, and a window near the end skips lines by counting newlines
backwards. No index file exists to go stale.

Reads take no lock. Each runs on one open descriptor of the transcript inside the
store's sequence-counter protocol (:meth:`StoreCore._consistent`: counter read before
and after, retried when it was odd or moved), so it sees one consistent state: an
in-place truncation or a rename moves the counter, and appends only add bytes after
the size the read started from.

Lenient like :meth:`load`: a complete line that does not parse is skipped with one
logged warning per call; it is not a message (it does not count towards a page's
``limit``) but it is a line (``get_message_count`` and ``get_messages`` offsets count
it). The mutations here are strict: ``truncate_messages`` refuses to cut off a line it
cannot parse and both refuse a named message whose line does not parse
(:class:`CorruptTranscriptError`).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar, cast

from . import _platform, codec, sidecar
from .core import StoreCore, _Held, _Session
from .errors import (
    CorruptTranscriptError,
    MessageNotFoundError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
)
from .locks import Control
from .transcript import BOM, BadLine, iter_lines_backward, line_number_of, log, parse, read_tail, warn_bad
from .types import ChatMessage, Page, _wrap

_T = TypeVar("_T")

#: Bytes read per binary-search probe (one page-cache page or so; grown for long lines).
PROBE_BYTES = 4096
#: Below this many bytes between the search bounds, the search scans lines instead.
SCAN_BYTES = 16 * 1024
#: Chunk for newline counting and for copying bytes.
CHUNK_BYTES = 1 << 20
#: ``whole_turns``: how many lines before a tool result its call is looked for.
TURN_SEARCH_LINES = 1024

_ID_PREFIX = b'{"id":"'
_ID_AND_TIME = re.compile(rb'\{"id":"[^"\\\n]*","created_at":(-?[0-9]+)[,}]')
_STALE = object()


# -- byte-level helpers (no parsing) --------------------------------------------------
def _first_line_start(fd: int, pos: int, limit: int) -> tuple[int, bytes]:
    """The first line start in ``[pos, limit)`` and the bytes read from it on (a prefix of
    that line, maybe empty); ``(limit, b"")`` when no line starts there."""
    if pos == 0:
        return (0, _platform.pread(fd, min(PROBE_BYTES, limit), 0)) if limit > 0 else (limit, b"")
    at = pos - 1  # a line starts at pos when byte pos - 1 is a newline
    block = PROBE_BYTES
    while at < limit - 1:
        buf = _platform.pread(fd, min(block, limit - 1 - at + PROBE_BYTES), at)
        if not buf:
            break
        nl = buf.find(b"\n", 0, limit - 1 - at)
        if nl != -1:
            return at + nl + 1, buf[nl + 1 :]
        at += min(len(buf), limit - 1 - at)
        block *= 4
    return limit, b""


def _line_at(fd: int, start: int, head: bytes, size: int) -> bytes | None:
    """The complete line starting at ``start`` (without its newline) given its first bytes
    ``head``; None when it has no newline before ``size`` (a torn tail)."""
    buf = head
    searched = 0
    block = 64 * 1024
    while True:
        nl = buf.find(b"\n", searched)
        if nl != -1:
            return buf[:nl]
        searched = len(buf)
        at = start + len(buf)
        if at >= size:
            return None
        more = _platform.pread(fd, min(block, size - at), at)
        if not more:
            return None
        buf += more
        block *= 2


def _id_at(fd: int, start: int, head: bytes, size: int) -> str | None:
    """The id of the line starting at ``start`` (``head``: its first bytes), read off the
    line's prefix when it is ours; None when the line is corrupt or torn."""
    if b"\n" not in head and len(head) < PROBE_BYTES and start + len(head) < size:
        head += _platform.pread(fd, min(PROBE_BYTES, size - start - len(head)), start + len(head))
    if start == 0 and head.startswith(BOM):
        start, head = 3, head[3:]
    if head.startswith(_ID_PREFIX):
        q = head.find(b'"', 7)
        if q != -1 and b"\\" not in head[7:q] and b"\n" not in head[7:q]:
            try:
                return head[7:q].decode("utf-8")
            except UnicodeDecodeError:
                return None
    line = _line_at(fd, start, head, size)
    if line is None:
        return None
    try:
        return codec.id_of_line(line)
    except ValueError:
        return None


def iter_lines_forward(fd: int, pos: int, size: int, block: int = 64 * 1024) -> Iterator[tuple[int, bytes]]:
    """Yield ``(start, line)`` for the complete lines from ``pos`` (a line start) up to
    ``size``, oldest first, reading ``block``-sized chunks (grown for long lines). A BOM
    before the first line is dropped. Cost: O(bytes yielded)."""
    buf = b""
    base = pos  # file offset of buf[0]
    cur = 0  # index in buf of the next line start
    searched = 0
    while True:
        nl = buf.find(b"\n", searched)
        if nl == -1:
            at = base + len(buf)
            if at >= size:
                return
            chunk = _platform.pread(fd, min(block, size - at), at)
            if not chunk:
                return
            buf = buf[cur:] + chunk
            base += cur
            searched = len(buf) - len(chunk)
            cur = 0
            block = max(block, len(buf))
            continue
        start = base + cur
        line = buf[cur:nl]
        if start == 0 and line.startswith(BOM):
            line = line[3:]
            start = 3
        yield start, line
        cur = searched = nl + 1


def _backward(fd: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(start, line)`` for the complete lines before ``end``, newest first."""
    for start, line, _committed in iter_lines_backward(fd, end):
        yield start, line


def find_line(fd: int, size: int, message_id: str) -> tuple[int, int, bytes] | None:
    """``(start, end, line)`` of the complete line with id ``message_id`` (``end`` just past
    its newline) in the first ``size`` bytes; None when there is none.

    Binary search over byte offsets: ids strictly increase down the file, and a probe
    reads one block at the middle offset, takes the next line start and reads its id
    off the line's prefix; lines whose id cannot be read (corrupt) are stepped over. The
    last line is looked at first, so the newest id (a common cursor) and ids newer than
    it cost one read. Cost: O(log(size / SCAN_BYTES)) probes of ~PROBE_BYTES (more where
    a probe lands in a long line), then one scan of at most SCAN_BYTES plus a line.
    (Interpolating ULID times instead of halving was measured: ~15% fewer reads on
    sessions written over hours, none on batch-written ones; not worth its complexity.)"""
    if not isinstance(message_id, str):
        return None
    lo, hi = 0, size  # the line, if present, starts in [lo, hi)
    if size > SCAN_BYTES:
        tail = read_tail(fd, size)
        if tail.last_line is not None:
            try:
                last = codec.id_of_line(tail.last_line)
            except ValueError:
                last = None
            if last is not None:
                if last < message_id:
                    return None
                if last == message_id:
                    return tail.last_start, tail.committed, tail.last_line
                hi = tail.last_start
    while hi - lo > SCAN_BYTES:
        mid = (lo + hi) // 2
        start, head = _first_line_start(fd, mid, hi)
        found = None
        while start < hi:
            found = _id_at(fd, start, head, size)
            if found is not None:
                break
            start, head = _first_line_start(fd, start + 1, hi)  # step over a corrupt line
        if found is None or found > message_id:
            hi = mid  # every readable line starting at >= mid sorts after the id
        elif found < message_id:
            lo = start + 1
        else:
            line = _line_at(fd, start, head, size)
            if line is None:
                return None
            if start == 0 and line.startswith(BOM):
                line, start = line[3:], 3
            return start, start + len(line) + 1, line
    first, _head = _first_line_start(fd, lo, hi)
    if first >= hi:
        return None
    found_fast = _scan_for_id(fd, first, hi, size, message_id)
    if found_fast is not False:
        return found_fast
    for start, line in iter_lines_forward(fd, first, size, block=hi - first + PROBE_BYTES):
        if start >= hi:
            return None
        try:
            found = codec.id_of_line(line)
        except ValueError:
            continue
        if found == message_id:
            return start, start + len(line) + 1, line
        if found > message_id:
            return None
    return None


def _scan_for_id(fd: int, first: int, hi: int, size: int, message_id: str) -> tuple[int, int, bytes] | None | Literal[False]:
    """The final scan of :func:`find_line` at C speed: when every line starting in
    ``[first, hi)`` begins with ``{"id":"`` (ours do), the wanted line is the one starting
    with ``{"id":"<message_id>"``, found with one ``bytes.find``. False when that does not
    apply (other lines, a BOM, an id JSON would escape): the caller scans line by line."""
    if any(c in message_id for c in '"\\') or any(ord(c) < 0x20 for c in message_id):
        return False
    buf = _platform.pread(fd, min(size, hi + PROBE_BYTES) - first, first)
    region = hi - first  # line starts at buf indexes [0, region)
    if not buf.startswith(_ID_PREFIX):
        return False  # (also a BOM at the file start)
    marker = b"\n" + _ID_PREFIX
    if buf.count(marker, 0, region + len(marker) - 2) != buf.count(b"\n", 0, region - 1):
        return False
    try:
        needle = _ID_PREFIX + message_id.encode("utf-8") + b'"'
    except UnicodeEncodeError:  # a lone surrogate: no line can hold it
        return None
    if buf.startswith(needle):
        at = 0
    else:
        at = buf.find(b"\n" + needle, 0, region + len(needle) - 1) + 1
        if at == 0:
            return None
    line = _line_at(fd, first + at, buf[at:], size)
    return None if line is None else (first + at, first + at + len(line) + 1, line)


def skip_forward(fd: int, pos: int, size: int, n: int) -> int:
    """The offset ``n`` complete lines after ``pos`` (a line start), or the end of the
    committed bytes when fewer follow. Counts newlines in chunks: no parsing."""
    last = pos
    block = PROBE_BYTES * 4  # a short skip reads little; a long one grows to CHUNK_BYTES reads
    while n > 0 and pos < size:
        chunk = _platform.pread(fd, min(block, size - pos), pos)
        block = min(block * 4, CHUNK_BYTES)
        if not chunk:
            break
        k = chunk.count(b"\n")
        if k < n:
            n -= k
            if k:
                last = pos + chunk.rfind(b"\n") + 1
            pos += len(chunk)
            continue
        idx = -1
        for _ in range(n):
            idx = chunk.index(b"\n", idx + 1)
        return pos + idx + 1
    return last if n > 0 else pos


def skip_backward(fd: int, end: int, n: int) -> int:
    """The start of the ``n``-th complete line before ``end`` (a line boundary), or 0 when
    fewer precede it. Counts newlines in chunks read backwards: no parsing."""
    if n <= 0:
        return end
    need = n + 1  # the newline ending the line before the wanted one (the first is at end - 1)
    pos = end
    block = PROBE_BYTES * 4
    while pos > 0:
        read = min(block, pos)
        block = min(block * 4, CHUNK_BYTES)
        chunk = _platform.pread(fd, read, pos - read)
        pos -= read
        k = chunk.count(b"\n")
        if k < need:
            need -= k
            continue
        idx = len(chunk)
        for _ in range(need):
            idx = chunk.rindex(b"\n", 0, idx)
        return pos + idx + 1
    return 0


def _copy_chunks(fd: int, end: int) -> Iterator[bytes]:
    pos = 0
    while pos < end:
        chunk = _platform.pread(fd, min(CHUNK_BYTES, end - pos), pos)
        if not chunk:
            raise OSError(f"transcript ended at byte {pos} while copying {end} bytes")
        yield chunk
        pos += len(chunk)


# -- line-level helpers ---------------------------------------------------------------
def _created_of(line: bytes) -> int | None:
    """A line's created_at, read off its prefix when it is ours (ValueError: corrupt)."""
    m = _ID_AND_TIME.match(line)
    if m is not None:
        return int(m.group(1))
    created = codec.decode_record(line).get("created_at")
    return created if type(created) is int else None


def _tool_call_id_of(record: dict[str, Any]) -> str | None:
    """The ``tool_call_id`` of a tool result, None for any other message."""
    value = record.get("tool_call_id")
    return value if isinstance(value, str) else None


def _calls(record: dict[str, Any], tool_call_id: str) -> bool:
    """Whether ``record`` is the tool call of ``tool_call_id`` (an entry of its ``tool_calls``)."""
    calls = record.get("tool_calls")
    return isinstance(calls, list) and any(isinstance(c, dict) and c.get("id") == tool_call_id for c in calls)


def _decode(line: bytes) -> dict[str, Any] | None:
    try:
        return codec.decode_record(line)
    except ValueError:
        return None


class _Lines:
    """An iterator of ``(start, line)`` that lines can be pushed back onto."""

    __slots__ = ("_it", "_pending")

    def __init__(self, it: Iterator[tuple[int, bytes]]) -> None:
        self._it = it
        self._pending: list[tuple[int, bytes]] = []

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> tuple[int, bytes]:
        if self._pending:
            return self._pending.pop()
        return next(self._it)

    def push_back(self, items: list[tuple[int, bytes]]) -> None:
        """Make ``items`` (in the order they were read) the next ones again."""
        self._pending.extend(reversed(items))


class _Reading:
    """What one page read needs: the filter, and the corrupt lines met (offset -> reason)."""

    __slots__ = ("bad", "ts_before")

    def __init__(self, ts_before: int | None) -> None:
        self.ts_before = ts_before
        self.bad: dict[int, str] = {}

    def accept(self, start: int, line: bytes) -> dict[str, Any] | None:
        """The line's record if it is a message passing the filter, else None (corrupt
        lines are remembered for the warning)."""
        try:
            if self.ts_before is not None:
                created = _created_of(line)
                if created is None or created >= self.ts_before:
                    return None
            return codec.decode_record(line)
        except ValueError as exc:
            self.bad.setdefault(start, str(exc) or type(exc).__name__)
            return None

    def warn(self, key: str, path: str) -> None:
        if self.bad:
            first = min(self.bad)
            log.warning("skipped %d corrupt line(s) in %s (session %r); first at byte offset %d: %s",
                        len(self.bad), path, key, first, self.bad[first])


def _call_before(fd: int, start: int, tool_call_id: str) -> bool:
    """Whether the call of ``tool_call_id`` is among the TURN_SEARCH_LINES lines before ``start``."""
    for n, (_start, line) in enumerate(_backward(fd, start)):
        if n >= TURN_SEARCH_LINES:
            return False
        if b"tool_calls" in line:
            record = _decode(line)
            if record is not None and _calls(record, tool_call_id):
                return True
    return False


def _starts_file(fd: int, start: int) -> bool:
    """Whether the line at ``start`` is the transcript's first line (a BOM may precede it)."""
    return start == 0 or (start == 3 and _platform.pread(fd, 3, 0) == BOM)


def _check_limit(limit: object) -> int:
    if type(limit) is not int or limit < 1:
        raise ValueError(f"limit must be a positive int, not {limit!r}")
    return limit


# -- the methods ----------------------------------------------------------------------
class HistoryMethods(StoreCore):
    """Part of :class:`jsonl_sessions.SessionStore` (which inherits it)."""

    # -- lock-free consistent reads -------------------------------------------------------
    def _read_consistently(self, s: _Session, read: Callable[[int, int], _T]) -> _T | None:
        """``read(fd, size)`` on the open transcript without taking the guard, in a state no
        in-place mutation (or rename) touched meanwhile (:meth:`_consistent`: retried while
        the control file's counter is odd or moved). None when the session does not
        exist. An error from ``read`` is raised only once the counter says it came from a
        stable state (one raised while a truncation was running is retried)."""

        def attempt(_control: Control) -> tuple[_T | None, Exception | None] | None:
            opened = self._open_existing(s, os.O_RDONLY)
            if opened is None:
                return None
            fd, size = opened
            try:
                return read(fd, size), None
            except (SessionStoreError, ValueError, LookupError) as exc:
                return None, exc
            finally:
                _platform.close(fd)

        outcome = self._consistent(s, attempt)
        if outcome is None:
            return None
        result, error = outcome
        if error is not None:
            raise error
        return result

    # -- counting and lookup --------------------------------------------------------------
    def get_message_count(self, key: str) -> int:
        """How many messages the session holds (complete lines: a corrupt line counts, a
        torn tail does not). Raises :class:`SessionNotFoundError` for a missing session.
        Takes no lock; never counts a state being rewritten. Cost: that of the store's
        line count (O(1) in the transcript size with its count cache)."""
        count = self._count(self._session(key))
        if count is None:
            raise SessionNotFoundError(key=key)
        return count

    def get_message(self, key: str, message_id: str) -> ChatMessage | None:
        """The message with id ``message_id``; None when the session has none (or does not
        exist, or that line is corrupt: logged). Binary search over byte offsets (ids
        increase down the file): O(log n) block reads, one line parsed. Takes no lock."""
        s = self._session(key)
        reading = _Reading(None)

        def read(fd: int, size: int) -> ChatMessage | None:
            reading.bad.clear()
            found = find_line(fd, size, message_id)
            if found is None:
                return None
            start, _end, line = found
            record = reading.accept(start, line)
            return None if record is None else _wrap(record)

        message = self._read_consistently(s, read)
        reading.warn(s.key, s.transcript)
        return message

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
        if limit is not None and (type(limit) is not int or limit < 0):
            raise ValueError(f"limit must be None or an int >= 0, not {limit!r}")
        if type(offset) is not int or offset < 0:
            raise ValueError(f"offset must be an int >= 0, not {offset!r}")
        s = self._session(key)
        bad: list[BadLine] = []
        attempts = [0]

        def read(fd: int, size: int) -> object:
            bad.clear()
            if limit == 0:
                return []
            count = self._count(s)
            if count is None or not self._count_matches(s, fd, size):
                attempts[0] += 1
                if attempts[0] < 5:
                    return _STALE  # appended or replaced since the descriptor was opened: again
                count = None  # still moving: go forwards, which needs no count
            stop = None if limit is None else offset + limit
            if count is not None:
                if offset >= count:
                    return []
                stop = count if stop is None else min(stop, count)
                if count - offset < offset:  # the newer half: count lines backwards from the end
                    end = skip_backward(fd, read_tail(fd, size).committed, count - stop)
                    return self._parse_range(s, fd, skip_backward(fd, end, stop - offset), end, offset, bad)
            begin = skip_forward(fd, 0, size, offset)
            end = read_tail(fd, size).committed if stop is None else skip_forward(fd, begin, size, stop - offset)
            return self._parse_range(s, fd, begin, end, offset, bad)

        while True:
            got = self._read_consistently(s, read)
            if got is None:
                raise SessionNotFoundError(key=key)
            if got is not _STALE:
                break
        warn_bad(bad, s.key, s.transcript)
        return cast("list[ChatMessage]", got)

    def _count_matches(self, s: _Session, fd: int, size: int) -> bool:
        """Whether a count just taken describes the file open as ``fd`` at ``size`` bytes:
        still the same file (no rename) and no byte appended since (an in-place change
        moves the sequence counter, which the caller checks)."""
        st = _platform.fstat(fd)
        try:
            return st.st_size == size and os.lstat(s.transcript).st_ino == st.st_ino
        except OSError:
            return False

    def _parse_range(self, s: _Session, fd: int, begin: int, end: int, first_line: int,
                     bad: list[BadLine]) -> list[ChatMessage]:
        """Parse the whole lines in bytes ``[begin, end)`` (line ``first_line`` 0-based starts
        at ``begin``); corrupt lines are skipped and listed in ``bad``."""
        if end <= begin:
            return []
        data = _platform.pread(fd, end - begin, begin)
        skip = 0
        if begin > 0 and data.startswith(BOM):  # not a BOM at the file start: a corrupt line
            skip = data.index(b"\n") + 1
            bad.append(BadLine(first_line + 1, begin, "a byte-order mark inside the file"))
        parsed = parse(data[skip:] if skip else data, strict=False, key=s.key, path=s.transcript)
        lines_before = 1 if skip else 0
        for b in parsed.bad:
            bad.append(BadLine(first_line + lines_before + b.line, begin + skip + b.offset, b.reason))
        return parsed.messages

    # -- pages ------------------------------------------------------------------------------
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
        """One page of messages, oldest first, for scrolling through a long session.

        - No cursor: the ``limit`` newest messages. ``before=id``: the ``limit`` newest
          older than that message. ``after=id``: the ``limit`` oldest newer than it
          (``after=""``: from the very first message). Not both.
        - ``ts_before`` (ms): only messages with ``created_at < ts_before`` (a message
          without one never matches); combines with either cursor. created_at need not
          increase down the file, so the read skips newer-stamped lines one by one (their
          time is read off the line's prefix, not parsed): the cost grows with the lines
          between the start point and the matches.
        - ``breakpoint=True``: the page is cut so it begins at the newest compaction
          summary (``kind == "compaction"``) within it: "history since the last compaction".
        - ``whole_turns=True``: a page that would begin with a tool result (``tool_call_id``
          in its extras) whose call (a message whose ``tool_calls`` holds an entry with
          that ``id``) is among the 1024 lines before it is widened back to that call. With
          ``after``, the page is instead extended at its newer end while the next message
          is such a tool result, so the next page does not begin with one (the page
          after an arbitrary cursor may: its call is at or before the cursor).

        ``has_more``: another page exists in the direction of travel (older for no cursor
        / ``before``, newer for ``after``), under the same filter. ``Page.before``: the
        oldest id in the page when anything is older (the cursor for the next older page),
        else None; ``Page.after``: the newest id when anything is newer, else None (with
        ``after`` travel both follow the filter exactly in the direction of travel; the
        opposite cursor only says that some line is there). An empty page has both None.

        Raises :class:`SessionNotFoundError` for a missing session,
        :class:`MessageNotFoundError` for an unknown cursor, ValueError for ``limit < 1``
        or both cursors. Corrupt lines are skipped (logged). Takes no lock; the page is
        one consistent state. Cost: O(page) reads and parses from the end, plus
        O(log n) block reads to find a cursor; never the whole transcript (``ts_before``
        and a missing tool call aside, as said above)."""
        limit = _check_limit(limit)
        if before is not None and after is not None:
            raise ValueError("page takes at most one of before= and after=")
        if ts_before is not None and type(ts_before) is not int:
            raise ValueError(f"ts_before must be int milliseconds or None, not {ts_before!r}")
        s = self._session(key)
        reading = _Reading(ts_before)

        def read(fd: int, size: int) -> Page:
            reading.bad.clear()
            if after is None:
                return self._page_backward(s, fd, size, limit, before, reading, breakpoint, whole_turns)
            return self._page_forward(s, fd, size, limit, after, reading, breakpoint, whole_turns)

        got = self._read_consistently(s, read)
        if got is None:
            raise SessionNotFoundError(key=key)
        reading.warn(s.key, s.transcript)
        return got

    def _page_backward(self, s: _Session, fd: int, size: int, limit: int, before: str | None,
                       reading: _Reading, breakpoint: bool, whole_turns: bool) -> Page:
        if before is None:
            end = size
            newer = False
        else:
            found = find_line(fd, size, before)
            if found is None:
                raise MessageNotFoundError(key=s.key, message_id=before)
            end = found[0]
            newer = True
        if reading.ts_before is None:
            page = self._page_back_in_bulk(s, fd, size if before is None else end, limit, newer, breakpoint,
                                           whole_turns)
            if page is not None:
                return page
        lines = _Lines(_backward(fd, end))
        picked: list[tuple[int, dict[str, Any]]] = []  # newest first
        newest_line: int | None = None
        for start, line in lines:
            if newest_line is None:
                newest_line = start
            record = reading.accept(start, line)
            if record is None:
                continue
            picked.append((start, record))
            if len(picked) >= limit or (breakpoint and record.get("kind") == "compaction"):
                break
        if not picked:
            return Page([], False, None, None)
        if whole_turns:
            self._widen_back(picked, lines, reading)
        has_more = any(reading.accept(start, line) is not None for start, line in lines)
        newer = newer or picked[0][0] != newest_line
        picked.reverse()
        return Page([_wrap(r) for _, r in picked], has_more, picked[0][1]["id"] if has_more else None,
                    picked[-1][1]["id"] if newer else None)

    def _page_back_in_bulk(self, s: _Session, fd: int, end: int, limit: int, newer: bool, breakpoint: bool,
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
        parsed = parse(data, strict=False, key=s.key, path=s.transcript)
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
        return Page(page, older, page[0].id if older else None, page[-1].id if newer else None)

    def _widen_back(self, picked: list[tuple[int, dict[str, Any]]], lines: _Lines, reading: _Reading) -> None:
        """Widen a page (``picked``, newest first) back to the call of the tool result it
        begins with, while it begins with one whose call is among the lines before it."""
        while True:
            tool_call_id = _tool_call_id_of(picked[-1][1])
            if tool_call_id is None:
                return
            scanned: list[tuple[int, bytes]] = []
            call = None
            for start, line in lines:
                scanned.append((start, line))
                if b"tool_calls" in line:
                    record = _decode(line)
                    if record is not None and _calls(record, tool_call_id):
                        call = record
                        break
                if len(scanned) >= TURN_SEARCH_LINES:
                    break
            if call is None:
                lines.push_back(scanned)
                return
            for start, line in scanned[:-1]:
                record = reading.accept(start, line)
                if record is not None:
                    picked.append((start, record))
            picked.append((scanned[-1][0], call))  # the call itself, even if the filter would skip it

    def _page_forward(self, s: _Session, fd: int, size: int, limit: int, after: str,
                      reading: _Reading, breakpoint: bool, whole_turns: bool) -> Page:
        if after == "":
            pos = 0
        else:
            found = find_line(fd, size, after)
            if found is None:
                raise MessageNotFoundError(key=s.key, message_id=after)
            pos = found[1]
        lines = _Lines(iter_lines_forward(fd, pos, size))
        picked: list[tuple[int, dict[str, Any]]] = []  # oldest first
        for start, line in lines:
            record = reading.accept(start, line)
            if record is not None:
                picked.append((start, record))
                if len(picked) >= limit:
                    break
        if not picked:
            return Page([], False, None, None)
        if breakpoint:
            for i in range(len(picked) - 1, -1, -1):
                if picked[i][1].get("kind") == "compaction":
                    del picked[:i]
                    break
        if whole_turns:
            self._extend_forward(fd, picked, lines, reading)
        has_more = any(reading.accept(start, line) is not None for start, line in lines)
        older = not _starts_file(fd, picked[0][0])
        return Page([_wrap(r) for _, r in picked], has_more, picked[0][1]["id"] if older else None,
                    picked[-1][1]["id"] if has_more else None)

    def _extend_forward(self, fd: int, picked: list[tuple[int, dict[str, Any]]], lines: _Lines,
                        reading: _Reading) -> None:
        """Extend a page (``picked``, oldest first) at its newer end while the next message is
        a tool result whose call is among the lines before it."""
        while True:
            skipped: list[tuple[int, bytes]] = []
            for start, line in lines:
                skipped.append((start, line))
                record = reading.accept(start, line)
                if record is not None:
                    break
            else:
                return
            tool_call_id = _tool_call_id_of(record)
            if tool_call_id is None or not _call_before(fd, start, tool_call_id):
                lines.push_back(skipped)
                return
            picked.append((start, record))

    # -- fork and revert ------------------------------------------------------------------
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
        src, dst = self._session(source), self._session(target)
        with contextlib.ExitStack() as held:
            for one in sorted({src.lock: src, dst.lock: dst}.values(), key=lambda x: x.lock):
                held.enter_context(_Held(self, one))  # both guards, in one global order
            opened = self._open_existing(src, os.O_RDONLY)
            if opened is None:
                raise SessionNotFoundError(key=source)
            fd, size = opened
            try:
                if self.session_exists(target):
                    raise SessionExistsError(key=target)
                tail = read_tail(fd, size)
                if up_to_message_id is None:
                    end = tail.committed
                    fork_point = self._last_id(fd, tail)
                else:
                    end = self._find_valid(src, fd, tail.committed, up_to_message_id)[1]
                    fork_point = up_to_message_id
                meta = sidecar.new_sidecar(target, self._clock())
                source_meta = sidecar.read(src.sidecar, source)
                meta["trim_breadcrumb"] = source_meta.get("trim_breadcrumb") if source_meta else None
                meta["parent"] = source
                meta["fork_point"] = fork_point
                self._create(dst, _copy_chunks(fd, end), meta=meta)
            finally:
                _platform.close(fd)
        return fork_point

    def _find_valid(self, s: _Session, fd: int, size: int, message_id: str) -> tuple[int, int, bytes]:
        """The line of ``message_id`` for a mutation: MessageNotFoundError when absent,
        CorruptTranscriptError when its line does not parse."""
        found = find_line(fd, size, message_id)
        if found is None:
            raise MessageNotFoundError(key=s.key, message_id=message_id)
        try:
            codec.decode_record(found[2])
        except ValueError as exc:
            raise CorruptTranscriptError(key=s.key, path=s.transcript, line=line_number_of(fd, found[0]),
                                         offset=found[0], reason=str(exc)) from None
        return found

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
        s = self._session(key)
        with _Held(self, s) as guard:
            opened = self._open_stat(s, os.O_RDWR)
            if opened is None:
                raise SessionNotFoundError(key=key)
            fd, st = opened
            try:
                tail = read_tail(fd, st.st_size)
                end = self._find_valid(s, fd, tail.committed, up_to_message_id)[1]
                removed = _platform.pread(fd, tail.committed - end, end)
                count = self._count_removed(s, fd, end, removed)
                if count == 0 and not tail.torn:
                    return 0
                before = self._known_count(guard, st)
                guard.begin_in_place()
                try:
                    _platform.truncate(fd, end)
                    if self._durable:
                        _platform.fsync(fd)
                finally:
                    guard.end_in_place()
                self._note_count(guard, fd, None if before is None else before - count)
                return count
            finally:
                _platform.close(fd)

    def _count_removed(self, s: _Session, fd: int, at: int, removed: bytes) -> int:
        """How many messages ``removed`` (the bytes from offset ``at``) holds; raises
        CorruptTranscriptError (absolute line and offset) if one does not parse."""
        if not removed:
            return 0
        if removed.startswith(BOM):  # a BOM is only skipped at the file start
            raise CorruptTranscriptError(key=s.key, path=s.transcript, line=line_number_of(fd, at), offset=at,
                                         reason="a byte-order mark inside the file")
        try:
            return len(parse(removed, strict=True, key=s.key, path=s.transcript).messages)
        except CorruptTranscriptError as exc:
            line = line_number_of(fd, at) + (exc.line or 1) - 1
            raise CorruptTranscriptError(key=s.key, path=s.transcript, line=line, offset=at + (exc.offset or 0),
                                         reason=exc.reason) from None
