"""Pages of a session's messages for scrolling (:meth:`jsonl_sessions.SessionStore.page`).

A page is read backwards from the end (or from a cursor found by binary search,
:func:`jsonl_sessions.lines.find_line`) or forwards after a cursor; only the page's lines
(and one more, for ``has_more``) are parsed. The usual backward page without a filter is
found by counting newlines and parsed in one go. Lenient: a corrupt line is skipped with
one logged warning per call (it does not count towards ``limit``). Takes no lock: the
read runs inside :func:`jsonl_sessions.snapshot.with_transcript`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

from . import _platform, codec, snapshot
from .errors import MessageNotFoundError, SessionNotFoundError
from .layout import SessionFiles
from .lines import BOM, find_line, iter_lines_backward, iter_lines_forward, read_tail, skip_backward, starts_file
from .records import calls, decode_or_none, tool_call_id_of
from .rules import check_page_arguments
from .transcript import parse
from .txn import Root
from .types import Page, from_record

log = logging.getLogger("jsonl_sessions")

#: ``whole_turns``: how many lines before a tool result its call is looked for.
TURN_SEARCH_LINES = 1024

_ID_AND_TIME = re.compile(rb'\{"id":"[^"\\\n]*","created_at":(-?[0-9]+)[,}]')


def backward(fd: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(start, line)`` for the complete lines before ``end``, newest first."""
    for start, line, _committed in iter_lines_backward(fd, end):
        yield start, line


def _created_of(line: bytes) -> int | None:
    """A line's created_at, read off its prefix when it is ours (ValueError: corrupt)."""
    m = _ID_AND_TIME.match(line)
    if m is not None:
        return int(m.group(1))
    created = codec.decode_record(line).get("created_at")
    return created if type(created) is int else None


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
    for n, (_start, line) in enumerate(backward(fd, start)):
        if n >= TURN_SEARCH_LINES:
            return False
        if b"tool_calls" in line:
            record = decode_or_none(line)
            if record is not None and calls(record, tool_call_id):
                return True
    return False


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
    reading = _Reading(ts_before)

    def read(fd: int, size: int) -> Page:
        reading.bad.clear()
        if after is None:
            return _page_backward(files, fd, size, limit, before, reading, breakpoint, whole_turns)
        return _page_forward(files, fd, size, limit, after, reading, breakpoint, whole_turns)

    got = snapshot.with_transcript(root, files, read)
    if got is None:
        raise SessionNotFoundError(key=files.key)
    reading.warn(files.key, files.transcript)
    return got


def _page_backward(files: SessionFiles, fd: int, size: int, limit: int, before: str | None,
                   reading: _Reading, breakpoint: bool, whole_turns: bool) -> Page:
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
        page = _page_back_in_bulk(files, fd, size if before is None else end, limit, newer, breakpoint,
                                       whole_turns)
        if page is not None:
            return page
    lines = _Lines(backward(fd, end))
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
        _widen_back(picked, lines, reading)
    has_more = any(reading.accept(start, line) is not None for start, line in lines)
    newer = newer or picked[0][0] != newest_line
    picked.reverse()
    return Page([from_record(r) for _, r in picked], has_more, picked[0][1]["id"] if has_more else None,
                picked[-1][1]["id"] if newer else None)

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

def _widen_back(picked: list[tuple[int, dict[str, Any]]], lines: _Lines, reading: _Reading) -> None:
    """Widen a page (``picked``, newest first) back to the call of the tool result it
    begins with, while it begins with one whose call is among the lines before it."""
    while True:
        tool_call_id = tool_call_id_of(picked[-1][1])
        if tool_call_id is None:
            return
        scanned: list[tuple[int, bytes]] = []
        call = None
        for start, line in lines:
            scanned.append((start, line))
            if b"tool_calls" in line:
                record = decode_or_none(line)
                if record is not None and calls(record, tool_call_id):
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

def _page_forward(files: SessionFiles, fd: int, size: int, limit: int, after: str,
                  reading: _Reading, breakpoint: bool, whole_turns: bool) -> Page:
    if after == "":
        pos = 0
    else:
        found = find_line(fd, size, after)
        if found is None:
            raise MessageNotFoundError(key=files.key, message_id=after)
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
        _extend_forward(fd, picked, lines, reading)
    has_more = any(reading.accept(start, line) is not None for start, line in lines)
    older = not starts_file(fd, picked[0][0])
    return Page([from_record(r) for _, r in picked], has_more, picked[0][1]["id"] if older else None,
                picked[-1][1]["id"] if has_more else None)

def _extend_forward(fd: int, picked: list[tuple[int, dict[str, Any]]], lines: _Lines,
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
        tool_call_id = tool_call_id_of(record)
        if tool_call_id is None or not _call_before(fd, start, tool_call_id):
            lines.push_back(skipped)
            return
        picked.append((start, record))

