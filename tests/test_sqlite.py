"""The SQLite backend under the shipped conformance harness, plus its own edge cases.

- ``make_state_machine`` against ``SqliteSessionStore`` (fsync on the wall clock, flush on
  the machine's manual clock), with the fresh-instance check (a new store on the same
  file must agree with the model after every step);
- ``SessionStoreContract`` in both durability modes, with a ``damage`` capability that
  writes rows the way another tool with a SQL shell would;
- examples: schema version and foreign files refused, permissions, lock timeout across
  processes, ``verify`` finding planted damage, ``compact(repair=True)`` quarantining,
  exports byte-identical to the JSONL backend's, corrupt rows named precisely.
"""

from __future__ import annotations

import os
import pathlib
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest
from _budget import sized
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from jsonl_sessions import (
    CorruptMetadataError,
    CorruptTranscriptError,
    InvalidMessageError,
    LockTimeoutError,
    SessionStore,
)
from jsonl_sessions.rows import index_of
from jsonl_sessions.sqlite import SCHEMA_VERSION, SchemaError, SqliteSessionStore
from jsonl_sessions.testing import SessionStoreContract, make_state_machine


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


@pytest.fixture
def sqlite_store(tmp_path: pathlib.Path) -> Iterator[SqliteSessionStore]:
    """The contract runs in fsync mode (the default); the modes differ only in the
    ``synchronous`` pragma, checked below and by the flush-mode state machine."""
    store = SqliteSessionStore(tmp_path / "sessions.db", durability="fsync")
    yield store
    store.close()


# -- the harness ------------------------------------------------------------------------
class TestSqliteContract(SessionStoreContract):
    @pytest.fixture
    def store(self, sqlite_store: SqliteSessionStore) -> SqliteSessionStore:
        return sqlite_store

    @pytest.fixture
    def damage(self, store: SqliteSessionStore) -> SqliteStorage:
        return SqliteStorage(store)


MACHINES: dict[str, tuple[Any, bool, Any, int]] = {
    # name: (factory, manual clock, storage capability, examples)
    "fsync-wall-clock": (lambda p: SqliteSessionStore(p / "s.db", durability="fsync"), False, None, sized(4, 80)),
    "flush-manual-clock-storage": (lambda p, c: SqliteSessionStore(p / "s.db", durability="flush", clock=c), True,
                                   SqliteStorage, sized(10, 140)),
}


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_state_machine(name: str) -> None:
    factory, manual, storage, examples = MACHINES[name]
    machine = make_state_machine(factory, manual_clock=manual, storage=storage,
                                 name=f"Sqlite_{name.replace('-', '_')}")
    run_state_machine_as_test(machine, settings=settings(
        max_examples=examples, stateful_step_count=40, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]))
    assert machine.stats["fresh-store checks"] > 0
    if storage is not None:  # the storage rules ran: rows damaged by another tool, sessions aged
        assert machine.stats["damaged lines"] > 0 and machine.stats["sessions aged"] > 0, machine.stats


# -- the file ---------------------------------------------------------------------------
def test_file_modes_wal_and_schema_version(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "new" / "dir" / "s.db"
    store = SqliteSessionStore(path)
    store.append("k", {"role": "user", "content": "x"})
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()
    for wal in (tmp_path / "new" / "dir").glob("s.db-*"):
        assert oct(wal.stat().st_mode & 0o777) == "0o600", wal
    store.close()


@pytest.mark.parametrize("durability,expected", [("fsync", 2), ("flush", 1)])
def test_durability_maps_to_synchronous(tmp_path: pathlib.Path, durability: str, expected: int) -> None:
    store = SqliteSessionStore(tmp_path / "s.db", durability=durability)  # type: ignore[arg-type]
    with store._db.read() as conn:
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == expected
    store.close()


def test_older_schema_is_migrated_newer_and_foreign_files_refused(tmp_path: pathlib.Path) -> None:
    old = tmp_path / "v1.db"
    conn = sqlite3.connect(old)
    from jsonl_sessions.sqlite.schema import APPLICATION_ID, MIGRATIONS
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    MIGRATIONS[0](conn)
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    store = SqliteSessionStore(old)
    store.append("k", {"role": "user", "content": "x"})
    assert store.compact("k") == 0
    store.close()
    conn = sqlite3.connect(old)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 0
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaError, match="newer"):
        SqliteSessionStore(old)
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE notes (x)")
    conn.commit()
    conn.close()
    before = foreign.read_bytes()
    with pytest.raises(SchemaError, match="another application"):
        SqliteSessionStore(foreign)
    assert foreign.read_bytes() == before
    text = tmp_path / "notes.txt"
    text.write_text("not a database, " * 100)
    with pytest.raises(SchemaError, match="not a database"):
        SqliteSessionStore(text)
    assert text.read_text() == "not a database, " * 100


def test_export_is_byte_identical_to_the_jsonl_backend(tmp_path: pathlib.Path) -> None:
    jsonl = SessionStore(tmp_path / "jsonl")
    db = SqliteSessionStore(tmp_path / "s.db")
    messages = [{"role": "user", "content": "h\u00e9llo \U0001f99c", "id": "01HZZZZZZZZZZZZZZZZZZZZZZ0", "created_at": 5},
                {"role": "assistant", "content": [{"type": "text", "text": "x"}], "tool_calls": [{"id": "c"}],
                 "id": "01HZZZZZZZZZZZZZZZZZZZZZZ1", "created_at": 6, "kind": "compaction"}]
    jsonl.append_many("k", messages)
    db.append_many("k", messages)
    assert SqliteStorage(db).raw("k") == (tmp_path / "jsonl" / "k.jsonl").read_bytes()
    assert db.get_session_metadata("k").size_bytes == jsonl.get_session_metadata("k").size_bytes  # type: ignore[union-attr]
    db.close()


def test_corrupt_row_names_session_and_message(tmp_path: pathlib.Path) -> None:
    store = SqliteSessionStore(tmp_path / "s.db")
    store.append_many("k", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    good = store.load("k")
    damage = SqliteStorage(store)
    offset = len(damage.raw("k"))
    damage.append_raw("k", b'{"id": 5}\n')
    with pytest.raises(CorruptTranscriptError) as info:
        store.try_load("k")
    assert (info.value.key, info.value.line, info.value.offset) == ("k", 3, offset)
    assert store.load("k") == good
    assert store.get_message_count("k") == 3
    assert store.get_messages("k", offset=1) == good[1:]
    report = store.verify()
    assert not report.ok and [(f.kind, f.key, f.line) for f in report.findings] == [("corrupt-row", "k", 3)]
    with pytest.raises(CorruptTranscriptError):
        store.compact("k")
    assert store.compact("k", repair=True) == 1
    assert store.try_load("k") == good and store.verify().ok
    conn = sqlite3.connect(store.path)
    quarantined = conn.execute("SELECT session_key, seq, line FROM quarantine ORDER BY seq").fetchall()
    conn.close()
    assert [(k, seq) for k, seq, _ in quarantined] == [("k", 0), ("k", 1), ("k", 2)]
    assert quarantined[2][2] == b'{"id": 5}'
    store.close()


def test_verify_finds_planted_inconsistencies(tmp_path: pathlib.Path) -> None:
    store = SqliteSessionStore(tmp_path / "s.db")
    store.append_many("k", [{"role": "user", "content": str(i)} for i in range(3)])
    store.append("m", {"role": "user", "content": "x"})
    assert store.verify().ok
    conn = sqlite3.connect(store.path, isolation_level=None)
    conn.execute("UPDATE messages SET role = 'system' WHERE seq = 1 AND session = (SELECT id FROM sessions "
                 "WHERE key = 'k')")
    conn.execute("UPDATE sessions SET message_count = 7, meta = 'nope' WHERE key = 'm'")
    conn.close()
    kinds = sorted((f.kind, f.key) for f in store.verify().findings)
    assert kinds == [("corrupt-meta", "m"), ("counters", "m"), ("index-mismatch", "k")]
    with pytest.raises(CorruptMetadataError):
        store.get_session_metadata("m")
    assert [md.key for md in store.list_sessions_with_metadata()] == ["k", "m"]
    with pytest.raises(CorruptMetadataError):
        store.set_session_name("m", "x")
    store.close()


HOLDER = textwrap.dedent("""
    import sys, time
    from jsonl_sessions.sqlite import SqliteSessionStore
    store = SqliteSessionStore(sys.argv[1])
    with store.lock("k"):
        store.append("k", {"role": "user", "content": "held"})
        print("held", flush=True)
        sys.stdin.read()
""")


def test_lock_timeout_across_processes(tmp_path: pathlib.Path) -> None:
    """Another process holding the write lock: a writer here times out after
    lock_timeout with LockTimeoutError (nothing written); readers are not blocked and see
    what the holder's calls committed; once the block ends, the writer writes."""
    path = tmp_path / "s.db"
    first = SqliteSessionStore(path)
    first.append("k", {"role": "user", "content": "first"})
    first.close()
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=os.getcwd(), env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        store = SqliteSessionStore(path, lock_timeout=0.2)
        with pytest.raises(LockTimeoutError) as info:
            store.append("other", {"role": "user", "content": "x"})
        assert isinstance(info.value, TimeoutError) and info.value.timeout == 0.2
        assert [m.content for m in store.load("k")] == ["first", "held"]
        assert not store.session_exists("other")
    finally:
        proc.communicate(timeout=30)
        assert proc.returncode == 0
    assert [m.content for m in store.load("k")] == ["first", "held"]
    store.append("other", {"role": "user", "content": "x"})
    store.close()


def test_lock_block_commits_what_its_calls_did(tmp_path: pathlib.Path) -> None:
    store = SqliteSessionStore(tmp_path / "s.db")
    with pytest.raises(RuntimeError), store.lock("k"):
        store.append("k", {"role": "user", "content": "kept"})
        with pytest.raises(InvalidMessageError):  # undone alone (its savepoint)
            store.append_many("k", [{"role": "user", "content": "never"}, {"role": "user", "id": "0"}])
        raise RuntimeError("the caller's block fails afterwards")
    assert [m.content for m in SqliteSessionStore(tmp_path / "s.db").load("k")] == ["kept"]
    store.close()


def test_readme_sqlite_example_runs(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    readme = (pathlib.Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.DOTALL) if "SqliteSessionStore" in b)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec"), {})  # noqa: S102 - running the README example is the point
    store = SqliteSessionStore(tmp_path / "sessions.db")
    assert [m.content for m in store.load("chat-42")] == ["What is 2 + 2?"]
    store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_uses_its_own_connection(tmp_path: pathlib.Path) -> None:
    """After a fork the child opens its own connection (SQLite connections must not cross a
    fork), and its close() leaves the parent's connection working."""
    store = SqliteSessionStore(tmp_path / "s.db")
    store.append("k", {"role": "user", "content": "parent"})
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if all of it worked
        ok = False
        try:
            store.append("k", {"role": "user", "content": "child"})
            ok = [m.content for m in store.load("k")] == ["parent", "child"]
            store.close()
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    store.append("k", {"role": "user", "content": "parent again"})
    assert [m.content for m in store.load("k")] == ["parent", "child", "parent again"]
    assert store.verify().ok
    store.close()
