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

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import Any

from . import _platform
from .codec import JSONDecodeError, decode_record, invalid_reason, loads
from .errors import CorruptTranscriptError
from .types import ChatMessage, _wrap

log = logging.getLogger("jsonl_sessions")

BOM = b"\xef\xbb\xbf"
BLOCK = 64 * 1024
_get_role = itemgetter("role")
_get_id = itemgetter("id")
_get_created = itemgetter("created_at")


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
    start = 3 if data.startswith(BOM) else 0
    torn = len(data) - committed
    if committed <= start:
        return Parsed([], [], committed, torn)
    lines = data[start : committed - 1].split(b"\n")
    records = _fast_records(lines)
    if records is not None:
        return Parsed(list(map(_wrap, records)), [], committed, torn)
    messages: list[ChatMessage] = []
    bad: list[BadLine] = []
    offset = start
    for number, line in enumerate(lines, 1):
        try:
            messages.append(_wrap(decode_record(line)))
        except (JSONDecodeError, ValueError) as exc:
            reason = str(exc) or type(exc).__name__
            if strict:
                raise CorruptTranscriptError(key=key, path=path, line=number, offset=offset, reason=reason) from None
            bad.append(BadLine(number, offset, reason))
        offset += len(line) + 1
    return Parsed(messages, bad, committed, torn)


def _fast_records(lines: list[bytes]) -> list[dict[str, Any]] | None:
    """Decode and validate all lines with C-level loops; None when any needs a closer look."""
    try:
        records = list(map(loads, lines))
        if set(map(type, records)) != {dict}:
            return None
        if set(map(type, map(_get_role, records))) != {str}:
            return None
        if set(map(type, map(_get_id, records))) != {str}:
            return None
        if not set(map(type, map(_get_created, records))) <= {int, type(None)}:
            return None
    except (JSONDecodeError, KeyError):
        return None
    for record in records:  # 'kind' is rarely missing; check cheaply
        kind = record.get("kind", "message")
        if type(kind) is not str:
            return None
    return records


def warn_bad(bad: list[BadLine], key: str, path: str) -> None:
    """Log (once per load) that corrupt lines were skipped."""
    if bad:
        first = bad[0]
        log.warning(
            "skipped %d corrupt line(s) in %s (session %r); first at line %d, byte offset %d: %s",
            len(bad), path, key, first.line, first.offset, first.reason,
        )


@dataclass(frozen=True, slots=True)
class Tail:
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
    while True:
        nl = buf.rfind(b"\n")
        if nl != -1:
            break
        if pos == 0:
            return
        read = min(BLOCK, pos)
        pos -= read
        buf = _platform.pread(fd, read, pos) + buf
    committed = pos + nl + 1
    end = nl + 1  # buf[:end] ends with a newline and is not yet yielded
    while end > 0:
        nl = buf.rfind(b"\n", 0, end - 1)
        if nl == -1 and pos > 0:
            read = min(BLOCK, pos)
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


def check_record(line: bytes) -> str | None:
    """Why ``line`` is not a valid message line, or None."""
    try:
        obj = loads(line)
    except JSONDecodeError as exc:
        return str(exc)
    return invalid_reason(obj)


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
