"""The commands that read a store and print messages: ``ls``, ``show``, ``search`` (with the
matching snippet of each hit) and ``tail`` (``--follow`` polls the session and prints what
is appended). None of them writes to the store.

Each ``cmd_*`` takes the parsed arguments and returns the exit status; failures are
raised (see :mod:`jsonl_sessions.cli.output`).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import orjson

from .. import records
from ..errors import InvalidArgumentError, MessageNotFoundError, SessionNotFoundError, SessionStoreError
from ..jsonl.control import read_head
from ..jsonl.layout import FileState, SessionFiles
from ..jsonl.store import SessionStore
from ..listing import Sort
from ..location import resolve_root
from ..protocol import SessionBackend
from ..types import ChatMessage, SessionMetadata, SessionQuery
from .output import (
    EXIT_FAILURE,
    EXIT_OK,
    Printer,
    UsageError,
    clean,
    err,
    json_out,
    metadata_json,
    out,
    sessions_out,
)
from .stores import open_store

# -- ls, show, search -----------------------------------------------------------------------
#: ``ls --sort``: the store's sorts, and the older names, which list the largest or newest
#: first (``size`` is sorted here: the store has no such order).
SORTS: dict[str, tuple[Sort | Literal["size"], bool]] = {
    "key": ("key", False),
    "name": ("name", False),
    "updated_at": ("updated_at", False),
    "created_at": ("created_at", False),
    "message_count": ("message_count", False),
    "activity": ("updated_at", True),
    "created": ("created_at", True),
    "messages": ("message_count", True),
    "size": ("size", True),
}


def cmd_ls(args: argparse.Namespace) -> int:
    store = open_store(args)
    sort, descending = SORTS[args.sort]
    descending = (descending or args.desc) != args.reverse
    filters: dict[str, Any] = {"agent_alias": args.alias, "name_prefix": args.name_prefix,
                               "updated_since": args.updated_since,
                               "state": None if args.state == "none" else args.state}
    if sort == "size" or args.state == "none":  # not an order or filter of the store: done here
        if args.cursor is not None:
            raise UsageError("--cursor does not work with --sort size or --state none")
        sessions: list[SessionMetadata] = store.list_sessions_with_metadata(
            sort="key" if sort == "size" else sort, descending=descending, **filters)
        if args.state == "none":
            sessions = [md for md in sessions if md.state is None]
        if sort == "size":
            sessions.sort(key=lambda md: (md.size_bytes, md.key), reverse=descending)
        end = None if args.limit is None else args.offset + args.limit
        listed, cursor = sessions[args.offset:end], None
    else:
        try:
            listed = store.list_sessions_with_metadata(sort=sort, descending=descending, limit=args.limit,
                                                       offset=args.offset, cursor=args.cursor, **filters)
        except InvalidArgumentError as exc:
            raise UsageError(str(exc)) from None
        cursor = listed.cursor
    if args.json and args.limit is not None:
        json_out({"sessions": [metadata_json(md) for md in listed], "cursor": cursor})
    else:
        sessions_out(args, listed, f"no sessions in {resolve_root(args.root)}")
    if cursor is not None and not args.json:
        err(f"more sessions: add --cursor {cursor} for the next page")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    store = open_store(args)
    printer = Printer(args.jsonl, args.width)
    if args.limit is not None:
        page = store.page(args.key, limit=args.limit, before=args.before, after=args.after)
        printer(page.messages)
        edge = page.before if args.after is None else page.after
        if page.has_more and edge is not None:
            err(f"{'older' if args.after is None else 'newer'} messages remain: add "
                f"--{'before' if args.after is None else 'after'} {edge} for the next page")
        return EXIT_OK
    if args.before is not None:
        # Backwards from the cursor a page at a time (page cursors name a line even where
        # ids are not in order), printed oldest first.
        pages: list[list[ChatMessage]] = []
        cursor: str | None = args.before
        while cursor is not None:
            page = store.page(args.key, limit=PAGE, before=cursor)
            pages.append(page.messages)
            cursor = page.before if page.has_more else None
        for batch in reversed(pages):
            printer(batch)
    else:
        printer(_messages(store, args.key, args.after or "", missing_ok=False))
    if not printer.count:
        err(f"no messages in session {args.key!r}" + (" in that range" if args.before or args.after else ""))
    return EXIT_OK


def _messages(store: SessionBackend, key: str, after: str = "", *, missing_ok: bool = True) -> Iterator[ChatMessage]:
    """The session's messages after page cursor ``after`` ("": all), oldest first, a page
    at a time (memory bounded by a page); nothing when the session is gone (``missing_ok``,
    else its error)."""
    cursor: str | None = after
    try:
        while cursor is not None:
            page = store.page(key, limit=PAGE, after=cursor)
            yield from page.messages
            cursor = page.after if page.has_more else None
    except (SessionNotFoundError, MessageNotFoundError):  # removed (or rewritten) since the search listed it
        if not missing_ok:
            raise
        return


def _find(text: str, needle: str) -> tuple[int, int] | None:
    """Where casefolded ``needle`` first occurs in ``text`` compared casefolded, as a
    ``(start, end)`` slice of ``text`` itself (casefolding may change lengths: ``ß`` is
    ``ss``); None when it does not."""
    folded = [c.casefold() for c in text]
    at = "".join(folded).find(needle)
    if at < 0:
        return None
    ends = list(itertools.accumulate(len(f) for f in folded))  # ends[i]: folded length of text[: i + 1]
    start = bisect.bisect_right(ends, at)
    end = bisect.bisect_left(ends, at + max(len(needle), 1)) + 1 if needle else start
    return start, min(end, len(text))


#: Characters of context kept on each side of a match in a ``search`` line.
CONTEXT = 40


def _snippet(text: str, start: int, end: int, mark: tuple[str, str]) -> str:
    """One line: the match, marked, with up to :data:`CONTEXT` characters either side."""
    if start == end:  # an empty keyword matches everywhere: nothing to mark
        mark = ("", "")
    left = max(0, start - CONTEXT)
    right = min(len(text), end + CONTEXT)
    return ("..." if left else "") + clean(text[left:start], one_line=True) + mark[0] + \
        clean(text[start:end], one_line=True) + mark[1] + clean(text[end:right], one_line=True) + \
        ("..." if right < len(text) else "")


def _hits(store: SessionBackend, md: SessionMetadata, needle: str) -> Iterator[dict[str, Any]]:
    """The session's matches: its name, then each message whose text contains ``needle``
    (casefolded, as the store's search compares), as ``search --json`` prints them."""
    if md.name is not None and (where := _find(md.name, needle)) is not None:
        yield {"key": md.key, "field": "name", "id": None, "role": None, "text": md.name,
               "start": where[0], "end": where[1]}
    for m in _messages(store, md.key):
        for text in records.texts(m.content):
            if needle in text.casefold() and (where := _find(text, needle)) is not None:
                yield {"key": md.key, "field": "message", "id": m.id, "role": m.role, "text": text,
                       "start": where[0], "end": where[1]}
                break


def cmd_search(args: argparse.Namespace) -> int:
    store = open_store(args)
    found = store.search(SessionQuery(args.keyword, limit=args.limit or None, agent_alias=args.alias))
    if args.sessions or args.nl:
        sessions_out(args, found, f"no session matches {args.keyword!r}")
        return EXIT_OK if found else EXIT_FAILURE
    needle = args.keyword.casefold()
    mark = ("\x1b[1;31m", "\x1b[0m") if sys.stdout.isatty() else ("**", "**")
    count = 0
    for md in found:
        for hit in _hits(store, md, needle):
            count += 1
            if args.json:
                sys.stdout.write(orjson.dumps(hit, option=orjson.OPT_APPEND_NEWLINE).decode("utf-8"))
            else:
                where = f"{hit['id'] or '-'}  {hit['role']}" if hit["field"] == "message" else "-  name"
                out(f"{clean(md.key, one_line=True)}  {clean(where, one_line=True)}  "
                    f"{_snippet(hit['text'], hit['start'], hit['end'], mark)}")
        sys.stdout.flush()  # a session's lines as soon as they are found
    if not count:
        err(f"no message matches {args.keyword!r}")
        return EXIT_FAILURE
    return EXIT_OK


# -- tail -----------------------------------------------------------------------------------
PAGE = 500  # messages per read when catching up
_REANCHOR = 1000  # newest messages searched for new ones after a follow cursor vanished


def cmd_tail(args: argparse.Namespace) -> int:
    """Print the newest ``args.n`` messages; with ``args.follow``, follow until Ctrl-C
    (KeyboardInterrupt, which :func:`jsonl_sessions.cli.main` turns into exit status 130)."""
    store = open_store(args)
    printer = Printer(args.jsonl, args.width, flush=args.follow)
    probe = _probe(store, args.key)
    seen = probe()  # taken before the read: a change right after it is caught by the first poll
    page = store.page(args.key, limit=args.n)
    printer(page.messages)
    if args.follow:
        _follow(store, args.key, page.messages[-1].id if page.messages else None, seen, probe, printer,
                args.interval)
    return EXIT_OK


def _probe(store: SessionBackend, key: str) -> Callable[[], Signature]:
    """How to tell that the session changed: file stats and the control counter of a JSONL
    session; for any other backend, the count, size and last-activity time of its metadata."""
    if isinstance(store, SessionStore):
        files = SessionFiles.of(store.root, key)
        return lambda: _signature(files.transcript, files.lock)

    def row() -> Signature:
        md = store.get_session_metadata(key)
        return None if md is None else (md.message_count, md.size_bytes, int(md.updated_at.timestamp() * 1e6)
                                        if md.updated_at else 0, 0)
    return row


Signature = tuple[object, ...] | None  # compared for equality only


def _signature(transcript: str, lock: str) -> Signature:
    """What changes when the session does: the transcript's file state (which file, its size
    and mtime), and the control file's sequence counter (bumped by in-place rewrites). None:
    no transcript."""
    try:
        st = os.lstat(transcript)
    except FileNotFoundError:
        return None
    try:
        seq = read_head(lock).seq
    except (OSError, SessionStoreError):
        seq = -1
    return FileState.of(st), seq


def _follow(store: SessionBackend, key: str, last: str | None, seen: Signature, probe: Callable[[], Signature],
            printer: Printer, interval: float) -> None:
    """Print messages as they are appended, like ``tail -f``, until interrupted. Polls the
    session's signature (``probe``) every ``interval`` seconds and, when
    they differ from ``seen``, reads the page after the last printed id (lock-free). A
    cursor that vanished (truncate, revert, rewrite) is re-anchored: of the newest
    messages, those with an id above it are new. A removed session is waited for; when it
    comes back it is printed from its start."""
    gone = False
    while True:
        time.sleep(interval)
        now = probe()
        if now == seen:
            continue
        seen = now
        if now is None:
            if not gone:
                err(f"session {key!r} was removed; waiting for it to come back")
            gone = True
            continue
        if gone:
            err(f"session {key!r} is back")
            gone, last = False, None
        last = _catch_up(store, key, last, printer)


def _catch_up(store: SessionBackend, key: str, last: str | None, printer: Printer) -> str | None:
    while True:
        try:
            page = store.page(key, limit=PAGE, after=last or "")
        except SessionNotFoundError:
            return last
        except MessageNotFoundError:
            page = store.page(key, limit=_REANCHOR)
            err(f"session {key!r} was truncated or rewritten; following it from there")
            printer([m for m in page.messages if last is None or m.id > last])
            return page.messages[-1].id if page.messages else None
        printer(page.messages)
        if page.messages:
            last = page.messages[-1].id
        if not page.has_more:
            return last
