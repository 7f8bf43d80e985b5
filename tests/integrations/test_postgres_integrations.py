"""The PostgreSQL backend behind everything typed against the backend contract: the
protocol itself (same signatures as the JSONL store), the official LangGraph checkpointer
conformance suite and the Claude Agent SDK's session-store conformance, each run
unmodified on an adapter over a PostgreSQL store (a fresh schema per store)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from _backends import assert_database_backend
from _pg import PgServer
from _sdk import require


def _store(server: PgServer, **options: Any) -> Any:
    from jsonl_sessions.postgres import PostgresSessionStore

    schema = f"i_{uuid.uuid4().hex}"
    server.schemas.add(schema)
    return PostgresSessionStore(server.dsn, schema=schema, pool_size=2, **options)


def test_the_postgres_store_is_a_backend_with_the_contracts_signatures(pg_server: PgServer) -> None:
    from jsonl_sessions.postgres import PostgresSessionStore

    with _store(pg_server) as store:  # the protocol is checked by mypy too (postgres/store.py)
        assert_database_backend(PostgresSessionStore, store)
    with pytest.raises(ValueError, match="closed"):
        store.load("k")
    store.close()  # idempotent


def test_langgraph_conformance_suite_over_postgres(pg_server: PgServer) -> None:
    require("langgraph.checkpoint.conformance")
    from langgraph.checkpoint.conformance import checkpointer_test, validate

    from jsonl_sessions.integrations.langgraph import JsonlCheckpointSaver

    made: list[Any] = []

    @checkpointer_test(name="JsonlCheckpointSaver-postgres")
    async def factory() -> Any:
        made.append(_store(pg_server, durability="flush"))
        yield JsonlCheckpointSaver(made[-1])

    report = asyncio.run(validate(factory))
    failures = {name: r.failures for name, r in report.results.items() if not r.passed}
    assert failures == {}
    assert report.passed_all_base()
    assert {name for name, r in report.results.items() if r.detected} == {
        "put", "put_writes", "get_tuple", "list", "delete_thread", "delete_for_runs", "copy_thread", "prune"}
    for store in made:
        assert store.verify().ok
        store.close()


def test_claude_agent_sdk_conformance_over_postgres(pg_server: PgServer) -> None:
    """The Claude Agent SDK's own ``run_session_store_conformance``, unmodified, on a
    ``JsonlSessionStore`` whose backend is a PostgreSQL schema (one per contract)."""
    require("claude_agent_sdk")
    from claude_agent_sdk.testing import run_session_store_conformance

    from jsonl_sessions.integrations.claude_agent_sdk import JsonlSessionStore

    made: list[Any] = []

    def make_store() -> JsonlSessionStore:
        made.append(_store(pg_server, durability="flush"))
        return JsonlSessionStore(made[-1])

    asyncio.run(run_session_store_conformance(make_store))
    assert len(made) > 10
    for store in made:
        assert store.verify().ok
        store.close()
