"""The commands of ``jsonl-sessions`` and the store they open: ``ls``, ``show``, ``tail``,
``search``, ``export`` (``--to claude-code`` too), ``import`` (``--from claude-code|codex``
too), ``rm``, ``stats``, ``gc``, ``repair``, and the SQLite side of ``verify`` (its JSONL
side is :mod:`.verify`; ``migrate`` is :mod:`.migrate`, ``demo`` :mod:`.demo`).

Each ``cmd_*`` takes the parsed arguments and returns the exit status; failures are
raised (see :mod:`jsonl_sessions.cli.output`). :func:`open_store` and its relatives are
the one place the command line resolves ``--root`` / ``--backend`` and makes a store.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import os
import sqlite3
import stat
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from .. import _platform, records
from ..compaction import ORIGINAL_ID, CompactionPlan, CompactionReport
from ..corruption import BOM
from ..errors import (
    InvalidMessageError,
    MessageNotFoundError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
)
from ..foreign.files import write_jsonl
from ..foreign.transfer import Imported, export_claude_code, import_claude_code, import_codex, iter_codex_rollouts
from ..jsonl.control import read_head
from ..jsonl.layout import TMP_SUFFIX, FileState, SessionFiles, classify
from ..jsonl.store import SessionStore, compaction_report, prune_report
from ..keys import key_to_stem
from ..location import ENV_ROOT, resolve_root
from ..protocol import SessionBackend
from ..sqlite import SqliteSessionStore
from ..types import ChatMessage, SessionMetadata, SessionQuery
from .output import (
    EXIT_FAILURE,
    EXIT_OK,
    PROG,
    CliError,
    Printer,
    UsageError,
    clean,
    err,
    json_out,
    nl_out,
    out,
    sessions_out,
    short,
    when,
)
from .output import size as fmt_size


# -- where the store is (one rule shared with the adapters) ---------------------------------
def existing_root(args: argparse.Namespace) -> str:
    """The resolved root; a usage error when it is not an existing directory."""
    root = resolve_root(args.root)
    try:
        st = os.stat(root)
    except FileNotFoundError:
        raise UsageError(f"no store at {root}: the directory does not exist "
                         f"(give --root DIR or set {ENV_ROOT})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{root} is not a directory")
    return root


#: File name endings taken for a SQLite store by ``--backend auto``.
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
#: The stores the command line opens; commands that only call the backend contract take a
#: :class:`SessionBackend` instead.
Store = SessionStore | SqliteSessionStore


def is_sqlite_path(path: str, backend: str = "auto") -> bool:
    """Whether ``path`` names a SQLite store: ``backend`` says so, or (``auto``) its name ends
    in ``.db`` / ``.sqlite`` / ``.sqlite3`` or it is a file starting with SQLite's header."""
    if backend != "auto":
        return backend == "sqlite"
    if path.lower().endswith(SQLITE_SUFFIXES):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def is_sqlite(args: argparse.Namespace) -> bool:
    """Whether the arguments name a SQLite store (``--backend``, or the root's name)."""
    return is_sqlite_path(resolve_root(args.root), getattr(args, "backend", "auto"))


def open_path(path: str, *, sqlite: bool, lock_timeout: float | None) -> Store:
    """The one place the command line makes a store: a SQLite file or a JSONL directory
    at ``path`` (created when missing; callers check first when it must exist)."""
    if sqlite:
        return SqliteSessionStore(path, lock_timeout=lock_timeout)
    return SessionStore(path, lock_timeout=lock_timeout)


def open_concrete(args: argparse.Namespace, *, create: bool = False) -> Store:
    """The store at the resolved root: a JSONL directory, or a SQLite file (see
    :func:`is_sqlite`). Unless ``create``, a missing root is a usage error (so a typo in
    ``--root`` never silently creates an empty store). Opening a JSONL store removes temp
    files that interrupted writes left for idle sessions (docs/format.md)."""
    if is_sqlite(args):
        path = resolve_root(args.root)
        if not create and not os.path.isfile(path):
            raise UsageError(f"no SQLite store at {path}: the file does not exist (give --root FILE or set {ENV_ROOT})")
        return open_path(path, sqlite=True, lock_timeout=args.lock_timeout)
    root = resolve_root(args.root) if create else existing_root(args)
    return open_path(root, sqlite=False, lock_timeout=args.lock_timeout)


def open_store(args: argparse.Namespace, *, create: bool = False) -> SessionBackend:
    """:func:`open_concrete`, typed as the backend contract (what most commands use)."""
    return open_concrete(args, create=create)


def open_sqlite(args: argparse.Namespace) -> SqliteSessionStore:
    """The SQLite store the arguments name (:func:`is_sqlite` holds); a usage error when
    the file does not exist."""
    store = open_concrete(args)
    if not isinstance(store, SqliteSessionStore):  # is_sqlite(args) was checked by the caller
        raise UsageError(f"{store.root} is not a SQLite store")
    return store


def quarantine_files(root: str, stem: str) -> set[str]:
    """The names of the quarantine files a repair left for the session file stem ``stem``."""
    return {n for n in os.listdir(root) if classify(n) == ("quarantine", stem)}


# -- ls, show, search, export, import, rm ---------------------------------------------------
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


# -- import --from, export --to: the command-line side of jsonl_sessions.foreign.transfer ---
def import_from(args: argparse.Namespace) -> int:
    """``import --from FORMAT PATH``: one line per imported file; exit 1 when a file failed."""
    if args.file is not None:
        raise UsageError("with --from, give only PATH")
    path = args.key
    if not os.path.exists(path):
        raise CliError(f"no such file or directory: {path}")
    store = open_store(args, create=True)
    if args.source == "claude-code":
        if args.append:
            raise UsageError("--append is implied for claude-code: entries already stored (by uuid) are skipped")
        for done in import_claude_code(store, path):
            _report(done, args.json)
        return EXIT_OK
    files = list(iter_codex_rollouts(path)) if os.path.isdir(path) else [path]
    if not files:
        raise CliError(f"no Codex rollout (*.jsonl) under {path}")
    status = EXIT_OK
    for rollout in files:
        try:
            _report(import_codex(store, rollout, append=args.append), args.json)
        except (ValueError, OSError, SessionExistsError) as exc:  # reported; the other files still go in
            err(f"error: {rollout}: {exc}")
            status = EXIT_FAILURE
    return status


def _report(done: Imported, as_json: bool) -> None:
    if as_json:  # one object a file, as each is imported
        nl_out([{"key": done.key, "written": done.written, "left_out": done.left_out,
                 "bad_lines": list(done.bad_lines), "torn": done.torn}])
        return
    notes = [f"{done.left_out} left out"] if done.left_out else []
    if done.bad_lines:
        notes.append(f"{len(done.bad_lines)} unreadable line(s) skipped (line {done.bad_lines[0]}...)")
    if done.torn:
        notes.append("a torn last line ignored")
    out(f"imported {done.written} lines into {done.key!r}" + (f" ({'; '.join(notes)})" if notes else ""))


def export_to(args: argparse.Namespace) -> int:
    """``export KEY --to claude-code [-o FILE] [--session-id ID]``."""
    if args.to is None:
        raise UsageError("-o and --session-id apply with --to")
    store = open_store(args)
    export = export_claude_code(store, args.key, session_id=args.session_id, lenient=args.lenient)
    if args.output is None:
        sys.stdout.buffer.write(b"".join(orjson.dumps(e, option=orjson.OPT_APPEND_NEWLINE) for e in export.entries))
        sys.stdout.flush()
    else:
        target = args.output
        if os.path.isdir(target):
            target = os.path.join(target, f"{export.session_id}.jsonl")
        write_jsonl(target, export.entries)
        out(f"wrote {len(export.entries)} entries of session {export.session_id} to {target}")
    if export.left_out:
        err(f"note: {export.left_out} message(s) with no Claude Code form left out")
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


# -- stats ----------------------------------------------------------------------------------
def _torn(root: str, key: str) -> bool:
    """Whether the transcript ends without a newline (reads one byte); False when it is
    missing, unreadable or not a regular file (the listing warned about it)."""
    try:
        opened = SessionFiles.of(root, key).open_transcript(os.O_RDONLY)
    except (OSError, SessionStoreError):
        return False
    if opened is None:
        return False
    fd, st = opened
    try:
        return st.st_size > 0 and _platform.pread(fd, 1, st.st_size - 1) != b"\n"
    except OSError:
        return False
    finally:
        _platform.close(fd)


def _temp_files(root: str) -> set[str]:
    return {n for n in os.listdir(root) if n.startswith(".") and n.endswith(TMP_SUFFIX)}


def _files(root: str) -> dict[str, int]:
    """Counts over the store's own files: how many and how many bytes, orphan sidecars,
    quarantine files (one ``scandir``; dot files, symlinks and foreign names skipped)."""
    files = total = quarantined = 0
    sidecars: set[str] = set()
    transcripts: set[str] = set()
    with os.scandir(root) as entries:
        for entry in entries:
            name = entry.name
            if not entry.is_file(follow_symlinks=False) or name.startswith("."):
                continue
            role, stem = classify(name) or ("", "")
            if role == "quarantine":
                quarantined += 1
            elif role == "sidecar":
                sidecars.add(stem)
            elif role == "transcript":
                transcripts.add(stem)
            elif role != "lock":
                continue
            files += 1
            total += entry.stat(follow_symlinks=False).st_size
    return {"store_files": files, "store_bytes": total, "orphan_sidecars": len(sidecars - transcripts),
            "quarantine_files": quarantined}


def cmd_stats(args: argparse.Namespace) -> int:
    """Print the store's totals, as text or (``--json``) one JSON object."""
    if is_sqlite(args):
        return run_sqlite_stats(open_sqlite(args), as_json=args.json)
    root = existing_root(args)
    temps = _temp_files(root)  # before opening the store, which removes those of idle sessions
    store = open_path(root, sqlite=False, lock_timeout=args.lock_timeout)
    temps_removed = len(temps - _temp_files(root))
    sessions = store.list_sessions_with_metadata()
    states = Counter(md.state or "none" for md in sessions)
    activity = [md.updated_at for md in sessions if md.updated_at is not None]
    files = _files(root)
    result: dict[str, Any] = {
        "root": root,
        "sessions": len(sessions),
        "states": dict(sorted(states.items())),
        "messages": sum(md.message_count for md in sessions),
        "transcript_bytes": sum(md.size_bytes for md in sessions),
        "store_files": files["store_files"],
        "store_bytes": files["store_bytes"],
        "torn_tails": sum(_torn(root, md.key) for md in sessions),
        "temp_files": len(temps),
        "temp_files_removed": temps_removed,
        "orphan_sidecars": files["orphan_sidecars"],
        "quarantine_files": files["quarantine_files"],
        "corrupt_lines": None,  # needs a full read of every transcript: that is `verify`
        "oldest_activity": min(activity).isoformat() if activity else None,
        "newest_activity": max(activity).isoformat() if activity else None,
    }
    if args.json:
        json_out(result)
        return EXIT_OK
    state_text = ", ".join(f"{states[s]} {'without a state' if s == 'none' else s}"
                           for s in ("running", "idle", "error", "none") if states[s])
    activity_text = f"{when(min(activity))} .. {when(max(activity))}" if activity else "-"
    _render(result, state_text, activity_text)
    return EXIT_OK


def _render(result: dict[str, Any], state_text: str, activity_text: str) -> None:
    temps, removed = result["temp_files"], result["temp_files_removed"]
    rows = [
        ("store", result["root"]),
        ("sessions", f"{result['sessions']}" + (f" ({state_text})" if result["sessions"] else "")),
        ("messages", str(result["messages"])),
        ("transcripts", fmt_size(result["transcript_bytes"])),
        ("all files", (f"{fmt_size(result['store_bytes'])} in {result['store_files']} files "
                       "(transcripts, sidecars, locks, quarantine)")),
        ("torn tails", str(result["torn_tails"])),
        ("temp files", f"{temps}" + (f" (left by interrupted writes; {removed} removed just now by "
                                     "opening the store)" if temps else "")),
        ("orphan sidecars", str(result["orphan_sidecars"])),
        ("quarantine files", str(result["quarantine_files"])),
        ("corrupt lines", f"not counted (a full read): run `{PROG} verify`"),
        ("activity", activity_text),
    ]
    for label, value in rows:
        out(f"{label + ':':<18}{clean(value, one_line=True)}")


# -- gc -------------------------------------------------------------------------------------
def _plural(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def cmd_gc(args: argparse.Namespace) -> int:
    """``gc`` on the store the arguments name; returns the exit status."""
    store = open_concrete(args)
    if is_sqlite(args) or not isinstance(store, SessionStore):
        out("nothing to collect: a SQLite store keeps no files per session")
        return EXIT_OK
    report = prune_report(store)
    if args.json:
        json_out({"locks": list(report.locks), "sidecars": list(report.sidecars), "temps": list(report.temps)})
        return EXIT_OK
    if not report.removed:
        out(f"nothing to collect in {store.root}")
        return EXIT_OK
    out(f"removed {_plural(len(report.locks), 'lock file')}, {_plural(len(report.sidecars), 'orphan sidecar')} "
        f"and {_plural(len(report.temps), 'temp file')} of sessions that no longer exist")
    for path in report.removed:
        out(f"  {os.path.basename(path)}")
    return EXIT_OK


# -- repair ---------------------------------------------------------------------------------
def cmd_repair(args: argparse.Namespace) -> int:
    """``repair KEY`` on the store the arguments name."""
    store = open_concrete(args)
    if getattr(args, "json", False):
        json_out(report_json(store.compaction_report(args.key, repair=True) if isinstance(store, SqliteSessionStore)
                             else compaction_report(store, args.key, repair=True)))
        return EXIT_OK
    if isinstance(store, SqliteSessionStore):
        return run_sqlite_repair(store, args.key)
    return run_repair(store, args.key)


def report_json(report: CompactionReport) -> dict[str, Any]:
    """``repair --json``: one object, the same keys for every backend."""
    plan = report.plan
    return {"key": report.key, "changed": plan.changed, "kept": len(plan.kept),
            "dropped": [{"line": d.line, "offset": d.offset, "reason": d.reason, "corrupt": d.corrupt}
                        for d in plan.dropped],
            "renumbered": [{"line": d.line, "offset": d.offset, "reason": d.reason} for d in plan.renumbered],
            "torn_bytes": plan.torn, "bom": plan.bom, "recovered": report.recovered,
            "quarantine": report.quarantine, "torn_saved": report.torn_saved}


def run_repair(store: SessionStore, key: str) -> int:
    """Repair session ``key`` (``compact(key, repair=True)`` under the session's guard) and
    print its report; returns the exit status. Raises SessionNotFoundError, UnsafePathError."""
    report = compaction_report(store, key, repair=True)  # taking the guard completes an interrupted write first
    plan = report.plan
    if report.recovered:
        out("completed an interrupted write left by a process that died")
    if not plan.changed:
        out(f"session {key!r} needs no repair: {len(plan.kept)} messages, nothing changed")
        return EXIT_OK
    out(f"repaired session {key!r}: kept {len(plan.kept)} messages")
    corrupt = [d for d in plan.dropped if d.corrupt]
    if corrupt:
        out(f"set aside {len(corrupt)} corrupt line{'s' if len(corrupt) != 1 else ''}:")
        for bad in corrupt[:20]:
            out(f"  line {bad.line}, byte offset {bad.offset}: {clean(bad.reason, one_line=True)}: {short(bad.text, 60)}")
        if len(corrupt) > 20:
            out(f"  and {len(corrupt) - 20} more")
    duplicates = len(plan.dropped) - len(corrupt)
    if duplicates > 0:
        out(f"dropped {duplicates} exact cop{'ies' if duplicates != 1 else 'y'} of an earlier line")
    _renumbered(plan)
    if plan.torn:
        out(f"dropped a torn tail of {plan.torn} bytes (a last line without its newline: an append that never "
            "completed, or a line cut short)")
        if report.torn_saved is not None and report.torn_saved != report.quarantine:
            out(f"its bytes are saved in {report.torn_saved}")
    if plan.bom:
        out("removed a leading byte-order mark")
    if report.quarantine is not None:
        out(f"the original bytes are saved in {report.quarantine}")
    return EXIT_OK


def _renumbered(plan: CompactionPlan) -> None:
    """Print the lines a repair kept under a new id."""
    moved = plan.renumbered
    if moved:
        out(f"gave {len(moved)} line{'s' if len(moved) != 1 else ''} a new id (a repeated or out-of-order id; "
            f"the old one is kept in the field {ORIGINAL_ID!r}):")
        for line in moved[:20]:
            out(f"  line {line.line}, byte offset {line.offset}: {clean(line.reason, one_line=True)}")
        if len(moved) > 20:
            out(f"  and {len(moved) - 20} more")


# -- repair on a SQLite store ---------------------------------------------------------------
def run_sqlite_repair(store: SqliteSessionStore, key: str) -> int:
    """``repair KEY`` on a SQLite store: ``compact(key, repair=True)`` with its report."""
    report = store.compaction_report(key, repair=True)
    plan = report.plan
    if not plan.dropped and not plan.renumbered:
        out(f"session {key!r} needs no repair: {len(plan.kept)} messages, nothing changed")
        return EXIT_OK
    out(f"repaired session {key!r}: kept {len(plan.kept)} messages, set aside {report.dropped} row"
        f"{'s' if report.dropped != 1 else ''} (corrupt, or an exact copy of an earlier one)")
    for bad in plan.dropped[:20]:
        out(f"  line {bad.line}, byte offset {bad.offset}: {clean(bad.reason, one_line=True)}: {short(bad.text, 60)}")
    if len(plan.dropped) > 20:
        out(f"  and {len(plan.dropped) - 20} more")
    _renumbered(plan)
    if report.quarantine is not None:
        out(f"every original row is saved in {report.quarantine} (SELECT * FROM quarantine WHERE session_key = ...)")
    return EXIT_OK


# -- stats on a SQLite store ----------------------------------------------------------------
def run_sqlite_stats(store: SqliteSessionStore, *, as_json: bool) -> int:
    """``stats`` on a SQLite store: sessions by state, messages, bytes, the file's size,
    quarantined rows. Reads metadata and the session rows only."""
    sessions = store.list_sessions_with_metadata()
    states = Counter(md.state or "none" for md in sessions)
    activity = [md.updated_at for md in sessions if md.updated_at is not None]
    files = [store.root + suffix for suffix in ("", "-wal", "-shm") if os.path.exists(store.root + suffix)]
    conn = sqlite3.connect(f"file:{store.root}?mode=ro", uri=True)
    try:
        quarantined = conn.execute("SELECT count(*) FROM quarantine").fetchone()[0]
    finally:
        conn.close()
    result: dict[str, Any] = {
        "root": store.root,
        "backend": "sqlite",
        "sessions": len(sessions),
        "states": dict(sorted(states.items())),
        "messages": sum(md.message_count for md in sessions),
        "transcript_bytes": sum(md.size_bytes for md in sessions),
        "store_files": len(files),
        "store_bytes": sum(os.path.getsize(f) for f in files),
        "quarantined_rows": quarantined,
        "oldest_activity": min(activity).isoformat() if activity else None,
        "newest_activity": max(activity).isoformat() if activity else None,
    }
    if as_json:
        json_out(result)
        return EXIT_OK
    state_text = ", ".join(f"{states[s]} {'without a state' if s == 'none' else s}"
                           for s in ("running", "idle", "error", "none") if states[s])
    rows = [
        ("store", f"{store.root} (SQLite)"),
        ("sessions", f"{result['sessions']}" + (f" ({state_text})" if sessions else "")),
        ("messages", str(result["messages"])),
        ("messages bytes", fmt_size(result["transcript_bytes"])),
        ("all files", f"{fmt_size(result['store_bytes'])} in {len(files)} files (database, WAL)"),
        ("quarantined rows", str(quarantined)),
        ("corrupt rows", f"not counted (a full read): run `{PROG} verify`"),
        ("activity", f"{when(min(activity))} .. {when(max(activity))}" if activity else "-"),
    ]
    for label, value in rows:
        out(f"{label + ':':<18}{clean(value, one_line=True)}")
    return EXIT_OK
