"""Pages of a session's messages for scrolling (:meth:`jsonl_sessions.SessionStore.page`).

A page is read backwards from the end (or from a cursor found by binary search,
:func:`jsonl_sessions.jsonl.lines.find_line`) or forwards after a cursor; only the page's lines
(and one more, for ``has_more``) are parsed. The usual backward page without a filter is
found by counting newlines and parsed in one go. Lenient: a corrupt line is skipped with
one logged warning per call (it does not count towards ``limit``). Takes no lock: the
read runs inside :func:`jsonl_sessions.jsonl.reads.with_transcript`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from .. import _platform
from ..arguments import check_page_arguments
from ..errors import MessageNotFoundError, SessionNotFoundError
from ..pagination import TURN_SEARCH_LINES, Lines, Reading, page_back, page_forward
from ..records import calls, decode_or_none
from ..types import Page
from . import reads as snapshot
from .layout import SessionFiles
from .lines import BOM, find_line, iter_lines_backward, iter_lines_forward, read_tail, skip_backward, starts_file
from .transcript import parse
from .txn import Root

log = logging.getLogger("jsonl_sessions")


def backward(fd: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(start, line)`` for the complete lines before ``end``, newest first."""
    for start, line, _committed in iter_lines_backward(fd, end):
        yield start, line


def _call_before(fd: int, start: int, tool_call_id: str) -> bool:
    """Whether the call of ``tool_call_id`` is among the TURN_SEARCH_LINES lines before ``start``."""
    for n, (_start, line) in enumerate(backward(fd, start)):
        if n >= TURN_SEARCH_LINES:
            return False
        if b"tool_calls" in line:
            record = decode_or_none(line)
            if record is not None and calls(record, tool_call_id):
                return True
    return False


def _warn(reading: Reading, key: str, path: str) -> None:
    if reading.bad:
        first = min(reading.bad)
        log.warning("skipped %d corrupt line(s) in %s (session %r); first at byte offset %d: %s",
                    len(reading.bad), path, key, first, reading.bad[first])


# -- pages ------------------------------------------------------------------------------
def page(
    root: Root,
    files: SessionFiles,
    *,
    limit: int = 100,
    before: str | None = None,
    after: str | None = None,
    ts_before: int | None = None,
    breakpoint: bool = False,
    whole_turns: bool = False,
) -> Page:
    """One page of messages (the contract: :meth:`jsonl_sessions.SessionStore.page`)."""
    check_page_arguments(limit, before, after, ts_before)
    reading = Reading(ts_before)

    def read(fd: int, size: int) -> Page:
        reading.bad.clear()
        if after is None:
            return _page_backward(files, fd, size, limit, before, reading, breakpoint, whole_turns)
        return _page_forward(files, fd, size, limit, after, reading, breakpoint, whole_turns)

    got = snapshot.with_transcript(root, files, read)
    if got is None:
        raise SessionNotFoundError(key=files.key)
    _warn(reading, files.key, files.transcript)
    return got


def _page_backward(files: SessionFiles, fd: int, size: int, limit: int, before: str | None,
                   reading: Reading, breakpoint: bool, whole_turns: bool) -> Page:
    if before is None:
        end = size
        newer = False
    else:
        found = find_line(fd, size, before)
        if found is None:
            raise MessageNotFoundError(key=files.key, message_id=before)
        end = found[0]
        newer = True
    if reading.ts_before is None:
        bulk = _page_back_in_bulk(files, fd, end, limit, newer, breakpoint, whole_turns)
        if bulk is not None:
            return bulk
    return page_back(Lines(backward(fd, end)), reading, limit, breakpoint, whole_turns, newer)


def _page_back_in_bulk(files: SessionFiles, fd: int, end: int, limit: int, newer: bool, breakpoint: bool,
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
    parsed = parse(data, strict=False, key=files.key, path=files.transcript)
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


def _page_forward(files: SessionFiles, fd: int, size: int, limit: int, after: str,
                  reading: Reading, breakpoint: bool, whole_turns: bool) -> Page:
    if after == "":
        pos = 0
    else:
        found = find_line(fd, size, after)
        if found is None:
            raise MessageNotFoundError(key=files.key, message_id=after)
        pos = found[1]
    return page_forward(Lines(iter_lines_forward(fd, pos, size)), reading, limit, breakpoint, whole_turns,
                        lambda start, tool_call_id: _call_before(fd, start, tool_call_id),
                        lambda start: starts_file(fd, start))
