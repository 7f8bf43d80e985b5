"""``jsonl-sessions tail``: the newest messages of a session; with ``-f`` it keeps printing
new ones (lock-free polling) until interrupted."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from ..errors import MessageNotFoundError, SessionNotFoundError, SessionStoreError
from ..jsonl.control import read_head
from ..jsonl.layout import SessionFiles
from ..jsonl.store import SessionStore
from ..protocol import SessionBackend
from .common import EXIT_OK, Printer, err, open_store

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


Signature = tuple[int, int, int, int] | None


def _signature(transcript: str, lock: str) -> Signature:
    """What changes when the session does: the transcript's inode, size and mtime, and the
    control file's sequence counter (bumped by in-place rewrites). None: no transcript."""
    try:
        st = os.lstat(transcript)
    except FileNotFoundError:
        return None
    try:
        seq = read_head(lock).seq
    except (OSError, SessionStoreError):
        seq = -1
    return st.st_ino, st.st_size, st.st_mtime_ns, seq


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
