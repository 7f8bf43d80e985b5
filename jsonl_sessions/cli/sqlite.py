"""The database side of ``jsonl-sessions``: ``migrate`` between the backends (JSONL,
SQLite, PostgreSQL), and the
``repair`` and ``stats`` commands on a SQLite store (the other commands work
on either backend through the same API).

A root is a SQLite store with ``--backend sqlite``, or with the default ``--backend auto``
when it is an existing file or ends in ``.db`` / ``.sqlite`` / ``.sqlite3``. ``migrate``
also takes a PostgreSQL store: a ``postgresql://`` (or ``postgres://``) URL, or any libpq
DSN with ``--from postgres`` / ``--to postgres``, in the schema ``--from-schema`` /
``--to-schema`` (default ``jsonl_sessions``).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time
from collections import Counter
from typing import Any

from ..sqlite import SqliteSessionStore, migrate
from ..sqlite.migrate import Store as AnyStore
from .common import EXIT_FAILURE, EXIT_OK, PROG, Store, UsageError, err, is_sqlite_path, json_out, open_path, out
from .format import clean, short, when
from .format import size as fmt_size

# -- migrate ----------------------------------------------------------------------------------
POSTGRES_PREFIXES = ("postgresql://", "postgres://")


def _is_postgres(path: str, backend: str) -> bool:
    return backend == "postgres" or (backend == "auto" and path.startswith(POSTGRES_PREFIXES))


def _open(path: str, backend: str, *, create: bool, lock_timeout: float, schema: str = "jsonl_sessions") -> AnyStore:
    if _is_postgres(path, backend):
        try:
            from ..postgres import PostgresSessionStore
        except ImportError as exc:
            raise UsageError(str(exc)) from None
        return PostgresSessionStore(path, schema=schema, lock_timeout=lock_timeout)
    path = os.path.abspath(os.path.expanduser(path))
    sqlite = is_sqlite_path(path, backend)
    if not create and not (os.path.isfile(path) if sqlite else os.path.isdir(path)):
        raise UsageError(f"no SQLite store at {path}" if sqlite else f"no store at {path}: not a directory")
    return open_path(path, sqlite=sqlite, lock_timeout=lock_timeout)


class ProgressBar:
    """``[#####.....] 12/40 key`` redrawn in place on stderr, only when stderr is a terminal."""

    def __init__(self, stream: Any = None, width: int = 30) -> None:
        self.stream = stream or sys.stderr
        self.width = width
        self.active = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = 0.0

    def __call__(self, done: int, total: int, key: str) -> None:
        if not self.active or (done < total and time.monotonic() - self._last < 0.05):
            return
        self._last = time.monotonic()
        filled = self.width * done // max(total, 1)
        label = clean(key, one_line=True)[:30]
        self.stream.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} {label:<30}")
        if done == total:
            self.stream.write("\n")
        self.stream.flush()


def cmd_migrate(args: argparse.Namespace) -> int:
    """``migrate SRC DST``: copy every session of SRC into DST (see :func:`jsonl_sessions.sqlite.migrate`)."""
    pg_source = _is_postgres(args.source, args.source_backend)
    pg_target = _is_postgres(args.target, args.target_backend)
    if (pg_source and pg_target and args.source == args.target and args.source_schema == args.target_schema) or (
            not pg_source and not pg_target and os.path.abspath(args.source) == os.path.abspath(args.target)):
        raise UsageError("SRC and DST are the same store")
    source = _open(args.source, args.source_backend, create=False, lock_timeout=args.lock_timeout,
                   schema=args.source_schema)
    target = _open(args.target, args.target_backend, create=True, lock_timeout=args.lock_timeout,
                   schema=args.target_schema)
    report = migrate(source, target, progress=ProgressBar())
    for key, exc in sorted(report.failed.items()):
        err(f"error: session {key!r} not copied: {exc}")
    if getattr(args, "json", False):
        json_out({"source": {"kind": _kind(source), "root": getattr(source, "root", None)},
                  "target": {"kind": _kind(target), "root": getattr(target, "root", None)},
                  "copied": sorted(report.copied), "failed": {k: str(e) for k, e in sorted(report.failed.items())}})
    else:
            out(f"copied {len(report.copied)} session{'s' if len(report.copied) != 1 else ''} from the "
            f"{_kind(source)} {getattr(source, 'root', '')} to the {_kind(target)} {getattr(target, 'root', '')}"
            + (f"; {len(report.failed)} not copied (see above)" if report.failed else ""))
    source.close()
    target.close()
    return EXIT_OK if report.ok else EXIT_FAILURE


def _kind(store: AnyStore) -> str:
    if isinstance(store, SqliteSessionStore):
        return "SQLite file"
    return "JSONL directory" if isinstance(store, Store) else "PostgreSQL store"


# -- repair -----------------------------------------------------------------------------------
def run_repair(store: SqliteSessionStore, key: str) -> int:
    """``repair KEY`` on a SQLite store: ``compact(key, repair=True)`` with its report."""
    report = store.compaction_report(key, repair=True)
    plan = report.plan
    if not plan.dropped:
        out(f"session {key!r} needs no repair: {len(plan.kept)} messages, nothing changed")
        return EXIT_OK
    out(f"repaired session {key!r}: kept {len(plan.kept)} messages, set aside {report.dropped} row"
        f"{'s' if report.dropped != 1 else ''} (corrupt, or repeating an earlier id)")
    for bad in plan.dropped[:20]:
        out(f"  line {bad.line}, byte offset {bad.offset}: {clean(bad.reason, one_line=True)}: {short(bad.text, 60)}")
    if len(plan.dropped) > 20:
        out(f"  and {len(plan.dropped) - 20} more")
    if report.quarantine is not None:
        out(f"every original row is saved in {report.quarantine} (SELECT * FROM quarantine WHERE session_key = ...)")
    return EXIT_OK


# -- stats ------------------------------------------------------------------------------------
def run_stats(store: SqliteSessionStore, *, as_json: bool) -> int:
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
