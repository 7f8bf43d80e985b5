"""The commands of ``jsonl-sessions`` (the parser and entry point are :mod:`jsonl_sessions.cli`).

Each ``cmd_*`` takes the parsed arguments and returns the exit status. Failures are
raised (:class:`UsageError`: exit status 2; :class:`CliError` and the store's errors: 1)
and become one line on stderr in :func:`jsonl_sessions.cli.main`.
"""

from __future__ import annotations

import argparse
import logging
import os
import stat
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from . import _platform
from ._cli_format import (
    COLUMNS,
    clean,
    message_json,
    metadata_json,
    metadata_row,
    render_message,
    short,
    table,
    terminal_width,
    when,
)
from ._cli_format import size as fmt_size
from .core import LOCK_SUFFIX, SIDECAR_SUFFIX, TMP_SUFFIX, TRANSCRIPT_SUFFIX
from .errors import (
    InvalidMessageError,
    MessageNotFoundError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
    UnsafePathError,
)
from .keys import key_to_stem
from .locks import read_control
from .metadata import QUARANTINE_MARK, QUARANTINE_SUFFIX, _plan
from .store import SessionStore
from .transcript import BOM, parse
from .types import ChatMessage, SessionMetadata, SessionQuery

PROG = "jsonl-sessions"
ENV_ROOT = "JSONL_SESSIONS_ROOT"
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_PAGE = 500  # messages per read when streaming a whole session
_REANCHOR = 1000  # newest messages searched for new ones after a follow cursor vanished
_LOGGER = logging.getLogger("jsonl_sessions")


class UsageError(Exception):
    """A usage error (exit status 2)."""


class CliError(Exception):
    """A failure to report as one line (exit status 1)."""


# -- where the store is -------------------------------------------------------------------
def default_root() -> str:
    """The per-user data directory: ``$XDG_DATA_HOME/jsonl-sessions`` (default
    ``~/.local/share/jsonl-sessions``) on Linux and other Unix, ``~/Library/Application
    Support/jsonl-sessions`` on macOS, ``%LOCALAPPDATA%\\jsonl-sessions`` on Windows."""
    home = os.path.expanduser("~")
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local")
    elif sys.platform == "darwin":
        base = os.path.join(home, "Library", "Application Support")
    else:
        xdg = os.environ.get("XDG_DATA_HOME", "")
        base = xdg if os.path.isabs(xdg) else os.path.join(home, ".local", "share")  # relative: ignored (XDG spec)
    return os.path.join(base, "jsonl-sessions")


def resolve_root(explicit: str | None = None) -> str:
    """``explicit`` (``--root``), else ``$JSONL_SESSIONS_ROOT``, else :func:`default_root`."""
    chosen = explicit or os.environ.get(ENV_ROOT) or default_root()
    return os.path.abspath(os.path.expanduser(chosen))


def _existing_root(args: argparse.Namespace) -> str:
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


def _store(args: argparse.Namespace, *, create: bool = False) -> SessionStore:
    """The store at the resolved root. Unless ``create``, a missing root is a usage error
    (so a typo in ``--root`` never silently creates an empty store). Opening a store
    removes temp files that interrupted writes left for idle sessions (docs/format.md)."""
    root = resolve_root(args.root) if create else _existing_root(args)
    return SessionStore(root, lock_timeout=args.lock_timeout)


# -- output ---------------------------------------------------------------------------------
def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    sys.stderr.write(f"{PROG}: {clean(text, one_line=True)}\n")


def _json_out(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE).decode("utf-8"))


def _nl_out(values: Iterable[Any]) -> None:
    for value in values:
        sys.stdout.write(orjson.dumps(value, option=orjson.OPT_APPEND_NEWLINE).decode("utf-8"))


class _Printer:
    """Prints messages readable (header + wrapped text, a blank line between) or as raw
    JSON lines; flushes after each batch when following."""

    def __init__(self, raw: bool, width: int | None, flush: bool = False) -> None:
        self.raw = raw
        self.width = terminal_width() if width is None else width
        self.flush = flush
        self.count = 0

    def __call__(self, messages: Iterable[ChatMessage]) -> None:
        for m in messages:
            if self.raw:
                sys.stdout.write(message_json(m).decode("utf-8") + "\n")
            else:
                sys.stdout.write(("\n" if self.count else "") + render_message(m, self.width) + "\n")
            self.count += 1
        if self.flush:
            sys.stdout.flush()


def _sessions_out(args: argparse.Namespace, sessions: list[SessionMetadata], empty: str) -> None:
    if args.json:
        _json_out([metadata_json(md) for md in sessions])
    elif args.nl:
        _nl_out(metadata_json(md) for md in sessions)
    elif not sessions:
        _err(empty)
    else:
        for line in table(COLUMNS, [metadata_row(md) for md in sessions], numeric=(2, 3)):
            _out(line)


# -- commands ---------------------------------------------------------------------------------
_SORTS: dict[str, tuple[Callable[[SessionMetadata], Any], bool]] = {
    "key": (lambda md: md.key, False),
    "name": (lambda md: (md.name is None, md.name or ""), False),
    "activity": (lambda md: md.updated_at.timestamp() if md.updated_at else 0.0, True),
    "created": (lambda md: md.created_at.timestamp() if md.created_at else 0.0, True),
    "messages": (lambda md: md.message_count, True),
    "size": (lambda md: md.size_bytes, True),
}


def cmd_ls(args: argparse.Namespace) -> int:
    store = _store(args)
    sessions = store.list_sessions_with_metadata()
    if args.alias is not None:
        sessions = [md for md in sessions if md.agent_alias == args.alias]
    if args.state is not None:
        sessions = [md for md in sessions if (md.state or "none") == args.state]
    get, descending = _SORTS[args.sort]
    sessions.sort(key=get, reverse=descending != args.reverse)
    _sessions_out(args, sessions, f"no sessions in {store.root}")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    store = _store(args)
    printer = _Printer(args.jsonl, args.width)
    if args.limit is not None:
        page = store.page(args.key, limit=args.limit, before=args.before, after=args.after)
        printer(page.messages)
        if page.has_more and page.messages:
            edge = page.messages[0].id if args.after is None else page.messages[-1].id
            _err(f"{'older' if args.after is None else 'newer'} messages remain: add "
                 f"--{'before' if args.after is None else 'after'} {edge} for the next page")
        return EXIT_OK
    if args.before is not None:
        store.page(args.key, limit=1, before=args.before)  # an unknown cursor fails before any output
    cursor = args.after or ""
    while True:
        page = store.page(args.key, limit=_PAGE, after=cursor)
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
        _err(f"no messages in session {args.key!r}" + (" in that range" if args.before or args.after else ""))
    return EXIT_OK


def cmd_tail(args: argparse.Namespace) -> int:
    store = _store(args)
    printer = _Printer(args.jsonl, args.width, flush=args.follow)
    stem = key_to_stem(args.key)
    paths = os.path.join(store.root, stem + TRANSCRIPT_SUFFIX), os.path.join(store.root, stem + LOCK_SUFFIX)
    seen = _signature(*paths)  # taken before the read: a change right after it is caught by the first poll
    page = store.page(args.key, limit=args.n)
    printer(page.messages)
    if args.follow:
        _follow(store, args.key, page.messages[-1].id if page.messages else None, seen, paths, printer,
                args.interval, args.max_seconds)
    return EXIT_OK


Signature = tuple[int, int, int, int] | None


def _signature(transcript: str, lock: str) -> Signature:
    """What changes when the session does: the transcript's inode, size and mtime, and the
    control file's sequence counter (bumped by in-place rewrites). None: no transcript."""
    try:
        st = os.lstat(transcript)
    except FileNotFoundError:
        return None
    try:
        seq = read_control(lock).seq
    except (OSError, SessionStoreError):
        seq = -1
    return st.st_ino, st.st_size, st.st_mtime_ns, seq


def _follow(store: SessionStore, key: str, last: str | None, seen: Signature, paths: tuple[str, str],
            printer: _Printer, interval: float, max_seconds: float | None) -> None:
    """Print messages as they are appended, like ``tail -f``. Polls the transcript's stat
    and control counter (``paths``) every ``interval`` seconds and, when they differ from
    ``seen``, reads the page after the last printed id (lock-free). A cursor that vanished
    (truncate, revert, rewrite) is re-anchored: of the newest messages, those with an id
    above it are new. A removed session is waited for; when it comes back it is printed
    from its start."""
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    gone = False
    while deadline is None or time.monotonic() < deadline:
        time.sleep(interval)
        now = _signature(*paths)
        if now == seen:
            continue
        seen = now
        if now is None:
            if not gone:
                _err(f"session {key!r} was removed; waiting for it to come back")
            gone = True
            continue
        if gone:
            _err(f"session {key!r} is back")
            gone, last = False, None
        last = _catch_up(store, key, last, printer)


def _catch_up(store: SessionStore, key: str, last: str | None, printer: _Printer) -> str | None:
    while True:
        try:
            page = store.page(key, limit=_PAGE, after=last or "")
        except SessionNotFoundError:
            return last
        except MessageNotFoundError:
            page = store.page(key, limit=_REANCHOR)
            _err(f"session {key!r} was truncated or rewritten; following it from there")
            printer([m for m in page.messages if last is None or m.id > last])
            return page.messages[-1].id if page.messages else None
        printer(page.messages)
        if page.messages:
            last = page.messages[-1].id
        if not page.has_more:
            return last


def cmd_search(args: argparse.Namespace) -> int:
    store = _store(args)
    found = store.search(SessionQuery(args.keyword, limit=args.limit or None, agent_alias=args.alias))
    _sessions_out(args, found, f"no session matches {args.keyword!r}")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from ._cli_verify import verify

    root = resolve_root(args.root)
    if not os.path.isdir(root):
        raise UsageError(f"no store at {root}: not a directory (give --root DIR or set {ENV_ROOT})")
    report = verify(root, args.keys or None)
    if args.json:
        _json_out(report.to_json())
    else:
        for line in report.render():
            _out(clean(line))
    return EXIT_OK if report.ok else EXIT_FAILURE


def _quarantine_files(root: str, stem: str) -> set[str]:
    prefix = stem + QUARANTINE_MARK
    return {n for n in os.listdir(root) if n.startswith(prefix) and n.endswith(QUARANTINE_SUFFIX)}


def cmd_repair(args: argparse.Namespace) -> int:
    store = _store(args)
    key = args.key
    stem = key_to_stem(key)
    path = os.path.join(store.root, stem + TRANSCRIPT_SUFFIX)
    control = read_control(os.path.join(store.root, stem + LOCK_SUFFIX))
    with store.lock(key):  # taking the guard completes an interrupted write first
        try:
            fd = _platform.open_file(path, os.O_RDONLY)  # never follows a symlink
        except FileNotFoundError:
            raise SessionNotFoundError(key=key) from None
        except OSError as exc:
            if exc.errno in _platform.SYMLINK_ERRNOS:
                raise UnsafePathError(key=key, path=path) from None
            raise
        try:
            if not stat.S_ISREG(_platform.fstat(fd).st_mode):
                raise UnsafePathError(key=key, path=path)
            data = _platform.pread(fd, _platform.fstat(fd).st_size, 0)
        finally:
            _platform.close(fd)
        parsed = parse(data, strict=False, key=key, path=path)
        plan = _plan(data)
        before = _quarantine_files(store.root, stem)
        _LOGGER.disabled = True  # its warning says where the copy went; so does the report below
        try:
            dropped = store.compact(key, repair=True)
        finally:
            _LOGGER.disabled = False
        saved = sorted(_quarantine_files(store.root, stem) - before)
    if control.pending or control.seq & 1:
        _out("completed an interrupted write left by a process that died")
    if not plan.changed:
        _out(f"session {key!r} needs no repair: {len(plan.kept)} messages, nothing changed")
        return EXIT_OK
    _out(f"repaired session {key!r}: kept {len(plan.kept)} messages")
    if parsed.bad:
        _out(f"set aside {len(parsed.bad)} corrupt line{'s' if len(parsed.bad) != 1 else ''}:")
        for bad in parsed.bad[:20]:
            end = data.find(b"\n", bad.offset)
            text = data[bad.offset: end if end != -1 else len(data)].decode("utf-8", "replace")
            _out(f"  line {bad.line}, byte offset {bad.offset}: {clean(bad.reason, one_line=True)}: {short(text, 60)}")
        if len(parsed.bad) > 20:
            _out(f"  and {len(parsed.bad) - 20} more")
    duplicates = dropped - len(parsed.bad)
    if duplicates > 0:
        _out(f"dropped {duplicates} line{'s' if duplicates != 1 else ''} repeating an earlier id "
             "(the first line with an id is kept)")
    if parsed.torn:
        _out(f"dropped a torn tail of {parsed.torn} bytes (an append that never completed; never a message)")
    if data.startswith(BOM):
        _out("removed a leading byte-order mark")
    for name in saved:
        _out(f"the original bytes are saved in {os.path.join(store.root, name)}")
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    store = _store(args)
    messages = store.load(args.key) if args.lenient else store.try_load(args.key)
    if not messages and not store.session_exists(args.key):
        raise SessionNotFoundError(key=args.key)
    _Printer(True, 0)(messages)
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
    out = []
    for where, item in items:
        if not isinstance(item, dict):
            raise CliError(f"{where}: a message must be a JSON object, not {type(item).__name__}")
        try:
            out.append(ChatMessage.from_dict(item))
        except InvalidMessageError as exc:
            raise CliError(f"{where}: {exc.reason or exc}") from None
    return out


def cmd_import(args: argparse.Namespace) -> int:
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
    store = _store(args, create=True)
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
    _out(f"imported {len(ids)} messages into {'existing' if existed else 'new'} session {args.key!r} "
         f"({ids[0]} .. {ids[-1]})")
    return EXIT_OK


def cmd_rm(args: argparse.Namespace) -> int:
    for key in args.keys:
        key_to_stem(key)  # every key valid before anything is removed
    store = _store(args)
    status = EXIT_OK
    for key in args.keys:
        with store.lock(key):
            if not store.session_exists(key):
                if not args.force:
                    _err(f"error: session {key!r} does not exist")
                    status = EXIT_FAILURE
                continue
            if not args.force:
                state = store.get_session_state(key)
                if state is not None and state.state == "running":
                    _err(f"error: session {key!r} is running (turn {state.turn_id!r}); --force removes it anyway")
                    status = EXIT_FAILURE
                    continue
            store.delete_session(key)
        kept = sorted(_quarantine_files(store.root, key_to_stem(key)))
        _out(f"removed session {key!r}" + (f" (kept its quarantine files: {', '.join(kept)})" if kept else ""))
    return status


def _torn(root: str, key: str) -> bool:
    """Whether the transcript ends without a newline (reads one byte)."""
    try:
        fd = _platform.open_file(os.path.join(root, key_to_stem(key) + TRANSCRIPT_SUFFIX), os.O_RDONLY)
    except OSError:
        return False
    try:
        size = _platform.fstat(fd).st_size
        return size > 0 and _platform.pread(fd, 1, size - 1) != b"\n"
    finally:
        _platform.close(fd)


def _temp_files(root: str) -> set[str]:
    return {n for n in os.listdir(root) if n.startswith(".") and n.endswith(TMP_SUFFIX)}


def cmd_stats(args: argparse.Namespace) -> int:
    root = _existing_root(args)
    temps = _temp_files(root)  # before opening the store, which removes those of idle sessions
    store = SessionStore(root, lock_timeout=args.lock_timeout)
    temps_removed = len(temps - _temp_files(root))
    sessions = store.list_sessions_with_metadata()
    states = Counter(md.state or "none" for md in sessions)
    files = total = quarantined = 0
    sidecars: set[str] = set()
    transcripts: set[str] = set()
    with os.scandir(root) as entries:
        for entry in entries:
            name = entry.name
            if not entry.is_file(follow_symlinks=False) or name.startswith("."):
                continue
            if name.endswith(QUARANTINE_SUFFIX) and QUARANTINE_MARK in name:
                quarantined += 1
            elif name.endswith(SIDECAR_SUFFIX):
                sidecars.add(name[: -len(SIDECAR_SUFFIX)])
            elif name.endswith(TRANSCRIPT_SUFFIX):
                transcripts.add(name[: -len(TRANSCRIPT_SUFFIX)])
            elif not name.endswith(LOCK_SUFFIX):
                continue
            files += 1
            total += entry.stat(follow_symlinks=False).st_size
    activity = [md.updated_at for md in sessions if md.updated_at is not None]
    transcript_bytes = sum(md.size_bytes for md in sessions)
    result: dict[str, Any] = {
        "root": root,
        "sessions": len(sessions),
        "states": dict(sorted(states.items())),
        "messages": sum(md.message_count for md in sessions),
        "transcript_bytes": transcript_bytes,
        "store_files": files,
        "store_bytes": total,
        "torn_tails": sum(_torn(root, md.key) for md in sessions),
        "temp_files": len(temps),
        "temp_files_removed": temps_removed,
        "orphan_sidecars": len(sidecars - transcripts),
        "quarantine_files": quarantined,
        "corrupt_lines": None,  # needs a full read of every transcript: that is `verify`
        "oldest_activity": min(activity).isoformat() if activity else None,
        "newest_activity": max(activity).isoformat() if activity else None,
    }
    if args.json:
        _json_out(result)
        return EXIT_OK
    state_text = ", ".join(f"{states[s]} {'without a state' if s == 'none' else s}"
                           for s in ("running", "idle", "error", "none") if states[s])
    rows = [
        ("store", root),
        ("sessions", f"{len(sessions)}" + (f" ({state_text})" if sessions else "")),
        ("messages", str(result["messages"])),
        ("transcripts", fmt_size(transcript_bytes)),
        ("all files", f"{fmt_size(total)} in {files} files (transcripts, sidecars, locks, quarantine)"),
        ("torn tails", str(result["torn_tails"])),
        ("temp files", f"{len(temps)}" + (f" (left by interrupted writes; {temps_removed} removed just now by "
                                          "opening the store)" if temps else "")),
        ("orphan sidecars", str(result["orphan_sidecars"])),
        ("quarantine files", str(quarantined)),
        ("corrupt lines", f"not counted (a full read): run `{PROG} verify`"),
        ("activity", f"{when(min(activity))} .. {when(max(activity))}" if activity else "-"),
    ]
    for label, value in rows:
        _out(f"{label + ':':<18}{clean(value, one_line=True)}")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from ._cli_demo import run_demo

    return run_demo(args.root, args.width)


