"""Full-text search over sessions (:meth:`jsonl_sessions.SessionStore.search`).

Transcripts are streamed in 1 MiB blocks of whole lines, newest-activity sessions first,
stopping once ``limit`` sessions matched. In each block, byte searches leave only the
lines that may hold the keyword (:class:`jsonl_sessions.records.Prefilter`: in the usual
case, the lines holding it ASCII case-insensitively); of those, a line that is pure ASCII
without JSON escapes and does not contain the keyword is skipped without decoding, and
any other line is decoded and checked exactly. Takes no lock (each read is a consistent snapshot).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from .. import _platform, records
from ..base import search_order, search_results
from ..corruption import BOM
from ..errors import SessionStoreError
from ..finding import Collector, MessageSearch
from ..types import SessionMetadata
from . import control
from .layout import SessionFiles
from .lines import CHUNK_BYTES, iter_blocks
from .metadata import listed, looks
from .txn import Root

log = logging.getLogger("jsonl_sessions")


def search(root: Root, needle: str, limit: int | None, alias: str | None) -> list[SessionMetadata]:
    """The sessions matching the casefolded ``needle`` (a checked query: see
    :func:`jsonl_sessions.arguments.check_query`), newest activity first."""
    prefilter = records.Prefilter(needle)
    ordered = search_order(((look.activity_ns, files.key, look.meta, (files, look)) for files, look in looks(root)),
                           alias)
    return search_results(ordered, needle, limit, lambda item: mentions_in(root, item[0], needle, prefilter),
                          lambda item: listed(root, *item))


def mentions(root: Root, files: SessionFiles, needle: str) -> bool:
    """Whether a message of the session has text containing ``needle`` (casefolded)."""
    prefilter = records.Prefilter(needle)
    return mentions_in(root, files, needle, prefilter)


def block_mentions(block: bytes, needle: str, prefilter: records.Prefilter, end: int | None = None) -> bool:
    """Whether a line of ``block[:end]`` (complete lines, each ending with a newline;
    default: all of ``block``) has text containing ``needle``: only the lines byte
    searches leave as candidates are checked (:class:`~jsonl_sessions.records.Prefilter`),
    each exactly."""
    lines = prefilter.candidates(block, end)
    if lines is None:
        lines = (block if end is None or end == len(block) else block[:end]).split(b"\n")
        lines.pop()  # the empty piece after the final newline
    ascii_needle = prefilter.ascii
    return any(records.mentions(line, needle, ascii_needle) for line in lines)


def mentions_in(root: Root, files: SessionFiles, needle: str, prefilter: records.Prefilter) -> bool:
    """:func:`mentions` with the needle's prefilter already made."""

    def scan(fd: int, size: int) -> bool:
        for start, block, end in line_blocks(fd, size):
            if start == 0 and block.startswith(BOM):
                block, end = block[len(BOM):end], end - len(BOM)
            if block_mentions(block, needle, prefilter, end):
                return True
        return False

    try:
        return bool(control.with_transcript(root, files, scan))
    except (OSError, SessionStoreError) as exc:  # unreadable, or not a regular file: not a match
        log.warning("cannot search session %r: %s", files.key, exc)
        return False


def find_messages(root: Root, search: MessageSearch, collector: Collector) -> None:
    """Offer ``collector`` the lines of every session ``search`` wants that may hold its
    longest term (a :class:`~jsonl_sessions.records.Prefilter` per block; every line when
    the search has no term), each with its 0-based line number in the transcript. Takes no
    lock; an unreadable session is logged and skipped. Memory: one block plus the page."""
    prefilter = records.Prefilter(search.longest) if search.terms else None
    for files, look in looks(root):
        if search.wants_session(files.key, look.meta):
            scan_session(root, files, prefilter, collector)


def scan_session(root: Root, files: SessionFiles, prefilter: records.Prefilter | None, collector: Collector,
                 start: int = 0, first: int = 0) -> None:
    """Offer ``collector`` the candidate lines of one session from byte ``start`` (a line
    start; line number ``first``) to its committed end, read as one consistent state."""
    key = files.key

    def scan(fd: int, size: int) -> Collector:
        part = collector.fork()  # a read retried after an in-place change starts over
        number = first
        for at, block, end in line_blocks(fd, size, first=start):
            begin = len(BOM) if at == 0 and block.startswith(BOM) else 0
            starts = None if prefilter is None else prefilter.line_starts(block, begin, end)
            if starts is None:
                pos = begin
                while pos < end:
                    stop = block.index(b"\n", pos)
                    part.offer(key, number, block[pos:stop], at + pos)
                    number += 1
                    pos = stop + 1
                continue
            pos = begin
            for line_start in starts:
                number += block.count(b"\n", pos, line_start)
                stop = block.index(b"\n", line_start)
                part.offer(key, number, block[line_start:stop], at + line_start)
                number += 1
                pos = stop + 1
            number += block.count(b"\n", pos, end)
        return part

    try:
        found = control.with_transcript(root, files, scan)
    except (OSError, SessionStoreError) as exc:  # unreadable, or not a regular file: skipped
        log.warning("cannot search session %r: %s", key, exc)
        return
    if found is not None:
        collector.merge(found)


def line_blocks(fd: int, size: int, block: int = CHUNK_BYTES, first: int = 0) -> Iterator[tuple[int, bytes, int]]:
    """``(start, data, end)`` for runs of complete lines of the first ``size`` bytes:
    ``data[:end]`` are the lines from offset ``start``, each ending with a newline (a
    torn tail is not yielded). Each read is ``block`` bytes; the part of a line it ends in
    is read again by the next read rather than copied and joined (``data`` is the read
    itself: no copy of a block is made); a line longer than a block is read in blocks
    and joined. No read asks for more than ``block`` bytes; the first starts at ``first``
    (a line start). Cost: O(bytes read) plus the partial lines read twice (one line per read)."""
    at = first
    while at < size:
        n = min(block, size - at)
        data = _platform.pread(fd, n, at)
        end = data.rfind(b"\n") + 1
        if end == 0:
            if len(data) < n or at + n >= size:  # no newline before the end: a torn tail
                return
            # A line longer than a block: read on in blocks and join them (iter_blocks).
            for start, joined in iter_blocks(fd, at, size, block):
                yield start, joined, len(joined)
                at = start + len(joined)
                break
            else:
                return
            continue
        yield at, data, end
        at += end
