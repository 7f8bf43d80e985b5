"""Every test in tests/contract runs on every backend.

The ``backend`` fixture is parametrized over :data:`stores.BACKENDS` (the JSONL store in
``fsync`` and ``flush`` mode, SQLite, PostgreSQL, the in-memory reference store), the one
list of backends: a test that asks for ``backend`` or ``store`` runs once per backend,
with ids such as ``test_x[sqlite]``. ``store`` is a new, empty store of that backend;
``backend.open(**options)`` opens another object on the same storage, ``backend.fresh(store)``
a second object reading the same data (``store`` itself for the in-memory store, whose
data does not outlive its object), and ``backend.damage(store)`` the storage capability
(None where a backend has none). Everything opened is closed after the test.

The PostgreSQL runs need a server (see ``helpers/_pg.py``); without one they skip, or fail
with ``JSONL_SESSIONS_REQUIRE_PG=1``.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from stores import BACKENDS, Backend


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    name: str = request.param
    pg = request.getfixturevalue("pg_server") if name == "postgres" else None
    opened = Backend(name, tmp_path / "store", pg)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def store(backend: Backend) -> Any:
    """A new, empty store of the backend (lock_timeout 5 s, so a guard bug fails fast)."""
    return backend.open(lock_timeout=5)
