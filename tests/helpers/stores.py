"""The backends the tests run on, in one place: how to open each one, and its storage
capability (the ``damage`` of ``SessionStoreContract``, the ``storage`` of
``make_state_machine``: raw access to what the backend keeps, as another tool would have).

``BACKENDS`` lists them; :class:`Backend` opens stores of one of them on one test's
storage (a directory, a database file, a PostgreSQL schema). tests/contract runs every
test on each (its ``backend`` fixture), and its state machines take their factories from
here too.
"""

from __future__ import annotations

import os
import pathlib
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from jsonl_sessions import SessionStore
from jsonl_sessions.rows import index_of
from jsonl_sessions.sqlite import SqliteSessionStore
from jsonl_sessions.testing import JsonlFileDamage, MemorySessionStore
from jsonl_sessions.testing.contract import snapshot as api_snapshot

#: Every backend of tests/contract: the JSONL store in both durability modes, SQLite,
#: PostgreSQL (a throwaway server, see ``_pg.py``) and the in-memory reference store.
BACKENDS = ("jsonl-fsync", "jsonl-flush", "sqlite", "postgres", "memory")


class SqliteStorage:
    """The storage capability of the SQLite backend, for the contract (``damage``) and the
    state machine (``storage``): read a session's rows as its export bytes; append raw rows
    through a separate connection, as another tool with a SQL shell would (in its own
    transaction, index columns and counters kept right); age a session; check that the
    file holds only the store's data. A fragment without its newline is dropped: SQLite
    commits whole transactions, so a write cut short never becomes a visible row (the
    torn-tail checks then verify that nothing else changed)."""

    #: verify() findings that damage through this probe may cause (corrupt or repeated rows).
    DAMAGE = frozenset({"corrupt-row", "id-order"})

    def __init__(self, store: SqliteSessionStore) -> None:
        self.store = store

    def _conn(self) -> sqlite3.Connection:
        return sqlite3.connect(self.store.path, isolation_level=None, timeout=10)

    def _one(self, query: str, *args: Any) -> Any:
        conn = self._conn()
        try:
            return conn.execute(query, args).fetchone()[0]
        finally:
            conn.close()

    def raw(self, key: str) -> bytes:
        conn = self._conn()
        try:
            got = conn.execute("SELECT m.line FROM messages m JOIN sessions s ON m.session = s.id "
                               "WHERE s.key = ? ORDER BY m.seq", (key,)).fetchall()
        finally:
            conn.close()
        return b"".join(line + b"\n" for (line,) in got)

    def append_raw(self, key: str, data: bytes) -> None:
        lines = data.split(b"\n")[:-1]  # the part after the last newline never committed
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            sid, count, size = conn.execute("SELECT id, message_count, size_bytes FROM sessions WHERE key = ?",
                                            (key,)).fetchone()
            for i, line in enumerate(lines):
                conn.execute("INSERT INTO messages (session, seq, id, created_at, role, kind, line) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?)", (sid, count + i, *index_of(line), line))
            conn.execute("UPDATE sessions SET message_count = ?, size_bytes = ?, activity_ns = ? WHERE id = ?",
                         (count + len(lines), size + sum(len(x) + 1 for x in lines), time.time_ns(), sid))
            conn.execute("COMMIT")
        finally:
            conn.close()

    def rewrite_raw(self, key: str, data: bytes) -> None:
        """Give the session's rows these lines (as many as it has), as an UPDATE in a SQL
        shell would: behind the store, its counters and index columns left as they were."""
        lines = data.split(b"\n")[:-1]
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            sid, count = conn.execute("SELECT id, message_count FROM sessions WHERE key = ?", (key,)).fetchone()
            assert len(lines) == count, "rewrite_raw edits the rows a session has"
            for seq, line in enumerate(lines):
                conn.execute("UPDATE messages SET line = ? WHERE session = ? AND seq = ?", (line, sid, seq))
            conn.execute("COMMIT")
        finally:
            conn.close()

    def age(self, key: str, ns: int) -> None:
        conn = self._conn()
        try:
            conn.execute("UPDATE sessions SET activity_ns = ? WHERE key = ?", (ns, key))
        finally:
            conn.close()

    def changed_at(self, key: str) -> int:
        return int(self._one("SELECT activity_ns FROM sessions WHERE key = ?", key))

    def size(self, key: str) -> int:
        return int(self._one("SELECT size_bytes FROM sessions WHERE key = ?", key))

    def check_layout(self) -> int:
        """Only the database, its WAL files and its writers' lock file in the directory; verify() finds nothing but
        the damage this probe made; the number of repairs that quarantined rows."""
        directory = pathlib.Path(self.store.path).parent
        name = pathlib.Path(self.store.path).name
        assert {p.name for p in directory.iterdir()} <= {name, name + "-wal", name + "-shm", name + "-lock"}
        unexpected = [f for f in self.store.verify().findings if f.kind not in self.DAMAGE]
        assert not unexpected, unexpected
        return int(self._one("SELECT count(DISTINCT repair) FROM quarantine"))


def postgres_store(dsn: str, schema: str, **options: Any) -> Any:
    """A PostgreSQL store on ``schema`` (a small pool: the tests open many stores)."""
    from jsonl_sessions.postgres import PostgresSessionStore

    return PostgresSessionStore(dsn, schema=schema, pool_size=4, **options)


class PostgresStorage:
    """The storage capability of the PostgreSQL backend, for the contract (``damage``) and
    the state machine (``storage``): a session's rows as its export bytes; raw rows
    appended through a separate connection under the session's guard, as another tool with
    a SQL shell would (counters kept right; a line repeating an id gets a NULL id column,
    as ``UNIQUE (session, id)`` demands); ageing; a check that the schema holds only the
    store's tables. A fragment without its newline is dropped: the server commits whole
    transactions, so a write cut short never becomes a row."""

    DAMAGE = frozenset({"corrupt-row", "id-order"})
    TABLES = frozenset({"messages", "quarantine", "schema_version", "sessions"})

    def __init__(self, store: Any) -> None:
        self.store = store
        self.dsn = store._db._conninfo
        self.s = store._s

    def _conn(self) -> Any:
        import psycopg

        return psycopg.connect(self.dsn, autocommit=True)

    def _one(self, query: str, *args: Any) -> Any:
        with self._conn() as conn:
            row = conn.execute(query, args).fetchone()
            return None if row is None else row[0]

    def raw(self, key: str) -> bytes:
        with self._conn() as conn:
            got = conn.execute(f"SELECT m.line FROM {self.s}.messages m JOIN {self.s}.sessions s ON m.session = s.id "
                               "WHERE s.key = %s ORDER BY m.seq", (key,)).fetchall()
        return b"".join(line.encode() + b"\n" for (line,) in got)

    def append_raw(self, key: str, data: bytes) -> None:
        from jsonl_sessions.postgres.base import columns
        from jsonl_sessions.postgres.db import key_hash

        lines = data.split(b"\n")[:-1]
        with self._conn() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (key_hash(self.store.schema, key),))
            row = conn.execute(f"SELECT id, message_count, size_bytes FROM {self.s}.sessions WHERE key = %s FOR UPDATE",
                               (key,)).fetchone()
            sid, count, size = row
            for i, line in enumerate(lines):
                mid, created, role, kind, text, fold = columns(line)
                if mid is not None and conn.execute(f"SELECT 1 FROM {self.s}.messages WHERE session = %s AND id = %s",
                                                    (sid, mid)).fetchone():
                    mid = None
                conn.execute(f"INSERT INTO {self.s}.messages (session, seq, id, created_at, role, kind, line, folded) "
                             "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                             (sid, count + i, mid, created, role, kind, text, fold))
            conn.execute(f"UPDATE {self.s}.sessions SET message_count = %s, size_bytes = %s, activity_ns = %s "
                         "WHERE id = %s", (count + len(lines), size + sum(len(x) + 1 for x in lines), time.time_ns(),
                                           sid))

    def rewrite_raw(self, key: str, data: bytes) -> None:
        """Give the session's rows these lines (as many as it has), as an UPDATE in a SQL
        shell would: behind the store, its counters and index columns left as they were."""
        lines = data.split(b"\n")[:-1]
        with self._conn() as conn, conn.transaction():
            sid, count = conn.execute(f"SELECT id, message_count FROM {self.s}.sessions WHERE key = %s",
                                      (key,)).fetchone()
            assert len(lines) == count, "rewrite_raw edits the rows a session has"
            for seq, line in enumerate(lines):
                conn.execute(f"UPDATE {self.s}.messages SET line = %s WHERE session = %s AND seq = %s",
                             (line.decode(), sid, seq))

    def age(self, key: str, ns: int) -> None:
        with self._conn() as conn:
            conn.execute(f"UPDATE {self.s}.sessions SET activity_ns = %s WHERE key = %s", (ns, key))

    def changed_at(self, key: str) -> int:
        return int(self._one(f"SELECT activity_ns FROM {self.s}.sessions WHERE key = %s", key))

    def size(self, key: str) -> int:
        return int(self._one(f"SELECT size_bytes FROM {self.s}.sessions WHERE key = %s", key))

    def check_layout(self) -> int:
        """Only the store's tables in its schema; verify() finds nothing but the damage
        this probe made; the number of repairs that quarantined rows."""
        with self._conn() as conn:
            tables = {t for (t,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s",
                                                 (self.store.schema,))}
        assert tables == self.TABLES, tables
        unexpected = [f for f in self.store.verify().findings if f.kind not in self.DAMAGE]
        assert not unexpected, unexpected
        return int(self._one(f"SELECT count(DISTINCT repair) FROM {self.s}.quarantine"))


def root_files(root: str | os.PathLike[str]) -> dict[str, Any]:
    """Every entry of a JSONL store's root: bytes of regular files, the target of
    symlinks, directories marked."""
    out: dict[str, Any] = {}
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.is_symlink():
                out[entry.name] = ("symlink", os.readlink(entry.path))
            elif entry.is_dir(follow_symlinks=False):
                out[entry.name] = ("dir",)
            else:
                out[entry.name] = pathlib.Path(entry.path).read_bytes()
    return out


#: The storage capability of each backend (None: the backend has none, and the tests that
#: need one skip, as ``SessionStoreContract`` documents).
STORAGE: dict[str, Any] = {"jsonl-fsync": JsonlFileDamage, "jsonl-flush": JsonlFileDamage,
                           "sqlite": SqliteStorage, "postgres": PostgresStorage, "memory": None}


def opener(name: str, pg: Any = None) -> Callable[..., Any]:
    """``open(path, **options)``: a new store of backend ``name`` whose data lives at (or,
    for PostgreSQL, in a schema named after) ``path``; ``pg`` is the ``pg_server`` fixture's
    server, needed for ``"postgres"`` only. The options are the stores' shared keyword
    arguments (``durability``, ``lock_timeout``, ``clock``, ...)."""
    if name.startswith("jsonl-"):
        durability = name.removeprefix("jsonl-")
        return lambda path, **options: SessionStore(path, **{"durability": durability, **options})
    if name == "sqlite":
        return lambda path, **options: SqliteSessionStore(pathlib.Path(path) / "sessions.db", **options)
    if name == "postgres":
        assert pg is not None, "the postgres backend needs the pg_server fixture"
        return lambda path, **options: postgres_store(pg.dsn, pg.schema_for(str(path)), **options)
    if name == "memory":
        return lambda path, **options: MemorySessionStore(path, **options)
    raise ValueError(f"unknown backend {name!r}")


class Backend:
    """One backend on one test's storage. ``open(**options)`` makes a new store object on
    that storage (a fresh instance: it reads what the others wrote, except for
    ``memory``, where nothing outlives its object); ``fresh(store)`` is a second object
    reading the same data as ``store`` (``store`` itself for ``memory``). Every store
    opened is closed by :meth:`close` (which drops the PostgreSQL schema too)."""

    def __init__(self, name: str, path: pathlib.Path, pg: Any = None) -> None:
        self.name = name
        self.path = path
        self.persistent = name != "memory"
        #: Whether ``lock(key)`` guards that one session only. The protocol lets a backend
        #: guard more (SQLite's lock is the database file's write lock: it keeps every
        #: other writer out); the others guard one session.
        self.guards_one_session = name != "sqlite"
        self._pg = pg
        if pg is not None:  # a schema left by an earlier run on an external server starts empty
            pg.drop(pg.schema_for(str(path)))
        self._open = opener(name, pg)
        self._opened: list[Any] = []

    def __repr__(self) -> str:
        return f"Backend({self.name!r})"

    def open(self, **options: Any) -> Any:
        store = self._open(self.path, **options)
        self._opened.append(store)
        return store

    def fresh(self, store: Any, **options: Any) -> Any:
        return self.open(**options) if self.persistent else store

    def state(self, store: Any, keys: tuple[str, ...] = ()) -> dict[str, Any]:
        """Everything a refused call must leave as it was: what the public API shows (every
        listed session and ``keys``: messages, metadata, run state, breadcrumb) and, for
        the JSONL store, every file of its root byte for byte."""
        out: dict[str, Any] = {"api": api_snapshot(store, keys)}
        if self.name.startswith("jsonl-"):
            out["files"] = root_files(store.root)
        return out

    def assert_unchanged(self, store: Any, before: dict[str, Any], *, new_lock_ok: bool = False) -> None:
        """``store`` is in the ``before`` state; with ``new_lock_ok``, but for the empty lock
        files of JSONL sessions that were not created (the guard is taken before a message
        is encoded; a lock file is never a session)."""
        after = self.state(store, tuple(k for k in before["api"] if k not in ("list_sessions", "with_metadata")))
        if new_lock_ok and "files" in after:
            for name in set(after["files"]) - set(before["files"]):
                if name.endswith(".lock") and after["files"][name] == b"":
                    del after["files"][name]
        assert after == before

    def damage(self, store: Any) -> Any:
        """The storage capability on ``store``, or None when the backend has none."""
        storage = STORAGE[self.name]
        return None if storage is None else storage(store)

    def close(self) -> None:
        """Close every store opened (and drop the PostgreSQL schemas they used)."""
        for store in reversed(self._opened):
            store.close()
        if self._pg is not None:
            for schema in sorted({store.schema for store in self._opened}):
                self._pg.drop(schema)
        self._opened.clear()
