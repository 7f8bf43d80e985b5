"""Where the store is and how the command line opens it: ``--root`` (else
``$JSONL_SESSIONS_ROOT``, else the per-user directory) and ``--backend`` resolved to a JSONL
directory or a SQLite file. :func:`open_store` and its relatives are the one place the
command line makes a store; a missing root is a usage error unless the command creates it.
"""

from __future__ import annotations

import argparse
import os
import stat

from ..jsonl.store import SessionStore
from ..location import ENV_ROOT, resolve_root
from ..protocol import SessionBackend
from ..sqlite import SqliteSessionStore
from .output import UsageError


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
