"""The SQLite backend's own edge cases (the state machine and ``SessionStoreContract`` run
on it with the other backends in tests/contract, its storage capability ``SqliteStorage``
is in helpers/stores.py).

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
from collections.abc import Iterator

import pytest
from stores import SqliteStorage

from jsonl_sessions import (
    CorruptMetadataError,
    CorruptTranscriptError,
    InvalidMessageError,
    LockTimeoutError,
    SessionStore,
)
from jsonl_sessions.sqlite import SCHEMA_VERSION, SchemaError, SqliteSessionStore


@pytest.fixture
def sqlite_store(tmp_path: pathlib.Path) -> Iterator[SqliteSessionStore]:
    """The contract runs in fsync mode (the default); the modes differ only in the
    ``synchronous`` pragma, checked below and by the flush-mode state machine."""
    store = SqliteSessionStore(tmp_path / "sessions.db", durability="fsync")
    yield store
    store.close()


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

    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
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


# -- listing ------------------------------------------------------------------------------
def test_a_sidebar_page_is_an_index_seek_with_a_limit(sqlite_store: SqliteSessionStore) -> None:
    """The listing by updated_at (and by key) runs in SQL: ``ORDER BY ... LIMIT`` on an
    index, the cursor a seek into it, so a page reads the page's rows, not every session."""
    for i in range(30):
        sqlite_store.append(f"s{i:02}", {"role": "user", "content": "x"})
    conn = sqlite_store._db.conn()
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        first = sqlite_store.list_sessions_with_metadata(sort="updated_at", descending=True, limit=5)
        second = sqlite_store.list_sessions_with_metadata(sort="updated_at", descending=True, limit=5,
                                                          cursor=first.cursor)
        by_key = sqlite_store.list_sessions_with_metadata(limit=5)
        by_key = sqlite_store.list_sessions_with_metadata(limit=5, cursor=by_key.cursor)
    finally:
        conn.set_trace_callback(None)
    assert len(first) == len(second) == len(by_key) == 5
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT KEY, ID, META")]
    assert len(selects) == 4, statements
    for sql in selects:
        assert "LIMIT 6" in sql
        plan = " ".join(str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql))
        assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, (sql, plan)
        assert "TEMP B-TREE" not in plan, (sql, plan)
    for sql in (selects[1], selects[3]):  # a cursor: the index is searched from its position
        assert "SEARCH" in " ".join(str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql)), sql
