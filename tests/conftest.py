"""Fixtures of every test folder, and the import path of the shared helpers.

``tests/helpers`` (the modules every folder shares: budgets, the PostgreSQL server, the
syscall probe, the SIGKILL tools, the crash and concurrency workers) is put first on
``sys.path`` here, so a test imports them by name (``from _budget import sized``)
whichever folder it is in. A worker started as a subprocess gets the same path from
``_child.child_env()`` / ``sigkill.ENV``.
"""

from __future__ import annotations

import gc
import os
import pathlib
import sys

HELPERS = str(pathlib.Path(__file__).resolve().parent / "helpers")
if HELPERS not in sys.path:
    sys.path.insert(0, HELPERS)

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
