from __future__ import annotations

import gc
import os
import pathlib

import pytest
from _budget import SOAK
from hypothesis import settings

from jsonl_sessions import SessionStore

settings.load_profile("soak" if SOAK else "lean")


@pytest.fixture(params=["fsync", "flush"])
def durability(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def store(tmp_path: pathlib.Path, durability: str) -> SessionStore:
    return SessionStore(tmp_path / "store", durability=durability)  # type: ignore[arg-type]


@pytest.fixture
def untimed(monkeypatch: pytest.MonkeyPatch) -> None:
    """For smoke runs of the benchmarks, which check reports, not timings: no system-wide
    write-back (os.sync) and no full collection of the test process's heap (gc.collect)
    before each timed block."""
    monkeypatch.setattr(os, "sync", lambda: None)
    monkeypatch.setattr(gc, "collect", lambda generation=2: 0)


from _pg import pg_dsn, pg_schema, pg_server  # noqa: F401  (PostgreSQL fixtures: a server per test session)
