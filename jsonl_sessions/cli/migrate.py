"""``jsonl-sessions migrate SRC DST``: copy every session between the backends (a JSONL
directory, a SQLite file, a PostgreSQL store), with a progress bar on a terminal.

A path is a SQLite store with ``--from`` / ``--to sqlite``, or with the default ``auto``
when it is an existing file or ends in ``.db`` / ``.sqlite`` / ``.sqlite3``; a PostgreSQL
store is a ``postgresql://`` (or ``postgres://``) URL, or any libpq DSN with ``--from
postgres`` / ``--to postgres``, in the schema ``--from-schema`` / ``--to-schema`` (default
``jsonl_sessions``). The copying itself is :func:`jsonl_sessions.sqlite.migrate`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from ..display import clean
from ..errors import SessionExistsError
from ..sqlite import SqliteSessionStore, migrate
from ..sqlite.migrate import Existing
from ..sqlite.migrate import Store as AnyStore
from .output import EXIT_FAILURE, EXIT_OK, UsageError, err, json_out, out
from .stores import Store, is_sqlite_path, open_path

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
    existing: Existing = "overwrite" if args.overwrite else "skip" if args.skip_existing else "refuse"
    report = migrate(source, target, progress=ProgressBar(), existing=existing)
    for key, exc in sorted(report.failed.items()):
        err(f"error: session {key!r} not copied: {exc}"
            + ("; --skip-existing leaves such sessions, --overwrite replaces them"
               if isinstance(exc, SessionExistsError) else ""))
    if getattr(args, "json", False):
        json_out({"source": {"kind": _kind(source), "root": getattr(source, "root", None)},
                  "target": {"kind": _kind(target), "root": getattr(target, "root", None)},
                  "copied": sorted(report.copied), "unchanged": sorted(report.unchanged),
                  "skipped": sorted(report.skipped),
                  "failed": {k: str(e) for k, e in sorted(report.failed.items())}})
    else:
        out(f"copied {_sessions(len(report.copied))} from the {_kind(source)} {getattr(source, 'root', '')} to the "
            f"{_kind(target)} {getattr(target, 'root', '')}"
            + (f"; {_sessions(len(report.unchanged))} already there" if report.unchanged else "")
            + (f"; {_sessions(len(report.skipped))} with other content left as they are" if report.skipped else "")
            + (f"; {len(report.failed)} not copied (see above)" if report.failed else ""))
    source.close()
    target.close()
    return EXIT_OK if report.ok else EXIT_FAILURE


def _sessions(n: int) -> str:
    return f"{n} session{'s' if n != 1 else ''}"


def _kind(store: AnyStore) -> str:
    if isinstance(store, SqliteSessionStore):
        return "SQLite file"
    return "JSONL directory" if isinstance(store, Store) else "PostgreSQL store"
