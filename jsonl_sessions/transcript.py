"""Reading transcript bytes: whole-file parsing (strict or lenient) and tail scanning.

Rules (see docs/format.md):

- a line ends with ``\\n``; a final fragment without one is a *torn tail*, an
  uncommitted write: it is ignored here and removed by the next mutation;
- every complete line must decode to a message record; one that does not is
  *corruption*, reported with its 1-based line number and byte offset;
- a UTF-8 byte-order mark at offset 0 is tolerated (editors add it) and skipped;
- an empty file is a session with no messages.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from io import BytesIO
from operator import itemgetter
from typing import Any, NamedTuple

from . import _platform
from .codec import JSONDecodeError, decode_record, loads
from .errors import CorruptTranscriptError
from .types import ChatMessage, _wrap

log = logging.getLogger("jsonl_sessions")

BOM = b"\xef\xbb\xbf"
BLOCK = 64 * 1024
FIRST_BLOCK = 4096
_FIELD_TYPES = (
    (itemgetter("role"), {str}),
    (itemgetter("id"), {str}),
    (itemgetter("kind"), {str}),
    (itemgetter("created_at"), {int}),
)


@dataclass(frozen=True, slots=True)
class BadLine:
    line: int
    offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class Parsed:
    messages: list[ChatMessage]
    bad: list[BadLine]
    committed: int  # bytes up to and including the last newline
    torn: int  # bytes of torn tail after it


def parse(data: bytes, *, strict: bool, key: str | None = None, path: str | None = None) -> Parsed:
    """Every message in ``data``, oldest first. Cost: O(len(data)).

    ``strict``: the first corrupt line raises :class:`CorruptTranscriptError`;
    otherwise corrupt lines are skipped and listed in ``Parsed.bad``.
    """
    committed = data.rfind(b"\n") + 1
    torn = len(data) - committed
    if committed == 0:
        return Parsed([], [], committed, torn)
    if not data.startswith(BOM):
        body = BytesIO(data[:committed] if torn else data)
        with _gc_paused(committed):
            records = _fast_records(body)
            if records is not None:
                return Parsed(list(map(_wrap, records)), [], committed, torn)
    return _parse_slowly(data, committed, torn, strict=strict, key=key, path=path)


def _parse_slowly(data: bytes, committed: int, torn: int, *, strict: bool, key: str | None, path: str | None) -> Parsed:
    """Line by line with offsets, to name each corrupt line (and to skip a BOM)."""
    start = 3 if data.startswith(BOM) else 0
    messages: list[ChatMessage] = []
    bad: list[BadLine] = []
    offset = start
    if committed <= start:
        return Parsed(messages, bad, committed, torn)
    for number, line in enumerate(data[start : committed - 1].split(b"\n"), 1):
        try:
            messages.append(_wrap(decode_record(line)))
        except (JSONDecodeError, ValueError) as exc:
            reason = str(exc) or type(exc).__name__
            if strict:
                raise CorruptTranscriptError(key=key, path=path, line=number, offset=offset, reason=reason) from None
            bad.append(BadLine(number, offset, reason))
        offset += len(line) + 1
    return Parsed(messages, bad, committed, torn)


def _fast_records(lines: Iterable[bytes]) -> list[dict[str, Any]] | None:
    """Decode and validate all lines with C-level loops; None when any needs a closer look."""
    try:
        records = list(map(loads, lines))
        # Each is a dict (itemgetter raises TypeError otherwise) with string id, role and
        # kind and an int created_at; anything else gets the precise line-by-line check.
        for get, expected in _FIELD_TYPES:
            if set(map(type, map(get, records))) != expected:
                return None
    except (JSONDecodeError, KeyError, TypeError):
        return None
    return records


class _GCPause:
    """Pause the cyclic garbage collector while a large transcript becomes objects.

    Building 100k message objects triggers many collections that traverse every young
    object, and that costs about a third of a load; the objects built here form no
    cycles, so pausing is safe. Nested and concurrent pauses are counted, and the
    collector is re-enabled only if it was enabled when the first pause began.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._was_enabled = False

    def __call__(self, size: int) -> contextlib.AbstractContextManager[None]:
        return self._paused() if size >= _GC_PAUSE_MIN_BYTES else contextlib.nullcontext()

    @contextlib.contextmanager
    def _paused(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0 and self._was_enabled:
                    gc.enable()


_GC_PAUSE_MIN_BYTES = 256 * 1024
_gc_paused = _GCPause()


def warn_bad(bad: list[BadLine], key: str, path: str) -> None:
    """Log (once per load) that corrupt lines were skipped."""
    if bad:
        first = bad[0]
        log.warning(
            "skipped %d corrupt line(s) in %s (session %r); first at line %d, byte offset %d: %s",
            len(bad), path, key, first.line, first.offset, first.reason,
        )


class Tail(NamedTuple):
    """The end of a transcript: where committed bytes end and what the last complete line is."""

    size: int
    committed: int  # offset just past the last newline (== size unless there is a torn tail)
    last_start: int  # offset of the last complete line (== committed when there is none)
    last_line: bytes | None  # that line without its newline

    @property
    def torn(self) -> bool:
        return self.committed != self.size


EMPTY_TAIL = Tail(0, 0, 0, None)


def read_tail(fd: int, size: int) -> Tail:
    """The last complete line of a file of ``size`` bytes. Cost: O(last line + torn tail)."""
    if size == 0:
        return EMPTY_TAIL
    start = size - FIRST_BLOCK if size > FIRST_BLOCK else 0
    buf = _platform.pread(fd, size - start, start)
    if buf.endswith(b"\n"):  # the usual case: no torn tail, a short last line
        nl = buf.rfind(b"\n", 0, len(buf) - 1)
        if nl != -1 or start == 0:
            line_start = start + nl + 1
            line = buf[nl + 1 : -1]
            if line_start == 0 and line.startswith(BOM):
                line = line[3:]
                line_start = 3
            return Tail(size, size, line_start, line)
    lines = iter_lines_backward(fd, size)
    first = next(lines, None)
    if first is None:
        return Tail(size, 0, 0, None)
    start, line, committed = first
    return Tail(size, committed, start, line)


def iter_lines_backward(fd: int, size: int) -> Iterator[tuple[int, bytes, int]]:
    """Yield ``(start, line, committed)`` for complete lines from the newest back, reading
    ``BLOCK``-sized chunks backwards; ``committed`` is the end of committed bytes (a torn
    tail is skipped). A BOM before the first line is dropped. Cost: O(bytes yielded)."""
    pos = size  # buf holds the file's bytes [pos, pos + len(buf))
    buf = b""
    block = FIRST_BLOCK  # most lines are short: start small, grow to BLOCK
    while True:
        nl = buf.rfind(b"\n")
        if nl != -1:
            break
        if pos == 0:
            return
        read = min(block, pos)
        block *= 4  # geometric growth: a huge line costs O(its size), not O(size^2 / block)
        pos -= read
        buf = _platform.pread(fd, read, pos) + buf
    committed = pos + nl + 1
    end = nl + 1  # buf[:end] ends with a newline and is not yet yielded
    while end > 0:
        nl = buf.rfind(b"\n", 0, end - 1)
        if nl == -1 and pos > 0:
            read = min(block, pos)
            block = min(block * 4, max(BLOCK, end))
            pos -= read
            buf = _platform.pread(fd, read, pos) + buf[:end]
            end = len(buf)
            continue
        line_start = nl + 1
        line = buf[line_start : end - 1]
        start = pos + line_start
        if start == 0 and line.startswith(BOM):
            line = line[3:]
            start = 3
        yield start, line, committed
        end = line_start


def count_newlines(fd: int, start: int, end: int) -> int:
    """Newlines in bytes ``start``..``end`` of the file (complete lines ending there). O(end - start)."""
    count = 0
    pos = start
    while pos < end:
        chunk = _platform.pread(fd, min(1 << 20, end - pos), pos)
        if not chunk:
            break
        count += chunk.count(b"\n")
        pos += len(chunk)
    return count


def line_number_of(fd: int, offset: int) -> int:
    """1-based line number of the line starting at ``offset`` (counts newlines before it: O(offset))."""
    count = 0
    pos = 0
    while pos < offset:
        chunk = _platform.pread(fd, min(1 << 20, offset - pos), pos)
        if not chunk:
            break
        count += chunk.count(b"\n")
        pos += len(chunk)
    return count + 1
