"""``serve`` on a PostgreSQL store: the session is read-only on the server's side
(``default_transaction_read_only``), so even a write the viewer never makes would be
refused by PostgreSQL; the pages render from it."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import pytest

from jsonl_sessions.cli.serve import open_for_reading, read_only_dsn
from jsonl_sessions.viewer.app import Viewer


@pytest.fixture
def filled(pg_dsn: str, pg_schema: str) -> Iterator[str]:
    from jsonl_sessions.postgres import PostgresSessionStore

    store = PostgresSessionStore(pg_dsn, schema=pg_schema)
    store.append_many("pg/chat", [{"role": "user", "content": "hello from **postgres**"},
                                  {"role": "assistant", "content": "hi"}])
    store.close()
    yield pg_dsn


def test_a_postgres_store_is_served_from_a_read_only_session(filled: str, pg_schema: str) -> None:
    args = argparse.Namespace(store=filled, root=None, source=None, postgres=True, schema=pg_schema,
                              lock_timeout=10.0, backend="auto")
    store: Any
    store, name = open_for_reading(args)
    try:
        viewer = Viewer(store, name)
        page = viewer.handle("/session", {"key": ["pg/chat"]})
        assert page.status == 200 and b"<strong>postgres</strong>" in page.body
        assert viewer.handle("/", {}).status == 200
        assert viewer.handle("/search", {"q": ["hello"]}).status == 200
        with pytest.raises(Exception, match="read-only transaction"):
            store.append("pg/chat", {"role": "user", "content": "a write"})
    finally:
        store.close()


def test_the_read_only_option_joins_the_options_a_dsn_already_has() -> None:
    pytest.importorskip("psycopg")
    from psycopg.conninfo import conninfo_to_dict

    assert conninfo_to_dict(read_only_dsn("host=/tmp dbname=x"))["options"] == "-c default_transaction_read_only=on"
    joined = conninfo_to_dict(read_only_dsn("postgresql://u@h/db?options=-c%20search_path%3Dfoo"))
    assert joined["options"] == "-c search_path=foo -c default_transaction_read_only=on"
