"""Parsing transcript bytes into messages, strict or lenient (byte-level line work is in
:mod:`jsonl_sessions.jsonl.lines`).

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
from typing import Any

from ..codec import JSONDecodeError, all_complete, decode_record, loads
from ..errors import CorruptTranscriptError
from ..types import ChatMessage, from_record
from .lines import BOM, CHUNK_BYTES, iter_blocks

log = logging.getLogger("jsonl_sessions")



#: Why a line that starts with a byte-order mark anywhere but at offset 0 is corrupt.
BOM_INSIDE = "a byte-order mark inside the file"


@dataclass(frozen=True, slots=True)
class BadLine:
    """A corrupt line: a complete line (it ends with a newline) that does not decode to a
    message record. Its 1-based ``line`` number and byte ``offset`` in the transcript, and
    why (``reason``). The one description of corruption in the JSONL backend: lenient
    reads list these (logged by :func:`warn_bad`), strict ones raise :meth:`error`, and
    compaction drops them (:func:`jsonl_sessions.compaction.plan_lines`)."""

    line: int
    offset: int
    reason: str

    @classmethod
    def of(cls, line: int, offset: int, exc: BaseException) -> BadLine:
        """The corrupt line at ``line`` / ``offset`` whose decoding raised ``exc``."""
        return cls(line, offset, str(exc) or type(exc).__name__)

    def error(self, key: str | None, path: str | None) -> CorruptTranscriptError:
        """The error a strict read raises for this line of session ``key``'s transcript ``path``."""
        return CorruptTranscriptError(key=key, path=path, line=self.line, offset=self.offset, reason=self.reason)


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
                return Parsed(list(map(from_record, records)), [], committed, torn)
    return _parse_slowly(data, committed, torn, strict=strict, key=key, path=path)


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
    return Parsed(messages, bad, committed, size - committed)


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
            messages.append(from_record(decode_record(line)))
        except (JSONDecodeError, ValueError) as exc:
            corrupt = BadLine.of(number, offset, exc)
            if strict:
                raise corrupt.error(key, path) from None
            bad.append(corrupt)
        offset += len(line) + 1
    return Parsed(messages, bad, committed, torn)


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
