"""Parsing transcript bytes into messages, strict or lenient (byte-level line work is in
:mod:`jsonl_sessions.jsonl.lines`).

Rules (see docs/format.md):

- a line ends with ``\\n``; a final fragment without one is a *torn tail*, an
  uncommitted write: it is ignored here and removed by the next mutation;
- every complete line must decode to a message record; one that does not is
  *corruption*, reported with its 1-based line number and byte offset;
- a UTF-8 byte-order mark at offset 0 is tolerated (editors add it) and skipped;
- an empty file is a session with no messages;
- a strict read also refuses a line that repeats an earlier line's id, or whose ULID does
  not sort after the previous ULID (:func:`jsonl_sessions.ids.first_disorder`: a copied
  or out-of-order line); a lenient read keeps every such line, in file order.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import operator
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from io import BytesIO
from itertools import islice
from typing import Any

from ..codec import JSONDecodeError, all_complete, decode_record, loads
from ..corruption import BOM, BadLine
from ..ids import first_disorder
from ..types import ChatMessage, from_record
from .lines import CHUNK_BYTES, iter_blocks, iter_lines_forward

log = logging.getLogger("jsonl_sessions")



@dataclass(frozen=True, slots=True)
class Parsed:
    messages: list[ChatMessage]
    bad: list[BadLine]
    committed: int  # bytes up to and including the last newline
    torn: int  # bytes of torn tail after it


def parse(data: bytes, *, strict: bool, key: str | None = None, path: str | None = None) -> Parsed:
    """Every message in ``data``, oldest first. Cost: O(len(data)).

    ``strict``: the first corrupt line raises :class:`CorruptTranscriptError`, and so
    does the first line that repeats an id or holds a ULID out of order
    (:func:`jsonl_sessions.ids.first_disorder`; one pass of comparisons when the ids
    increase); otherwise corrupt lines are skipped and listed in ``Parsed.bad``, and
    every other line is returned, in file order.
    """
    committed = data.rfind(b"\n") + 1
    torn = len(data) - committed
    if committed == 0:
        return Parsed([], [], committed, torn)
    parsed = None
    if not data.startswith(BOM):
        body = BytesIO(data[:committed] if torn else data)
        with _gc_paused(committed):
            records = _fast_records(body)
            if records is not None:
                parsed = Parsed(list(map(from_record, records)), [], committed, torn)
    if parsed is None:
        messages: list[ChatMessage] = []
        bad: list[BadLine] = []
        _parse_block(data[:committed] if torn else data, 0, 1, messages, bad, strict=strict, key=key, path=path)
        parsed = Parsed(messages, bad, committed, torn)
    if strict:
        _check_order([m.id for m in parsed.messages], lambda index: _line_start(data, index), key, path)
    return parsed


def _line_start(data: bytes, index: int) -> int:
    """The offset of line ``index`` (0-based) of transcript bytes ``data``. O(offset)."""
    at = 3 if data.startswith(BOM) else 0
    for _ in range(index):
        at = data.index(b"\n", at) + 1
    return at


def _check_order(ids: list[str], start_of: Callable[[int], int], key: str | None, path: str | None) -> None:
    """Raise :class:`CorruptTranscriptError` (line and offset: ``start_of(index)``) at the
    first line whose id (``ids``: one a line) breaks the id rules
    (:func:`jsonl_sessions.ids.first_disorder`). Every line is a message here (a strict
    read raised at any other)."""
    found = first_disorder(ids)
    if found is not None:
        index, reason = found
        raise BadLine(index + 1, start_of(index), reason).error(key, path)


def parse_file(fd: int, size: int, *, strict: bool, key: str | None = None, path: str | None = None,
               block: int = CHUNK_BYTES) -> Parsed:
    """Every message in the first ``size`` bytes of the open file ``fd``, oldest first, by
    the same rules and with the same errors as :func:`parse`, streamed: read in ``block``
    (1 MiB) reads (``_platform.pread``), each cut at its last newline and decoded before the next
    is read, so the bytes held at once are a block plus the longest line, not the file.
    Peak memory is the messages returned plus that. Cost: O(size)."""
    messages: list[ChatMessage] = []
    bad: list[BadLine] = []
    number = 1  # line number of the next block's first line
    committed = 0
    with _gc_paused(size):
        for start, chunk in iter_blocks(fd, 0, size, block):
            number = _parse_block(chunk, start, number, messages, bad, strict=strict, key=key, path=path)
            committed = start + len(chunk)
    if strict:
        _check_order([m.id for m in messages], lambda index: _line_at(fd, size, index), key, path)
    return Parsed(messages, bad, committed, size - committed)


def _line_at(fd: int, size: int, index: int) -> int:
    """The offset of line ``index`` (0-based) of the open transcript ``fd``. O(offset)."""
    return next(islice(iter_lines_forward(fd, 0, size), index, None))[0]


def check_file(fd: int, size: int, *, key: str | None = None, path: str | None = None,
               block: int | None = None) -> int:
    """Raise what :func:`parse_file` with ``strict`` raises, at the same line, keeping no
    message: each ``block`` (default :data:`~jsonl_sessions.jsonl.lines.CHUNK_BYTES`) of
    lines is decoded, checked and dropped before the next is read. Returns the number of
    messages when none is corrupt.

    The id rules are checked on the way while the ids strictly increase (then no id can
    repeat: the usual case), by comparing each block's ids and the last id before it;
    where they do not, a second pass keeps every id (strings, not messages) to find the
    line that breaks a rule, or none. Memory: a block of messages (plus every id in that
    second pass). Cost: O(size), twice for a transcript whose ids do not increase."""
    block = block or CHUNK_BYTES
    number, count, last, ordered = 1, 0, "", True
    for start, chunk in iter_blocks(fd, 0, size, block):
        messages: list[ChatMessage] = []
        number = _parse_block(chunk, start, number, messages, [], strict=True, key=key, path=path)
        count += len(messages)
        if ordered and messages:
            ids = [m.id for m in messages]
            ordered = last < ids[0] and all(map(operator.lt, ids, islice(ids, 1, None)))
            last = ids[-1]
    if not ordered:
        ids = []
        number = 1
        for start, chunk in iter_blocks(fd, 0, size, block):
            messages = []
            number = _parse_block(chunk, start, number, messages, [], strict=True, key=key, path=path)
            ids.extend(m.id for m in messages)
        _check_order(ids, lambda index: _line_at(fd, size, index), key, path)
    return count


def _parse_block(block: bytes, base: int, number: int, messages: list[ChatMessage], bad: list[BadLine], *,
                 strict: bool, key: str | None, path: str | None) -> int:
    """Append the messages of ``block`` (whole lines, each ending with a newline, starting at
    file offset ``base`` with line ``number``) to ``messages``, corrupt lines to ``bad`` (or
    raise when ``strict``); the line number after the block."""
    if base == 0 and block.startswith(BOM):
        block = block[3:]
        base = 3
    lines = block.split(b"\n")
    lines.pop()  # the empty piece after the block's final newline
    records = _fast_records(lines)
    if records is not None:
        messages.extend(map(from_record, records))
        return number + len(lines)
    offset = base
    for line in lines:
        try:
            messages.append(from_record(decode_record(line)))
        except (JSONDecodeError, ValueError) as exc:
            corrupt = BadLine.of(number, offset, exc)
            if strict:
                raise corrupt.error(key, path) from None
            bad.append(corrupt)
        offset += len(line) + 1
        number += 1
    return number


def _fast_records(lines: Iterable[bytes]) -> list[dict[str, Any]] | None:
    """Decode and validate all lines with C-level loops; None when any needs a closer look."""
    try:
        records = list(map(loads, lines))
    except JSONDecodeError:
        return None
    return records if all_complete(records) else None


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
