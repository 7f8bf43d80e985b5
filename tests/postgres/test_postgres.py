"""The PostgreSQL backend's own edge cases (the state machine and ``SessionStoreContract``
run on it with the other backends in tests/contract, its storage capability
``PostgresStorage`` is in helpers/stores.py).

- examples: migrations and foreign schemas, durability mapping, the guard (lock timeout,
  lock() semantics), search matching ``str.casefold`` with ``%`` and ``_`` taken
  literally, verify.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from stores import postgres_store

from jsonl_sessions import SessionQuery


@pytest.fixture
def pg_store(pg_dsn: str, pg_schema: str) -> Iterator[Any]:
    store = postgres_store(pg_dsn, pg_schema)
    yield store
    store.close()


# -- schema and options -------------------------------------------------------------------
def test_schema_version_table_and_a_newer_or_foreign_schema_refused(pg_dsn: str, pg_schema: str) -> None:
    import psycopg

    from jsonl_sessions.postgres import SCHEMA_VERSION, SchemaError

    store = postgres_store(pg_dsn, pg_schema)
    store.append("k", {"role": "user", "content": "x"})
    store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute(f'SELECT version FROM "{pg_schema}".schema_version').fetchall() == [(SCHEMA_VERSION,)]
        conn.execute(f'UPDATE "{pg_schema}".schema_version SET version = %s', (SCHEMA_VERSION + 1,))
        conn.execute('CREATE SCHEMA "foreign app"; CREATE TABLE "foreign app".users (id int)')
    try:
        with pytest.raises(SchemaError, match="newer"):
            postgres_store(pg_dsn, pg_schema)
        with pytest.raises(SchemaError, match="another application"):
            postgres_store(pg_dsn, "foreign app")
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute('DROP SCHEMA "foreign app" CASCADE')


def test_a_version_1_schema_is_migrated_and_then_takes_values_of_any_length(pg_dsn: str, pg_schema: str) -> None:
    """A schema as version 1 left it (btree unique indexes on the key and the message id,
    NULL for a created_at past bigint) opens: the migration keeps every row, verify()
    finds it healthy, a repeated id is still refused, and keys and ids longer than a btree
    entry are taken afterwards."""
    import secrets

    import psycopg

    from jsonl_sessions import DuplicateMessageError
    from jsonl_sessions.postgres import MIGRATIONS, SCHEMA_VERSION

    source = postgres_store(pg_dsn, pg_schema + "_src")
    first = source.append("k", {"role": "user", "content": "one"})
    source.append("k", {"role": "user", "content": "late", "created_at": 2**63 + 5})
    source.set_session_agent_alias("k", "agent")
    s, src = f'"{pg_schema}"', f'"{pg_schema}_src"'
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {s}")
        for statement in MIGRATIONS[0]:
            conn.execute(statement.replace("{s}", s))
        conn.execute(f"CREATE TABLE {s}.schema_version (version integer NOT NULL); "
                     f"INSERT INTO {s}.schema_version VALUES (1)")
        conn.execute(f"INSERT INTO {s}.sessions (key, meta, agent_alias, principal_id, state, message_count, "
                     f"size_bytes, activity_ns) SELECT key, meta, agent_alias, principal_id, state, message_count, "
                     f"size_bytes, activity_ns FROM {src}.sessions")
        conn.execute(f"INSERT INTO {s}.messages SELECT (SELECT id FROM {s}.sessions), seq, id, "
                     f"nullif(created_at, 9223372036854775807), role, kind, line, folded FROM {src}.messages")
        conn.execute(f"DROP SCHEMA {src} CASCADE")
    source.close()
    store = postgres_store(pg_dsn, pg_schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute(f"SELECT version FROM {s}.schema_version").fetchall() == [(SCHEMA_VERSION,)]
    assert SCHEMA_VERSION == 3
    loaded = store.try_load("k")
    assert [m.content for m in loaded] == ["one", "late"] and loaded[1].created_at == 2**63 + 5
    assert store.verify().findings == []
    assert store.count_agent_attribution("agent") == 1
    with pytest.raises(DuplicateMessageError):
        store.append("k", {"role": "user", "content": "again", "id": first})
    long_key = secrets.token_hex(1500)
    store.append(long_key, {"role": "user", "content": "long"})
    assert store.session_exists(long_key) and store.verify().findings == []
    store.close()


def test_concurrent_openers_migrate_once(pg_dsn: str, pg_schema: str) -> None:
    """Several stores opening a new schema at once: the migration lock makes one of them
    create the tables, the others find them (no duplicate-table error)."""
    import threading

    errors: list[BaseException] = []
    stores: list[Any] = []

    def open_one() -> None:
        try:
            stores.append(postgres_store(pg_dsn, pg_schema))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    stores[0].append("k", {"role": "user", "content": "x"})
    assert all(s.load("k")[0].content == "x" for s in stores)
    for s in stores:
        s.close()


@pytest.mark.parametrize("durability,expected", [("fsync", "on"), ("flush", "off")])
def test_durability_maps_to_synchronous_commit(pg_dsn: str, pg_schema: str, durability: str, expected: str) -> None:
    store = postgres_store(pg_dsn, pg_schema, durability=durability)
    seen = store._db.write(["k"], lambda c: c.execute("SHOW synchronous_commit").fetchone()[0])
    assert seen == expected
    # SET LOCAL: nothing stays on the pooled connection after the transaction
    assert store._db.read(lambda c: c.execute("SHOW synchronous_commit").fetchone()[0]) == "on"
    store.close()


def test_search_is_casefold_and_takes_wildcards_literally(pg_store: Any) -> None:
    pg_store.append("ss", {"role": "user", "content": "Die STRASSE ist lang"})
    pg_store.append("eszett", {"role": "user", "content": [{"type": "text", "text": "die Straße"}]})
    pg_store.append("pct", {"role": "user", "content": "50% off_today"})
    pg_store.append("nul", {"role": "user", "content": "a\x00b"})
    pg_store.append("parts", {"role": "user", "content": ["ab", "cd"]})

    def keys(word: str) -> set[str]:
        return {m.key for m in pg_store.search(SessionQuery(word, limit=None))}

    assert keys("strasse") == {"ss", "eszett"}  # "ß".casefold() == "ss"; lower() and ILIKE say otherwise
    assert keys("%") == {"pct"} and keys("_") == {"pct"} and keys("0% O") == {"pct"}
    assert keys("a\x00b") == {"nul"}
    assert keys("b\ncd") == set()  # the parts are searched one by one, never joined


def test_lock_timeout_is_a_typed_error_and_writes_nothing(pg_dsn: str, pg_schema: str) -> None:
    holder = postgres_store(pg_dsn, pg_schema)
    waiter = postgres_store(pg_dsn, pg_schema, lock_timeout=0.2)
    holder.append("k", {"role": "user", "content": "first"})
    import threading

    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with holder.lock("k"):
            held.set()
            release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(30)
        from jsonl_sessions import LockTimeoutError

        with pytest.raises(LockTimeoutError) as info:
            waiter.append("k", {"role": "user", "content": "late"})
        assert isinstance(info.value, TimeoutError) and info.value.timeout == 0.2
        waiter.append("other", {"role": "user", "content": "not blocked"})  # another session's guard
        assert [m.content for m in waiter.load("k")] == ["first"]  # readers are not blocked
    finally:
        release.set()
        t.join()
    waiter.append("k", {"role": "user", "content": "after"})
    assert [m.content for m in waiter.load("k")] == ["first", "after"]
    holder.close()
    waiter.close()


def test_calls_inside_lock_commit_each_and_are_visible_before_the_block_ends(pg_dsn: str, pg_schema: str) -> None:
    from jsonl_sessions import InvalidMessageError

    store = postgres_store(pg_dsn, pg_schema)
    other = postgres_store(pg_dsn, pg_schema)
    with pytest.raises(RuntimeError), store.lock("k"):
        store.append("k", {"role": "user", "content": "kept"})
        assert [m.content for m in other.load("k")] == ["kept"]  # committed: another connection sees it
        with pytest.raises(InvalidMessageError):  # undone alone
            store.append_many("k", [{"role": "user", "content": "never"}, {"role": "user", "id": "0"}])
        with store.lock("k"):  # re-entrant
            store.set_session_name("k", "named")
        raise RuntimeError("the caller's block fails afterwards")
    assert [m.content for m in other.load("k")] == ["kept"]
    assert other.get_session_name("k") == "named"
    store.close()
    other.close()


def test_pool_size_threads_in_lock_blocks_at_once_each_use_their_blocks_connection(pg_dsn: str,
                                                                                   pg_schema: str) -> None:
    """As many threads as the pool has connections, each inside a lock() block on its own
    session at the same time: the calls inside run on the block's connection, so none
    waits for a second one (which would never come: connect_timeout, then
    DatabaseUnavailableError)."""
    import threading

    from jsonl_sessions.postgres import PostgresSessionStore

    store = PostgresSessionStore(pg_dsn, schema=pg_schema, pool_size=2, connect_timeout=2)
    other = postgres_store(pg_dsn, pg_schema)
    inside = threading.Barrier(2, timeout=30)
    errors: list[BaseException] = []

    def work(key: str) -> None:
        try:
            with store.lock(key):
                inside.wait()  # both blocks hold their connection now
                store.append(key, {"role": "user", "content": "in"})
                assert [m.content for m in store.load(key)] == ["in"]
                assert store.get_message_count(key) == 1
                assert [m.content for m in other.load(key)] == ["in"]  # committed before the block ends
                inside.wait()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # the blocks' locks went with them: another store takes both guards at once
    with other.lock("a"), other.lock("b"):
        other.append("a", {"role": "user", "content": "after"})
    store.close()
    other.close()


def test_nested_lock_blocks_share_one_connection_and_release_every_lock(pg_dsn: str, pg_schema: str) -> None:
    """pool_size=1: a block, a nested block on another key, a fork between the two keys and
    a read inside them all run on the one connection; at the end no advisory lock is left
    on it (the pool hands it to the next borrower clean)."""
    import psycopg

    from jsonl_sessions.postgres import PostgresSessionStore

    store = PostgresSessionStore(pg_dsn, schema=pg_schema, pool_size=1, connect_timeout=2,
                                 application_name="jsonl-nested")
    store.append("a", {"role": "user", "content": "one"})
    with store.lock("a"):
        with store.lock("b"):
            assert store.copy_messages("a", "b") is not None
            assert [m.content for m in store.load("b")] == ["one"]
        store.append("a", {"role": "user", "content": "two"})
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        left = conn.execute("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                            "WHERE l.locktype = 'advisory' AND a.application_name = 'jsonl-nested'").fetchone()
    assert left == (0,)
    assert [m.content for m in store.load("a")] == ["one", "two"]
    store.close()


def test_verify_finds_planted_inconsistencies(pg_store: Any) -> None:
    import psycopg

    pg_store.append_many("k", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert pg_store.verify().ok
    s = pg_store._s
    with psycopg.connect(pg_store._db._conninfo, autocommit=True) as conn:
        conn.execute(f"UPDATE {s}.sessions SET message_count = 7, principal_id = 'mallory'")
        conn.execute(f"UPDATE {s}.messages SET role = 'system' WHERE seq = 1")
    kinds = {f.kind for f in pg_store.verify().findings}
    assert kinds == {"counters", "meta-columns", "index-mismatch"}, kinds


# -- the async twin -------------------------------------------------------------------------
def test_async_twin_is_an_async_backend_and_never_blocks_the_loop(pg_dsn: str, pg_schema: str) -> None:
    """Every contract method is a coroutine with the sync store's results; a call waiting
    for a guard held elsewhere does not stop other coroutines from running."""
    import asyncio
    import threading

    from jsonl_sessions import AsyncSessionBackend
    from jsonl_sessions.postgres import AsyncPostgresSessionStore

    async def main() -> None:
        astore = await AsyncPostgresSessionStore.open(pg_dsn, schema=pg_schema, pool_size=4)
        assert isinstance(astore, AsyncSessionBackend)
        first = await astore.append("k", {"role": "user", "content": "a"})
        ids = await astore.append_many("k", [{"role": "assistant", "content": "b"}])
        assert await astore.get_message_count("k") == 2
        page = await astore.page("k", limit=1)
        assert [m.id for m in page.messages] == ids and page.before == ids[0] and first < ids[0]
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with astore.sync.lock("k"):
                held.set()
                release.wait(30)

        holder = threading.Thread(target=hold)
        holder.start()
        assert await asyncio.to_thread(held.wait, 30)
        waiting = asyncio.ensure_future(astore.append("k", {"role": "user", "content": "c"}))
        ticks = 0
        for _ in range(20):  # the loop keeps running while the append waits for the guard
            await asyncio.sleep(0.005)
            ticks += 1
        assert ticks == 20 and not waiting.done()
        release.set()
        await waiting
        holder.join()
        assert [m.content for m in await astore.load("k")] == ["a", "b", "c"]
        assert await astore.delete_session("k") is True
        await astore.aclose()

    asyncio.run(main())


def test_nul_and_u0001_in_indexed_text_round_trip(pg_store: Any) -> None:
    """``text`` cannot hold NUL: roles, kinds, aliases and owners holding NUL (or the
    escape character U+0001) are stored escaped and found again exactly; an id holding them
    (never stored: a message's id is a ULID) is looked up without an error."""
    weird = "0\x00\x01\x01\x02z"
    got = pg_store.append("k", {"role": "\x00r", "kind": "k\x01", "content": "x"})
    assert pg_store.get_message("k", got).role == "\x00r"
    assert pg_store.get_message("k", weird) is None and pg_store.get_message("k", "0\x00\x01\x02z") is None
    follow = pg_store.append("k", {"role": "user", "content": "y"})
    assert follow > got
    assert pg_store.page("k", limit=1, before=follow).messages[0].id == got
    pg_store.set_session_agent_alias("k", "al\x00ias")
    pg_store.set_session_principal("k", "own\x00er")
    assert pg_store.count_agent_attribution("al\x00ias") == 1
    assert pg_store.rename_agent_attribution("al\x00ias", "b\x00") == 1
    assert pg_store.verify().ok, pg_store.verify().findings
    assert pg_store.remove_last("k", expected_id=follow) is True
    assert pg_store.remove_last("k", expected_id=weird) is False  # no such id: a compare-and-remove removes nothing
    assert pg_store.remove_last("k", expected_id=got) is True
    assert pg_store.delete_session_owned("k", "own\x00") is False
    assert pg_store.delete_session_owned("k", "own\x00er") is True


def test_quotes_and_backslashes_in_keys_and_lines_round_trip(pg_store: Any) -> None:
    """Appends send their values as literals inside one request: quotes, backslashes and
    escape-looking text come back exactly."""
    key = "it's \\ 'q' \\' E'\\x41' $$ $a$ ; --"
    content = "\\x00 \\' '' \\\\ \"q\" \\u0041 ;'); DROP TABLE x; --"
    mid = pg_store.append(key, {"role": "o'r\\", "kind": "k\\'", "content": content, "n\\'": "'"})
    got = pg_store.get_message(key, mid)
    assert got is not None and got.content == content and got.role == "o'r\\" and got.kind == "k\\'"
    assert got.extra == {"n\\'": "'"}
    assert pg_store.list_sessions() == [key]
    assert pg_store.verify().ok


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_uses_its_own_pool(pg_store: Any) -> None:
    """After a fork the child makes its own pool (a pool's sockets and threads must not
    cross a fork), and its close() leaves the parent's connections working."""
    pg_store.append("k", {"role": "user", "content": "parent"})
    parent_pool = pg_store._db.pool()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a process with threads (the pool's)
        pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if all of it worked
        ok = False
        try:
            ok = pg_store._db.pool() is not parent_pool
            pg_store.append("k", {"role": "user", "content": "child"})
            ok = ok and [m.content for m in pg_store.load("k")] == ["parent", "child"]
            pg_store.close()
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    pg_store.append("k", {"role": "user", "content": "parent again"})
    assert [m.content for m in pg_store.load("k")] == ["parent", "child", "parent again"]
    assert pg_store._db.pool() is parent_pool


# -- listing ------------------------------------------------------------------------------
def test_listing_orders_keys_by_code_point_under_any_collation(pg_dsn: str) -> None:
    """The database's collation may order text by language rules ("a" < "B" < "c"); the
    listing orders keys by code point ("B" < "a" < "c"), as Python's str and every other
    backend do, in the SQL order and in the cursor's seek."""
    import psycopg

    name = f"icu_{os.getpid()}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        try:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en' "
                         "LOCALE 'C.utf8'")
        except psycopg.Error as exc:
            pytest.skip(f"this PostgreSQL cannot make an ICU database: {exc}")
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, dbname=name)
    try:
        with psycopg.connect(dsn) as conn:  # the collation does order language-wise
            assert [r[0] for r in conn.execute("SELECT unnest(ARRAY['c', 'B', 'a']) AS k ORDER BY k")] == \
                ["a", "B", "c"]
        store = postgres_store(dsn, "listing")
        try:
            for key in ("c", "B", "a", "Ab"):
                store.append(key, {"role": "user", "content": "x"})
            expected = sorted(["c", "B", "a", "Ab"])
            assert [m.key for m in store.list_sessions_with_metadata(sort="key", limit=10)] == expected
            first = store.list_sessions_with_metadata(limit=2)
            rest = store.list_sessions_with_metadata(limit=2, cursor=first.cursor)
            assert [m.key for m in first + rest] == expected
            assert [m.key for m in store.list_sessions_with_metadata(sort="key", descending=True, limit=10)] == \
                expected[::-1]
        finally:
            store.close()
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
