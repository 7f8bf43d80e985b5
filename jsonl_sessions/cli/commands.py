"""The commands of ``jsonl-sessions`` that list, print, import and remove sessions:
``ls``, ``show``, ``search``, ``export``, ``import``, ``rm``.

Each ``cmd_*`` takes the parsed arguments and returns the exit status; failures are
raised (see :mod:`jsonl_sessions.cli.common`).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import sys
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from .. import records
from ..errors import InvalidMessageError, MessageNotFoundError, SessionExistsError, SessionNotFoundError
from ..jsonl.lines import BOM
from ..jsonl.store import SessionStore
from ..keys import key_to_stem
from ..location import resolve_root
from ..protocol import SessionBackend
from ..types import ChatMessage, SessionMetadata, SessionQuery
from .common import (
    EXIT_FAILURE,
    EXIT_OK,
    CliError,
    Printer,
    UsageError,
    err,
    json_out,
    open_store,
    out,
    quarantine_files,
    sessions_out,
)
from .foreign import export_to, import_from
from .format import clean
from .tail import PAGE

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
    sessions = store.list_sessions_with_metadata()
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


def cmd_export(args: argparse.Namespace) -> int:
    if args.to is not None or args.output is not None or args.session_id is not None:
        if getattr(args, "json", False):
            raise UsageError("--json is the native export (one JSON message a line); --to writes another format")
        return export_to(args)
    store = open_store(args)
    messages = store.load(args.key) if args.lenient else store.try_load(args.key)
    if not messages and not store.session_exists(args.key):
        raise SessionNotFoundError(key=args.key)
    Printer(True, 0)(messages)
    return EXIT_OK


def _import_messages(data: bytes, source: str) -> list[ChatMessage]:
    """Messages from a JSON array (OpenAI-style ``[{role, content, ...}]``), an object
    with a ``messages`` array, or JSONL (one object a line; blank lines skipped)."""
    data = data.removeprefix(BOM)
    items: list[tuple[str, Any]]
    try:
        whole = orjson.loads(data)
    except orjson.JSONDecodeError:
        items = []
        for number, line in enumerate(data.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                items.append((f"{source}:{number}", orjson.loads(line)))
            except orjson.JSONDecodeError as exc:
                raise CliError(f"{source}:{number}: not JSON: {exc}") from None
    else:
        if isinstance(whole, dict) and isinstance(whole.get("messages"), list):
            whole = whole["messages"]
        if isinstance(whole, list):
            items = [(f"{source}: item {i}", item) for i, item in enumerate(whole, 1)]
        else:
            items = [(f"{source}:1", whole)]
    messages = []
    for where, item in items:
        if not isinstance(item, dict):
            raise CliError(f"{where}: a message must be a JSON object, not {type(item).__name__}")
        try:
            messages.append(ChatMessage.from_dict(item))
        except InvalidMessageError as exc:
            raise CliError(f"{where}: {exc.reason or exc}") from None
    return messages


def cmd_import(args: argparse.Namespace) -> int:
    if args.source is not None:
        return import_from(args)
    if args.file is None:
        raise UsageError("import needs KEY and FILE (or --from FORMAT PATH)")
    if args.file == "-":
        data, source = sys.stdin.buffer.read(), "<stdin>"
    else:
        try:
            with open(args.file, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise CliError(f"cannot read {args.file}: {exc.strerror or exc}") from None
        source = args.file
    messages = _import_messages(data, source)
    if not messages:
        raise CliError(f"{source} holds no messages")
    if args.new_ids:
        messages = [m.replace(id="") for m in messages]
    key_to_stem(args.key)  # a bad key is a usage error before the store directory is created
    store = open_store(args, create=True)
    with store.lock(args.key):
        existed = store.session_exists(args.key)
        if existed and not args.append:
            raise SessionExistsError(f"session {args.key!r} already exists (add --append to add to it)",
                                     key=args.key)
        try:
            ids = store.append_many(args.key, messages)
        except InvalidMessageError as exc:
            has_ids = any(m.id for m in messages)
            raise CliError(f"{exc}" + ("; the input's own ids are kept: --new-ids lets the store assign new ones"
                                       if has_ids else "")) from None
    if args.json:
        json_out({"key": args.key, "created": not existed, "ids": ids})
        return EXIT_OK
    out(f"imported {len(ids)} messages into {'existing' if existed else 'new'} session {args.key!r} "
         f"({ids[0]} .. {ids[-1]})")
    return EXIT_OK


def cmd_rm(args: argparse.Namespace) -> int:
    for key in args.keys:
        key_to_stem(key)  # every key valid before anything is removed
    store = open_store(args)
    status = EXIT_OK
    results: list[dict[str, Any]] = []  # --json: one object a key, in the order given
    for key in args.keys:
        with store.lock(key):
            if not store.session_exists(key):
                if not args.force:
                    err(f"error: session {key!r} does not exist")
                    status = EXIT_FAILURE
                results.append({"key": key, "removed": False, "reason": "missing", "kept": []})
                continue
            if not args.force:
                state = store.get_session_state(key)
                if state is not None and state.state == "running":
                    err(f"error: session {key!r} is running (turn {state.turn_id!r}); --force removes it anyway")
                    status = EXIT_FAILURE
                    results.append({"key": key, "removed": False, "reason": "running", "kept": []})
                    continue
            store.delete_session(key)
        kept = sorted(quarantine_files(store.root, key_to_stem(key))) if isinstance(store, SessionStore) else []
        results.append({"key": key, "removed": True, "reason": None, "kept": kept})
        if not args.json:
            out(f"removed session {key!r}" + (f" (kept its quarantine files: {', '.join(kept)})" if kept else ""))
    if args.json:
        json_out(results)
    return status
