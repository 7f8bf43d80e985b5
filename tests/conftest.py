from __future__ import annotations

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
