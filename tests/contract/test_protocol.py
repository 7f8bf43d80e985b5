"""The backend contract: every backend and the async facade implement it exactly."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest

import jsonl_sessions
from jsonl_sessions import AsyncSessionStore, SessionStore
from jsonl_sessions.base import BaseStore
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


def _stores() -> list[type]:
    from jsonl_sessions.sqlite import SqliteSessionStore
    from jsonl_sessions.testing.memory import MemorySessionStore

    found: list[type] = [SessionStore, SqliteSessionStore, MemorySessionStore]
    try:
        from jsonl_sessions.postgres import PostgresSessionStore
    except ImportError:  # psycopg not installed: the other stores still count
        return found
    return [*found, PostgresSessionStore]


def _defined_on(cls: type, name: str) -> type:
    return next(k for k in cls.__mro__ if name in vars(k))


def _own_doc(owner: type, name: str) -> str | None:
    value = vars(owner)[name]
    fn = value.fget if isinstance(value, property) else value
    return inspect.unwrap(fn).__doc__


@pytest.mark.parametrize("store", _stores(), ids=lambda cls: cls.__name__)
def test_the_contract_is_written_once_and_every_store_shows_it(store: type) -> None:
    """Every contract member's prose is on the protocol only: no store (nor BaseStore)
    repeats or replaces it, and ``inspect.getdoc`` of the store's member is that prose."""
    for name, value in vars(SessionBackend).items():
        if name.startswith("_") or not (callable(value) or isinstance(value, property)):
            continue
        contract = inspect.getdoc(value)
        assert contract, f"SessionBackend.{name} has no contract"
        owner = _defined_on(store, name)
        if owner is not SessionBackend:
            assert _own_doc(owner, name) is None, f"{owner.__name__}.{name} writes its own docstring"
        assert inspect.getdoc(getattr(store, name)) == contract, f"{store.__name__}.{name}"


#: Contract methods whose logic does not depend on the storage: BaseStore's alone.
NEUTRAL = ["append_many", "append_message", "clear_agent_attribution", "cleanup_stale", "compact",
           "count_agent_attribution", "delete_session_owned", "durability", "get_messages", "get_session_agent_alias",
           "get_session_name", "get_session_state", "list_running_sessions", "list_sessions_with_metadata",
           "list_stuck_sessions", "load", "load_with_timestamps", "page", "rename_agent_attribution",
           "replace_conversation_state", "replace_conversation_state_if_exists", "rewrite_messages", "search",
           "set_session_agent_alias", "set_session_context", "set_session_name", "set_session_principal",
           "set_session_state", "set_session_trim_breadcrumb", "try_load", "update_last"]


@pytest.mark.parametrize("store", _stores(), ids=lambda cls: cls.__name__)
def test_the_backend_neutral_methods_are_defined_once_on_base_store(store: type) -> None:
    assert issubclass(store, BaseStore)
    for name in NEUTRAL:
        assert _defined_on(store, name) is BaseStore, f"{store.__name__}.{name} is defined again"
