"""``jsonl-sessions repair``: set a session's corrupt lines aside and rewrite it, then say
what was kept, dropped and saved where."""

from __future__ import annotations

import argparse
import os
import stat

from .. import _platform
from ..core import LOCK_SUFFIX, TRANSCRIPT_SUFFIX
from ..errors import SessionNotFoundError, UnsafePathError
from ..keys import key_to_stem
from ..locks import read_control
from ..metadata import _plan
from ..sqlite import SqliteSessionStore
from ..store import SessionStore
from ..transcript import BOM, parse
from . import sqlite as sqlite_cli
from .common import EXIT_OK, LOGGER, open_store, out, quarantine_files
from .format import clean, short


def cmd_repair(args: argparse.Namespace) -> int:
    """``repair KEY`` on the store the arguments name."""
    store = open_store(args)
    if isinstance(store, SqliteSessionStore):
        return sqlite_cli.run_repair(store, args.key)
    return run_repair(store, args.key)


def run_repair(store: SessionStore, key: str) -> int:
    """Repair session ``key`` (``compact(key, repair=True)`` under the session's guard) and
    print a report; returns the exit status. Raises SessionNotFoundError, UnsafePathError."""
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
        before = quarantine_files(store.root, stem)
        LOGGER.disabled = True  # its warning says where the copy went; so does the report below
        try:
            dropped = store.compact(key, repair=True)
        finally:
            LOGGER.disabled = False
        saved = sorted(quarantine_files(store.root, stem) - before)
    if control.pending or control.seq & 1:
        out("completed an interrupted write left by a process that died")
    if not plan.changed:
        out(f"session {key!r} needs no repair: {len(plan.kept)} messages, nothing changed")
        return EXIT_OK
    out(f"repaired session {key!r}: kept {len(plan.kept)} messages")
    if parsed.bad:
        out(f"set aside {len(parsed.bad)} corrupt line{'s' if len(parsed.bad) != 1 else ''}:")
        for bad in parsed.bad[:20]:
            end = data.find(b"\n", bad.offset)
            text = data[bad.offset: end if end != -1 else len(data)].decode("utf-8", "replace")
            out(f"  line {bad.line}, byte offset {bad.offset}: {clean(bad.reason, one_line=True)}: {short(text, 60)}")
        if len(parsed.bad) > 20:
            out(f"  and {len(parsed.bad) - 20} more")
    duplicates = dropped - len(parsed.bad)
    if duplicates > 0:
        out(f"dropped {duplicates} line{'s' if duplicates != 1 else ''} repeating an earlier id "
            "(the first line with an id is kept)")
    if parsed.torn:
        out(f"dropped a torn tail of {parsed.torn} bytes (an append that never completed; never a message)")
    if data.startswith(BOM):
        out("removed a leading byte-order mark")
    for name in saved:
        out(f"the original bytes are saved in {os.path.join(store.root, name)}")
    return EXIT_OK
