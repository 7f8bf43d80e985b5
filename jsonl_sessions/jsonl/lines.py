"""Transcript bytes, without parsing JSON: where lines start and end, read forwards or
backwards in blocks, the tail, counting newlines, and finding a line by id.

Rules (docs/format.md): a line ends with ``\\n``; a final fragment without one is a *torn
tail* (an unfinished write, never a line); a UTF-8 byte-order mark at offset 0 is
skipped (offsets still count it). Every line the store writes starts with
``{"id":"<id>"`` and its ULIDs strictly increase down the file, so a line's id is read
off its first bytes (:func:`jsonl_sessions.codec.prefix_id`) and the file is sorted by
id (ids that are not ULIDs, left by an earlier version or another tool, are passed over).
Everything here reads through ``_platform.pread`` on a descriptor the caller owns.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal, NamedTuple

from .. import _platform, codec
from ..corruption import BOM
from ..ids import is_ulid

#: Bytes of the first read at the end of a file (most lines are shorter).
FIRST_BLOCK = 4096
#: Block of line-by-line reads.
BLOCK = 64 * 1024
#: Bytes read per binary-search probe (one page-cache page or so; grown for long lines).
PROBE_BYTES = 4096
#: Below this many bytes between the search bounds, the search scans lines instead.
SCAN_BYTES = 16 * 1024
#: Chunk for newline counting and for copying bytes.
CHUNK_BYTES = 1 << 20


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
    """Newlines in bytes ``start``..``end`` of the file (complete lines ending there), counted
    in 1 MiB reads without parsing. O(end - start)."""
    count = 0
    pos = start
    while pos < end:
        chunk = _platform.pread(fd, min(CHUNK_BYTES, end - pos), pos)
        if not chunk:
            break
        count += chunk.count(b"\n")
        pos += len(chunk)
    return count


def line_number_of(fd: int, offset: int) -> int:
    """1-based line number of the line starting at ``offset``. O(offset)."""
    return count_newlines(fd, 0, offset) + 1


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
    found = codec.prefix_id(head)
    if found is not None:
        return found
    line = _line_at(fd, start, head, size)
    if line is None:
        return None
    try:
        return codec.id_of_line(line)
    except ValueError:
        return None


def iter_lines_forward(fd: int, pos: int, size: int, block: int = BLOCK) -> Iterator[tuple[int, bytes]]:
    """Yield ``(start, line)`` for the complete lines from ``pos`` (a line start) up to
    ``size``, oldest first, reading chunks of at most ``block`` bytes (a line longer than
    a block is assembled from several reads). A BOM before the first line is dropped;
    a torn tail is not yielded. Cost: O(bytes read); memory: a block plus the longest line."""
    parts: list[bytes] = []  # the pieces of the line being assembled, from earlier chunks
    line_start = pos
    at = pos
    while at < size:
        chunk = _platform.pread(fd, min(block, size - at), at)
        if not chunk:
            return
        base = at
        at += len(chunk)
        cur = 0
        while True:
            nl = chunk.find(b"\n", cur)
            if nl == -1:
                break
            if parts:
                parts.append(chunk[cur:nl])
                line = b"".join(parts)
                parts = []
            else:
                line = chunk[cur:nl]
            start = line_start
            if start == 0 and line.startswith(BOM):
                line = line[3:]
                start = 3
            yield start, line
            cur = nl + 1
            line_start = base + cur
        if cur < len(chunk):
            parts.append(chunk[cur:])


def iter_blocks(fd: int, pos: int, size: int, block: int = CHUNK_BYTES) -> Iterator[tuple[int, bytes]]:
    """Yield ``(start, bytes)`` for runs of complete lines from ``pos`` (a line start) up to
    ``size``, each run ending with a newline, in reads of ``block`` bytes cut at their last
    newline (a line longer than a block is assembled from several reads). A BOM is not
    dropped; a torn tail is not yielded. Cost: O(bytes read); memory: about two blocks
    plus the longest line."""
    parts: list[bytes] = []  # bytes after the last newline seen (a line still being read)
    start = pos
    at = pos
    while at < size:
        chunk = _platform.pread(fd, min(block, size - at), at)
        if not chunk:
            return
        at += len(chunk)
        nl = chunk.rfind(b"\n")
        if nl == -1:
            parts.append(chunk)
            continue
        if parts:
            parts.append(chunk)
            chunk = b"".join(parts)
            nl = chunk.rfind(b"\n")
            parts = []
        if nl + 1 < len(chunk):
            parts.append(chunk[nl + 1 :])
            chunk = chunk[: nl + 1]
        yield start, chunk
        start += len(chunk)


def find_line(fd: int, size: int, message_id: str) -> tuple[int, int, bytes] | None:
    """``(start, end, line)`` of the complete line with id ``message_id`` (``end`` just past
    its newline) in the first ``size`` bytes; None when there is none.

    Binary search over byte offsets: ULIDs strictly increase down the file, and a probe
    reads one block at the middle offset, takes the next line start and reads its id
    off the line's prefix; lines whose id cannot be read (corrupt) or is not a ULID (an
    earlier version's) are stepped over. An id that is not a ULID is looked for by
    reading every line (O(size)). In a damaged transcript (a repeated or out-of-order
    line: strict reads refuse it) the search may land on either copy of a repeated id,
    or miss a line that is out of order. The
    last line is looked at first, so the newest id (a common cursor) and ids newer than
    it cost one read. Cost: O(log(size / SCAN_BYTES)) probes of ~PROBE_BYTES (more where
    a probe lands in a long line), then one scan of at most SCAN_BYTES plus a line.
    (Interpolating ULID times instead of halving was measured: ~15% fewer reads on
    sessions written over hours, none on batch-written ones; not worth its complexity.)"""
    if not isinstance(message_id, str):
        return None
    if not is_ulid(message_id):
        return _scan_all(fd, size, message_id)
    lo, hi = 0, size  # the line, if present, starts in [lo, hi)
    if size > SCAN_BYTES:
        tail = read_tail(fd, size)
        if tail.last_line is not None:
            try:
                last: str | None = codec.id_of_line(tail.last_line)
            except ValueError:
                last = None
            if is_ulid(last):
                assert last is not None
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
            if is_ulid(found):
                break
            found = None
            start, head = _first_line_start(fd, start + 1, hi)  # step over a corrupt line, or a foreign id
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
    return _scan(fd, lo, hi, size, message_id)


def _scan(fd: int, lo: int, hi: int, size: int, message_id: str) -> tuple[int, int, bytes] | None:
    """The final scan of :func:`find_line` over the lines starting in ``[lo, hi)``."""
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
        if found > message_id and is_ulid(found):
            return None
    return None


def _scan_all(fd: int, size: int, message_id: str) -> tuple[int, int, bytes] | None:
    """:func:`find_line` of an id that is not a ULID (only an earlier version or another
    tool wrote those: they are not in order), by reading every line: the first with that
    id. O(size)."""
    for start, line in iter_lines_forward(fd, 0, size):
        try:
            if codec.id_of_line(line) == message_id:
                return start, start + len(line) + 1, line
        except ValueError:
            continue
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
    if not buf.startswith(codec.ID_PREFIX):
        return False  # (also a BOM at the file start)
    marker = b"\n" + codec.ID_PREFIX
    if buf.count(marker, 0, region + len(marker) - 2) != buf.count(b"\n", 0, region - 1):
        return False
    try:
        needle = codec.ID_PREFIX + message_id.encode("utf-8") + b'"'
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


def copy_chunks(fd: int, end: int) -> Iterator[bytes]:
    """The file's bytes ``0..end`` in 1 MiB reads (OSError if it is shorter)."""
    pos = 0
    while pos < end:
        chunk = _platform.pread(fd, min(CHUNK_BYTES, end - pos), pos)
        if not chunk:
            raise OSError(f"transcript ended at byte {pos} while copying {end} bytes")
        yield chunk
        pos += len(chunk)


def line_starting_at(fd: int, start: int, size: int) -> bytes | None:
    """The complete line that starts at offset ``start`` (without its newline) in the first
    ``size`` bytes; None when no line starts there (mid-line, past the end, a torn tail).
    Cost: O(the line)."""
    if not 0 <= start < size:
        return None
    if start > 0 and not starts_file(fd, start) and _platform.pread(fd, 1, start - 1) != b"\n":
        return None
    line = _line_at(fd, start, _platform.pread(fd, min(PROBE_BYTES, size - start), start), size)
    if line is not None and start == 0 and line.startswith(BOM):
        return None  # the first line starts after the mark
    return line


def starts_file(fd: int, start: int) -> bool:
    """Whether the line at ``start`` is the transcript's first line (a BOM may precede it)."""
    return start == 0 or (start == 3 and _platform.pread(fd, 3, 0) == BOM)
