"""What every command of ``jsonl-sessions`` shares: the exit statuses and failure types,
where the store is, and the output helpers.

Commands raise :class:`UsageError` (exit status 2), :class:`CliError` or the store's
errors (1); :func:`jsonl_sessions.cli.main` turns each into one line on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import stat
import sys
from collections.abc import Iterable
from typing import Any

import orjson

from ..jsonl.layout import classify
from ..jsonl.store import SessionStore
from ..location import ENV_ROOT, resolve_root
from ..protocol import SessionBackend
from ..sqlite import SqliteSessionStore
from ..types import ChatMessage, SessionMetadata
from .format import COLUMNS, clean, message_json, metadata_json, metadata_row, render_message, table, terminal_width

PROG = "jsonl-sessions"
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: The library's logger: its warnings become ``jsonl-sessions: warning: ...`` lines.
LOGGER = logging.getLogger("jsonl_sessions")


class UsageError(Exception):
    """A usage error (exit status 2)."""


class CliError(Exception):
    """A failure to report as one line (exit status 1)."""


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


# -- output ---------------------------------------------------------------------------------
def out(text: str = "") -> None:
    """One line on stdout."""
    sys.stdout.write(text + "\n")


def err(text: str) -> None:
    """One line on stderr, ``jsonl-sessions: text``, control characters made visible."""
    sys.stderr.write(f"{PROG}: {clean(text, one_line=True)}\n")


def json_out(value: Any) -> None:
    """``value`` as indented JSON on stdout."""
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE).decode("utf-8"))


def nl_out(values: Iterable[Any]) -> None:
    """Each value as one line of JSON on stdout."""
    for value in values:
        sys.stdout.write(orjson.dumps(value, option=orjson.OPT_APPEND_NEWLINE).decode("utf-8"))


class Printer:
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


def sessions_out(args: argparse.Namespace, sessions: list[SessionMetadata], empty: str) -> None:
    """A list of sessions as ``--json``, ``--nl`` or a table; ``empty`` on stderr when none."""
    if args.json:
        json_out([metadata_json(md) for md in sessions])
    elif args.nl:
        nl_out(metadata_json(md) for md in sessions)
    elif not sessions:
        err(empty)
    else:
        for line in table(COLUMNS, [metadata_row(md) for md in sessions], numeric=(2, 3)):
            out(line)
