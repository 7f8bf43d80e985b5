"""The backend contract: every backend and the async facade implement it exactly."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import jsonl_sessions
from jsonl_sessions import AsyncSessionStore, SessionStore
from jsonl_sessions.protocol import AsyncSessionBackend, SessionBackend, backend_methods


def test_every_backend_has_the_contracts_signatures(store: Any) -> None:
    backend: SessionBackend = store
    assert isinstance(backend, SessionBackend)
    for name in [*backend_methods(), "close"]:  # (lock: the return type may be narrower)
        want = inspect.signature(getattr(SessionBackend, name))
        got = inspect.signature(getattr(type(store), name))
        assert got == want, name


def test_the_contract_lists_every_public_method_of_the_store_but_its_extras() -> None:
    public = {n for n, v in inspect.getmembers(SessionStore, inspect.isfunction) if not n.startswith("_")}
    # ``close`` and ``lock`` concern the store object and its guard, not stored data.
    assert public - set(backend_methods()) == {"close", "lock"}
    assert {"close", "lock"} <= {n for n in vars(SessionBackend) if not n.startswith("_")}
    assert set(backend_methods()) <= public


def test_the_async_facade_is_an_async_backend(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        async with AsyncSessionStore(tmp_path) as astore:
            backend: AsyncSessionBackend = astore
            assert isinstance(backend, AsyncSessionBackend)
            await backend.append("k", {"role": "user", "content": "hi"})
            return [m.content for m in await backend.load("k")]

    assert asyncio.run(scenario()) == ["hi"]
    for name in backend_methods():
        assert inspect.iscoroutinefunction(getattr(AsyncSessionStore, name)), name


def test_the_contract_is_exported() -> None:
    assert jsonl_sessions.SessionBackend is SessionBackend
    assert jsonl_sessions.AsyncSessionBackend is AsyncSessionBackend
