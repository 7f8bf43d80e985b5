"""The PostgreSQL backend side by side with the others, and ``migrate`` through it.

A Hypothesis property: the same random program (every mutation of the contract, with bad
arguments, stale ``expected_id`` s, unknown ids, forks, reverts, metadata, ownership; the
operations of tests/contract/test_sqlite_cross.py) on a JSONL store, a SQLite store, a PostgreSQL
store and the in-memory reference store gives the same result (or the same exception
type) for every call and the same observable state after every call. All four run on one
clock with the id generator re-seeded before each call, so they assign the same ids.

Then ``migrate`` JSONL -> PostgreSQL -> SQLite -> JSONL: byte-identical transcripts, equal
sidecars and equal observations (activity times included) at every hop; and the
``jsonl-sessions migrate`` command between all three backends.
"""

from __future__ import annotations

import pathlib
import shutil
import tempfile
import uuid
from typing import Any

import pytest
from _budget import sized
from _pg import PgServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sqlite_cross import Clock, Op, call, observe, ops, sidecars, transcripts

from jsonl_sessions import SessionStore
from jsonl_sessions.sqlite import SqliteSessionStore, export_session, migrate
from jsonl_sessions.testing import MemorySessionStore


@pytest.fixture(scope="module")
def server(pg_server: PgServer) -> PgServer:
    return pg_server


def test_same_operations_same_results_on_every_backend_then_migrate(server: PgServer) -> None:
    from jsonl_sessions.postgres import PostgresSessionStore

    @settings(max_examples=sized(8, 200), deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(program=st.lists(ops, min_size=1, max_size=sized(12, 25)))
    def run(program: list[Op]) -> None:
        tmp = pathlib.Path(tempfile.mkdtemp(prefix="jsonl-pg-cross-"))
        schema, copy_schema = f"x_{uuid.uuid4().hex}", f"y_{uuid.uuid4().hex}"
        server.schemas |= {schema, copy_schema}
        clock = Clock()
        jsonl = SessionStore(tmp / "jsonl", durability="flush", clock=clock)
        stores: list[Any] = [jsonl]
        try:
            others = {"SQLite": SqliteSessionStore(tmp / "s.db", durability="flush", clock=clock),
                      "PostgreSQL": PostgresSessionStore(server.dsn, schema=schema, durability="flush", clock=clock,
                                                         pool_size=2),
                      "memory": MemorySessionStore(durability="flush", clock=clock)}
            stores += list(others.values())
            pg = others["PostgreSQL"]
            for step, op in enumerate(program):
                clock.now += 7
                want = call(jsonl, op, step)
                for name, store in others.items():
                    got = call(store, op, step)
                    assert got == want, f"step {step} {op}: JSONL {want!r}, {name} {got!r}"
                seen = observe(jsonl)
                for name, store in others.items():
                    assert observe(store) == seen, f"{name} after step {step} {op}"
            assert pg.verify().ok, pg.verify().findings
            # JSONL -> PostgreSQL -> SQLite -> JSONL
            into_pg = PostgresSessionStore(server.dsn, schema=copy_schema, pool_size=2)
            into_db = SqliteSessionStore(tmp / "copy.db")
            back = SessionStore(tmp / "back")
            stores += [into_pg, into_db, back]
            assert migrate(jsonl, into_pg).copied == jsonl.list_sessions()
            assert migrate(into_pg, into_db).ok and migrate(into_db, back).ok
            for copy in (into_pg, into_db, back):
                assert observe(copy, times=True) == observe(jsonl, times=True)
            assert transcripts(tmp / "back") == transcripts(tmp / "jsonl")
            assert sidecars(tmp / "back") == sidecars(tmp / "jsonl")
            for key in jsonl.list_sessions():
                assert export_session(into_pg, key) == export_session(jsonl, key)
                mine, theirs = export_session(pg, key), export_session(others["SQLite"], key)
                assert mine is not None and theirs is not None
                assert (mine.lines, mine.meta) == (theirs.lines, theirs.meta)  # activity: each store's own clock
        finally:
            for store in stores:
                store.close()
            shutil.rmtree(tmp, ignore_errors=True)
            server.drop(schema)
            server.drop(copy_schema)

    run()


def test_migrate_command_between_all_three_backends(server: PgServer, tmp_path: pathlib.Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from jsonl_sessions.cli import main
    from jsonl_sessions.postgres import PostgresSessionStore

    source = SessionStore(tmp_path / "jsonl")
    source.append_many("chat/1", [{"role": "user", "content": "héllo \u0000 x"}, {"role": "assistant", "content": "hi"}])
    source.set_session_name("chat/1", "first \u0000 chat")
    source.append("chat-2", {"role": "user", "content": [{"type": "text", "text": "parts"}]})
    schema = f"cli_{uuid.uuid4().hex}"
    server.schemas.add(schema)
    try:
        assert main(["migrate", "--to", "postgres", "--to-schema", schema, str(tmp_path / "jsonl"), server.dsn]) == 0
        assert "copied 2 sessions" in capsys.readouterr().out
        assert main(["migrate", "--from", "postgres", "--from-schema", schema, server.dsn,
                     str(tmp_path / "s.db")]) == 0
        assert main(["migrate", str(tmp_path / "s.db"), str(tmp_path / "back")]) == 0
        capsys.readouterr()
        assert main(["migrate", "--to", "postgres", "--to-schema", schema, str(tmp_path / "jsonl"), server.dsn]) == 0
        assert "2 sessions already there" in capsys.readouterr().out  # the same sessions: nothing to do
        source.append("chat-2", {"role": "user", "content": "newer"})
        assert main(["migrate", "--to", "postgres", "--to-schema", schema, str(tmp_path / "jsonl"), server.dsn]) == 1
        assert "not copied" in capsys.readouterr().err  # other content: refused, untouched
        source.remove_last("chat-2")
        assert main(["migrate", "--from", "postgres", "--to", "postgres", "--from-schema", schema, "--to-schema",
                     schema, server.dsn, server.dsn]) == 2
        assert transcripts(tmp_path / "back") == transcripts(tmp_path / "jsonl")
        assert sidecars(tmp_path / "back") == sidecars(tmp_path / "jsonl")
        pg = PostgresSessionStore(server.dsn, schema=schema, pool_size=2)
        assert export_session(pg, "chat/1") == export_session(source, "chat/1")
        pg.close()
    finally:
        source.close()
        server.drop(schema)
