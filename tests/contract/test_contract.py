"""The shipped error contract (``jsonl_sessions.testing.SessionStoreContract``) on every
backend, with each backend's storage capability as ``damage`` (the in-memory store has
none: the tests that need it skip there, as the contract documents)."""

from __future__ import annotations

from typing import Any

import pytest
from stores import Backend

from jsonl_sessions.testing import SessionStoreContract


class TestContract(SessionStoreContract):
    @pytest.fixture
    def store(self, backend: Backend) -> Any:
        return backend.open(lock_timeout=5)

    @pytest.fixture
    def damage(self, backend: Backend, store: Any) -> Any:
        return backend.damage(store)
