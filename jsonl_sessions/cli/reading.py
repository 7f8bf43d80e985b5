"""The commands that read a store and print messages: ``ls``, ``show``, ``search`` (with the
matching snippet of each hit) and ``tail`` (``--follow`` polls the session and prints what
is appended). None of them writes to the store.

Each ``cmd_*`` takes the parsed arguments and returns the exit status; failures are
raised (see :mod:`jsonl_sessions.cli.output`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import orjson

from .. import matcher
from ..display import clean
from ..errors import InvalidArgumentError, MessageNotFoundError, SessionNotFoundError, SessionStoreError
from ..jsonl.control import read_head
from ..jsonl.layout import FileState, SessionFiles
from ..jsonl.store import SessionStore
from ..listing import Sort
from ..location import resolve_root
from ..protocol import SessionBackend
from ..types import ChatMessage, SearchHit, SessionMetadata, SessionQuery
from .output import (
    EXIT_FAILURE,
    EXIT_OK,
    Printer,
    UsageError,
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
    if args.around is not None:
        # the message with --context messages either side (a search hit in its conversation)
        older = store.page(args.key, limit=args.context, before=args.around) if args.context else None
        target = store.get_message(args.key, args.around)
        if target is None:
            raise MessageNotFoundError(key=args.key, message_id=args.around)
        newer = store.page(args.key, limit=args.context, after=args.around) if args.context else None
        printer((older.messages if older else []) + [target] + (newer.messages if newer else []))
        return EXIT_OK
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
        printer(messages_forward(store, args.key, args.after or "", missing_ok=False))
    if not printer.count:
        err(f"no messages in session {args.key!r}" + (" in that range" if args.before or args.after else ""))
    return EXIT_OK


def messages_forward(store: SessionBackend, key: str, after: str = "", *, missing_ok: bool = True,
                     whole_turns: bool = False) -> Iterator[ChatMessage]:
    """The session's messages after page cursor ``after`` ("": all), oldest first, a page
    of :data:`PAGE` at a time (memory bounded by a page: ``whole_turns`` widens a page over
    the results of its last tool call); nothing when the session is gone (``missing_ok``,
    else its error). Lenient, as ``page``: a corrupt line is skipped with a logged warning."""
    cursor: str | None = after
    try:
        while cursor is not None:
            page = store.page(key, limit=PAGE, after=cursor, whole_turns=whole_turns)
            yield from page.messages
            cursor = page.after if page.has_more else None
    except (SessionNotFoundError, MessageNotFoundError):  # removed (or rewritten) since the search listed it
        if not missing_ok:
            raise
        return



def _marked(hit: SearchHit, mark: tuple[str, str]) -> str:
    """The hit's snippet on one line without terminal escape sequences, each match between
    the two halves of ``mark``."""
    return "".join(f"{mark[0]}{clean(piece, one_line=True)}{mark[1]}" if marked else clean(piece, one_line=True)
                   for piece, marked in matcher.pieces(hit.snippet, hit.matches))


def _hit_json(hit: SearchHit) -> dict[str, Any]:
    """A hit as ``search --json`` prints it (``text`` is the snippet, ``start``/``end`` its first match)."""
    first = hit.matches[0] if hit.matches else (0, 0)
    return {"key": hit.key, "field": "message", "id": hit.message_id, "role": hit.role,
            "created_at": hit.created_at, "text": hit.snippet, "start": first[0], "end": first[1],
            "matches": [list(m) for m in hit.matches]}


def cmd_search(args: argparse.Namespace) -> int:
    store = open_store(args)
    if args.sessions or args.nl:
        found = store.search(SessionQuery(args.keyword, limit=args.limit or None, agent_alias=args.alias))
        sessions_out(args, found, f"no session matches {args.keyword!r}")
        return EXIT_OK if found else EXIT_FAILURE
    mark = ("\x1b[1;31m", "\x1b[0m") if sys.stdout.isatty() else ("**", "**")
    count, cursor = 0, args.cursor
    while True:
        page = store.search_messages(args.keyword, roles=args.role, keys=args.key, agent_alias=args.alias,
                                     name=args.name, since=args.since, until=args.until,
                                     limit=args.limit or PAGE, cursor=cursor)
        for hit in page.hits:
            count += 1
            if args.json:
                sys.stdout.write(orjson.dumps(_hit_json(hit), option=orjson.OPT_APPEND_NEWLINE).decode("utf-8"))
            else:
                out(f"{clean(hit.key, one_line=True)}  {clean(hit.message_id or '-', one_line=True)}  "
                    f"{clean(hit.role, one_line=True)}  {_marked(hit, mark)}")
        sys.stdout.flush()  # each page as soon as it is found
        cursor = page.cursor
        if cursor is None:
            break
        if args.limit:
            err(f"older hits remain: add --cursor {cursor} for the next page")
            break
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
