"""The SQLite backend behind everything typed against the backend contract: the protocol
itself (same signatures as the JSONL store), the async facade, and both SDK adapters
(openai-agents ``Runner`` turns with a tool call; a LangChain history), unchanged."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest
from _backends import assert_database_backend
from _sdk import require

from jsonl_sessions import AsyncSessionStore, SessionStore
from jsonl_sessions.sqlite import SqliteSessionStore


def test_the_sqlite_store_is_a_backend_with_the_contracts_signatures(tmp_path: pathlib.Path) -> None:
    with SqliteSessionStore(tmp_path / "s.db") as store:  # the protocol is checked by mypy too (sqlite/store.py)
        assert_database_backend(SqliteSessionStore, store)
    with pytest.raises(ValueError, match="closed"):
        store.load("k")
    store.close()  # idempotent


def test_async_facade_over_sqlite(tmp_path: pathlib.Path) -> None:
    async def scenario() -> list[Any]:
        astore = AsyncSessionStore.wrapping(SqliteSessionStore(tmp_path / "s.db"))
        ids = await asyncio.gather(*(astore.append("k", {"role": "user", "content": i}) for i in range(20)))
        assert sorted(ids) == [m.id for m in await astore.load("k")]
        page = await astore.page("k", limit=5)
        assert len(page.messages) == 5 and page.has_more
        await astore.set_session_name("k", "twenty")
        md = await astore.get_session_metadata("k")
        assert md.name == "twenty" and md.message_count == 20
        await astore.aclose()
        return sorted(m.content for m in SqliteSessionStore(tmp_path / "s.db").load("k"))

    assert asyncio.run(scenario()) == list(range(20))


def test_openai_agents_session_over_sqlite(tmp_path: pathlib.Path) -> None:
    require("agents")
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from jsonl_sessions.integrations.openai_agents import JsonlSession

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    model = ScriptedModel([[assistant_message("hello")], [function_call("add", {"a": 2, "b": 3}, call_id="c1")],
                           [assistant_message("5")]])
    agent = Agent(name="test", model=model, tools=[add])
    config = RunConfig(tracing_disabled=True)
    path = tmp_path / "s.db"

    async def main() -> None:
        session = JsonlSession("chat", SqliteSessionStore(path))
        assert (await Runner.run(agent, "hi", session=session, run_config=config)).final_output == "hello"
        assert (await Runner.run(agent, "2 + 3?", session=session, run_config=config)).final_output == "5"
        items = await JsonlSession("chat", SqliteSessionStore(path)).get_items()
        kinds = [i.get("type") or i.get("role") for i in items]
        assert kinds == ["user", "message", "user", "function_call", "function_call_output", "message"]
        assert model.last_call is not None and list(model.last_call.input) == items[:5]
        assert await session.get_item_count() == 6
        assert await session.pop_item() == items[-1]
        await session.clear_session()
        assert await session.get_items() == []
        model.assert_complete()

    asyncio.run(main())


def test_langchain_history_over_sqlite(tmp_path: pathlib.Path) -> None:
    require("langchain_core")
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from jsonl_sessions.integrations.langchain import JsonlChatMessageHistory

    path = tmp_path / "s.db"
    history = JsonlChatMessageHistory("chat", SqliteSessionStore(path))
    sent = [HumanMessage("hi"), AIMessage("", tool_calls=[{"name": "f", "args": {"x": 1}, "id": "t1"}]),
            ToolMessage("42", tool_call_id="t1")]
    history.add_messages(sent)
    again = JsonlChatMessageHistory("chat", SqliteSessionStore(path)).messages
    assert [type(m) for m in again] == [HumanMessage, AIMessage, ToolMessage]
    assert [m.content for m in again] == ["hi", "", "42"] and again[1].tool_calls[0]["id"] == "t1"
    # The same messages through the JSONL backend are stored as the same lines.
    jsonl = JsonlChatMessageHistory("chat", SessionStore(tmp_path / "jsonl"))
    jsonl.add_messages(sent)
    assert [m.to_dict() | {"id": "", "created_at": 0} for m in SqliteSessionStore(path).load("chat")] == [
        m.to_dict() | {"id": "", "created_at": 0} for m in SessionStore(tmp_path / "jsonl").load("chat")]
    history.clear()
    assert history.messages == []


def test_claude_agent_sdk_conformance_over_sqlite(tmp_path: pathlib.Path) -> None:
    """The Claude Agent SDK's own ``run_session_store_conformance``, unmodified, on a
    ``JsonlSessionStore`` whose backend is a SQLite file (one fresh file per contract)."""
    require("claude_agent_sdk")
    from claude_agent_sdk.testing import run_session_store_conformance

    from jsonl_sessions.integrations.claude_agent_sdk import JsonlSessionStore

    made: list[SqliteSessionStore] = []

    def make_store() -> JsonlSessionStore:
        made.append(SqliteSessionStore(tmp_path / f"s{len(made)}.db", durability="flush"))
        return JsonlSessionStore(made[-1])

    asyncio.run(run_session_store_conformance(make_store))
    assert len(made) > 10
    for store in made:
        assert store.verify().ok
        store.close()
