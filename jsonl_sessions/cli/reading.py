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
from typing import Any

import orjson

from .. import records
from ..errors import MessageNotFoundError, SessionNotFoundError, SessionStoreError
from ..jsonl.control import read_head
from ..jsonl.layout import FileState, SessionFiles
from ..jsonl.store import SessionStore
from ..location import resolve_root
from ..protocol import SessionBackend
from ..types import ChatMessage, SessionMetadata, SessionQuery
from .output import EXIT_FAILURE, EXIT_OK, Printer, clean, err, out, sessions_out
from .stores import open_store

# -- ls, show, search -----------------------------------------------------------------------
SORTS: dict[str, tuple[Callable[[SessionMetadata], Any], bool]] = {
    "key": (lambda md: md.key, False),
    "name": (lambda md: (md.name is None, md.name or ""), False),
    "activity": (lambda md: md.updated_at.timestamp() if md.updated_at else 0.0, True),
    "created": (lambda md: md.created_at.timestamp() if md.created_at else 0.0, True),
    "messages": (lambda md: md.message_count, True),
    "size": (lambda md: md.size_bytes, True),
}


def cmd_ls(args: argparse.Namespace) -> int:
    store = open_store(args)
    sessions: list[SessionMetadata] = store.list_sessions_with_metadata()
    if args.alias is not None:
        sessions = [md for md in sessions if md.agent_alias == args.alias]
    if args.state is not None:
        sessions = [md for md in sessions if (md.state or "none") == args.state]
    get, descending = SORTS[args.sort]
    sessions.sort(key=get, reverse=descending != args.reverse)
    sessions_out(args, sessions, f"no sessions in {resolve_root(args.root)}")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    store = open_store(args)
    printer = Printer(args.jsonl, args.width)
    if args.limit is not None:
        page = store.page(args.key, limit=args.limit, before=args.before, after=args.after)
        printer(page.messages)
        if page.has_more and page.messages:
            edge = page.messages[0].id if args.after is None else page.messages[-1].id
            err(f"{'older' if args.after is None else 'newer'} messages remain: add "
                 f"--{'before' if args.after is None else 'after'} {edge} for the next page")
        return EXIT_OK
    if args.before is not None:
        store.page(args.key, limit=1, before=args.before)  # an unknown cursor fails before any output
    cursor = args.after or ""
    while True:
        page = store.page(args.key, limit=PAGE, after=cursor)
        batch = page.messages
        if args.before is not None:
            batch = [m for m in batch if m.id < args.before]
        printer(batch)
        if len(batch) < len(page.messages) or not page.has_more:
            break
        if not batch[-1].id or batch[-1].id <= cursor:  # lines without ids (written by another tool)
            printer(store.load(args.key)[printer.count:])
            break
        cursor = batch[-1].id
    if not printer.count:
        err(f"no messages in session {args.key!r}" + (" in that range" if args.before or args.after else ""))
    return EXIT_OK


def _messages(store: SessionBackend, key: str) -> Iterator[ChatMessage]:
    """The session's messages, oldest first, a page at a time (memory bounded by a page);
    nothing when the session is gone."""
    cursor, count = "", 0
    try:
        while True:
            page = store.page(key, limit=PAGE, after=cursor)
            yield from page.messages
            count += len(page.messages)
            if not page.has_more or not page.messages:
                return
            if not page.messages[-1].id or page.messages[-1].id <= cursor:  # lines without ids (another tool's)
                yield from store.load(key)[count:]
                return
            cursor = page.messages[-1].id
    except (SessionNotFoundError, MessageNotFoundError):  # removed (or rewritten) since the search listed it
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
