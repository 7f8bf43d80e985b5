"""The PostgreSQL server of the tests: ``JSONL_SESSIONS_PG_DSN`` when set, otherwise a
throwaway cluster (:class:`jsonl_sessions.testing.pgserver.TempCluster`) started once per
test session and removed at its end. Without PostgreSQL (no ``initdb``, or psycopg not
installed) the tests that need it skip, unless ``JSONL_SESSIONS_REQUIRE_PG=1`` (CI): then
they fail. Each test (and each Hypothesis example) gets a schema of its own."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

REQUIRE = os.environ.get("JSONL_SESSIONS_REQUIRE_PG") == "1"


def _missing(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"PostgreSQL is required (JSONL_SESSIONS_REQUIRE_PG=1) but {reason}")
    pytest.skip(reason)


@dataclass
class PgServer:
    """The server: its DSN, the cluster when the tests own it (None for an external DSN),
    and the schemas handed out (dropped at the end when the server is external)."""

    dsn: str
    cluster: Any = None
    schemas: set[str] = field(default_factory=set)

    def schema_for(self, label: str) -> str:
        """A schema name for ``label`` (the same label, the same schema)."""
        name = "t_" + hashlib.blake2b(label.encode(), digest_size=8).hexdigest()
        self.schemas.add(name)
        return name

    def drop(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        self.schemas.discard(name)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        _missing("psycopg / psycopg_pool are not installed (pip install 'jsonl-sessions[postgres]')")
    from jsonl_sessions.testing.pgserver import TempCluster, find_bindir

    external = os.environ.get("JSONL_SESSIONS_PG_DSN")
    if external:
        server = PgServer(external)
        yield server
        for name in sorted(server.schemas):
            server.drop(name)
        return
    if find_bindir() is None:
        _missing("PostgreSQL is not installed (no initdb; apt-get install postgresql)")
    cluster = TempCluster()
    try:
        cluster.start()
        yield PgServer(cluster.dsn, cluster)
    finally:
        cluster.destroy()


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> str:
    return pg_server.dsn


@pytest.fixture
def pg_schema(pg_server: PgServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh schema for one test, dropped after it."""
    name = pg_server.schema_for(request.node.nodeid + str(os.getpid()))
    pg_server.drop(name)
    yield name
    pg_server.drop(name)
