"""The rules of a page, on a stream of lines: what every backend's ``page`` does once it
has found where to start reading.

A backend hands in its lines as ``(position, line)`` pairs (a byte offset in a JSONL
transcript, a row number in SQLite), newest first for a backward page or oldest first
for a forward one. Here they are filtered (``ts_before``; a line that does not parse is
skipped and remembered for the backend's warning), cut at a compaction marker
(``breakpoint``) and widened over a tool call and its results (``whole_turns``): the
semantics of :meth:`jsonl_sessions.SessionStore.page`. Only the lines a page needs (and
one more, for ``has_more``) are decoded. Nothing here does I/O beyond pulling the lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from . import codec
from .records import calls, decode_or_none, tool_call_id_of
from .types import Page, from_record

#: ``whole_turns``: how many lines before a tool result its call is looked for.
TURN_SEARCH_LINES = 1024

Item = tuple[int, bytes]  # (position, line)
Picked = list[tuple[int, dict[str, Any]]]  # (position, record)

_ID_AND_TIME = re.compile(rb'\{"id":"[^"\\\n]*","created_at":(-?[0-9]+)[,}]')


def created_of(line: bytes) -> int | None:
    """A line's created_at, read off its prefix when the store wrote it, else parsed
    (ValueError: the line does not parse)."""
    m = _ID_AND_TIME.match(line)
    if m is not None:
        return int(m.group(1))
    created = codec.decode_record(line).get("created_at")
    return created if type(created) is int else None


class Lines:
    """An iterator of ``(position, line)`` that items can be pushed back onto."""

    __slots__ = ("_it", "_pending")

    def __init__(self, it: Iterator[Item]) -> None:
        self._it = it
        self._pending: list[Item] = []

    def __iter__(self) -> Lines:
        return self

    def __next__(self) -> Item:
        if self._pending:
            return self._pending.pop()
        return next(self._it)

    def push_back(self, items: list[Item]) -> None:
        """Make ``items`` (in the order they were read) the next ones again."""
        self._pending.extend(reversed(items))


class Reading:
    """The filter of one page read, and the lines met that do not parse (position -> reason)."""

    __slots__ = ("bad", "ts_before")

    def __init__(self, ts_before: int | None) -> None:
        self.ts_before = ts_before
        self.bad: dict[int, str] = {}

    def accept(self, position: int, line: bytes) -> dict[str, Any] | None:
        """The line's record if it is a message passing the filter, else None."""
        try:
            if self.ts_before is not None:
                created = created_of(line)
                if created is None or created >= self.ts_before:
                    return None
            return codec.decode_record(line)
        except ValueError as exc:
            self.bad.setdefault(position, str(exc) or type(exc).__name__)
            return None

    def any_left(self, lines: Lines) -> bool:
        """Whether a message passing the filter is among the rest of ``lines`` (``has_more``)."""
        return any(self.accept(position, line) is not None for position, line in lines)


def walk_back(lines: Lines, reading: Reading, limit: int, breakpoint: bool, whole_turns: bool) -> tuple[Picked, int | None]:
    """The messages of a backward page, newest first, and the position of the first line
    read (None: there was none). Stops after ``limit`` messages or, with ``breakpoint``,
    at a compaction marker; ``whole_turns`` then widens it back to the tool call of the
    tool result it begins with."""
    picked: Picked = []
    newest: int | None = None
    for position, line in lines:
        if newest is None:
            newest = position
        record = reading.accept(position, line)
        if record is None:
            continue
        picked.append((position, record))
        if len(picked) >= limit or (breakpoint and record.get("kind") == "compaction"):
            break
    if picked and whole_turns:
        _widen_back(picked, lines, reading)
    return picked, newest


def _widen_back(picked: Picked, lines: Lines, reading: Reading) -> None:
    """Widen a page (``picked``, newest first) back to the call of the tool result it
    begins with, while it begins with one whose call is among the lines before it."""
    while True:
        tool_call_id = tool_call_id_of(picked[-1][1])
        if tool_call_id is None:
            return
        scanned: list[Item] = []
        call = None
        for position, line in lines:
            scanned.append((position, line))
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
        for position, line in scanned[:-1]:
            record = reading.accept(position, line)
            if record is not None:
                picked.append((position, record))
        picked.append((scanned[-1][0], call))  # the call itself, even if the filter would skip it


def walk_forward(lines: Lines, reading: Reading, limit: int, breakpoint: bool, whole_turns: bool,
                 call_before: Callable[[int, str], bool]) -> Picked:
    """The messages of a forward page, oldest first: ``limit`` of them, cut to start at the
    last compaction marker (``breakpoint``), extended (``whole_turns``) while the next
    message is a tool result whose call ``call_before(position, tool_call_id)`` finds
    among the :data:`TURN_SEARCH_LINES` lines before it."""
    picked: Picked = []
    for position, line in lines:
        record = reading.accept(position, line)
        if record is not None:
            picked.append((position, record))
            if len(picked) >= limit:
                break
    if picked and breakpoint:
        for i in range(len(picked) - 1, -1, -1):
            if picked[i][1].get("kind") == "compaction":
                del picked[:i]
                break
    if picked and whole_turns:
        _extend_forward(picked, lines, reading, call_before)
    return picked


def _extend_forward(picked: Picked, lines: Lines, reading: Reading, call_before: Callable[[int, str], bool]) -> None:
    while True:
        skipped: list[Item] = []
        for position, line in lines:
            skipped.append((position, line))
            record = reading.accept(position, line)
            if record is not None:
                break
        else:
            return
        tool_call_id = tool_call_id_of(record)
        if tool_call_id is None or not call_before(position, tool_call_id):
            lines.push_back(skipped)
            return
        picked.append((position, record))


#: ``cursor(position, message_id)``: the cursor that names the line at ``position``
#: (see :func:`make_page`).
Cursor = Callable[[int, str], str]


def _id_cursor(_position: int, message_id: str) -> str:
    return message_id


def page_back(lines: Lines, reading: Reading, limit: int, breakpoint: bool, whole_turns: bool, newer: bool,
              cursor: Cursor = _id_cursor) -> Page:
    """The backward page read from ``lines`` (newest first; :func:`walk_back`); ``newer``:
    there are messages after the first line (a ``before`` cursor was given)."""
    picked, newest = walk_back(lines, reading, limit, breakpoint, whole_turns)
    if not picked:
        return Page([], False, None, None)
    has_more = reading.any_left(lines)
    newer = newer or picked[0][0] != newest
    picked.reverse()
    return make_page(picked, has_more, has_more, newer, cursor)


def page_forward(lines: Lines, reading: Reading, limit: int, breakpoint: bool, whole_turns: bool,
                 call_before: Callable[[int, str], bool], at_start: Callable[[int], bool],
                 cursor: Cursor = _id_cursor) -> Page:
    """The forward page read from ``lines`` (oldest first; :func:`walk_forward`);
    ``at_start(position)`` tells whether a line is the session's first."""
    picked = walk_forward(lines, reading, limit, breakpoint, whole_turns, call_before)
    if not picked:
        return Page([], False, None, None)
    has_more = reading.any_left(lines)
    return make_page(picked, has_more, not at_start(picked[0][0]), has_more, cursor)


def make_page(picked: Picked, has_more: bool, older: bool, newer: bool, cursor: Cursor = _id_cursor) -> Page:
    """The page of ``picked`` (oldest first), with the cursor of an end only when there is
    more beyond it: ``before`` the oldest when ``older``, ``after`` the newest when ``newer``.
    A cursor is ``cursor(position, id)``: the message's id by default; a backend whose ids
    may not name one line (a damaged transcript) adds what tells the line apart."""
    messages = [from_record(record) for _, record in picked]
    return Page(messages, has_more, cursor(picked[0][0], messages[0].id) if older else None,
                cursor(picked[-1][0], messages[-1].id) if newer else None)


__all__ = ["TURN_SEARCH_LINES", "Cursor", "Lines", "Reading", "created_of", "make_page", "page_back", "page_forward", "walk_back",
           "walk_forward"]
