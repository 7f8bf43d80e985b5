"""JsonlHistoryProvider against the real Microsoft Agent Framework (agent-framework-core):
a Hypothesis comparison with the framework's own ``FileHistoryProvider`` as the reference
model (saves with replayed prefixes and repeated turns, reads, ``skip_excluded``), an
``Agent`` with a scripted chat client (no model) whose history survives a new provider
object, SIGKILL in the middle of saves (fsync mode, checked against the worker's
acknowledgements), several processes saving to one session, and values with no JSON form.

Workers: tests/integrations/agent_framework_worker.py.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import signal
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from _sdk import require

require("agent_framework")  # skips without the test-integrations extra (fails in CI)

from agent_framework import Agent, BaseChatClient, ChatResponse, FileHistoryProvider, Message
from agent_framework_worker import turn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from missing_package import assert_missing_framework_error
from sigkill import kill_after, run_workers

from jsonl_sessions import SerializationError
from jsonl_sessions.integrations import agent_framework as adapter
from jsonl_sessions.integrations.agent_framework import JsonlHistoryProvider

SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"
WORKER = str(pathlib.Path(__file__).with_name("agent_framework_worker.py"))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def file_history(path: pathlib.Path, **options: Any) -> FileHistoryProvider:
    with warnings.catch_warnings():  # it is marked experimental
        warnings.simplefilter("ignore")
        return FileHistoryProvider(path, **options)


# -- FileHistoryProvider as the reference model -----------------------------------------------------
POOL = [Message(role="user", contents=["hi"]), Message(role="assistant", contents=["hello"]),
        Message(role="user", contents=["hi"], message_id="m1"), Message(role="assistant", contents=["ok"], message_id="m2"),
        Message(role="tool", contents=["42"], additional_properties={"_excluded": True}),
        Message(role="system", contents=["be brief"])]
sessions = st.sampled_from([None, "s1", "s/2"])
op = st.one_of(
    st.tuples(st.just("save"), sessions, st.lists(st.sampled_from(range(len(POOL))), min_size=1, max_size=4)),
    st.tuples(st.just("replay"), sessions, st.lists(st.sampled_from(range(len(POOL))), max_size=2)),
    st.tuples(st.just("get"), sessions),
)


async def _observe(provider: Any, step: tuple[Any, ...]) -> Any:
    kind, session, *rest = step
    if kind == "get":
        return [m.to_dict() for m in await provider.get_messages(session)]
    if kind == "save":
        await provider.save_messages(session, [POOL[n] for n in rest[0]])
    else:  # the whole stored history again, plus new messages: what a full-transcript client sends
        await provider.save_messages(session, [*await provider.get_messages(session), *(POOL[n] for n in rest[0])])
    return None


@settings(max_examples=400 if SOAK else 40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(op, max_size=15), skip=st.booleans())
def test_agrees_with_file_history_provider(tmp_path_factory: pytest.TempPathFactory, steps: list[Any], skip: bool) -> None:
    root = tmp_path_factory.mktemp("dirs")

    async def main() -> None:
        model = file_history(root / "model", skip_excluded=skip)
        ours = JsonlHistoryProvider(root / "store", durability="flush", skip_excluded=skip)
        for step in steps:
            assert await _observe(ours, step) == await _observe(model, step), step
        reopened = JsonlHistoryProvider(root / "store", skip_excluded=skip)
        for session in (None, "s1", "s/2"):
            assert ([m.to_dict() for m in await reopened.get_messages(session)]
                    == [m.to_dict() for m in await model.get_messages(session)])

    run(main())


# -- messages -----------------------------------------------------------------------------------------
def test_messages_round_trip_and_read_as_text(tmp_path: pathlib.Path) -> None:
    history = JsonlHistoryProvider(tmp_path / "store", durability="flush")
    call = Message(role="assistant", contents=[{"type": "function_call", "call_id": "c1", "name": "add",
                                                 "arguments": {"a": 1, "b": [2, None]}}], author_name="calc")
    said = [Message(role="user", contents=["こんにちは 😊"], message_id="u1"), call,
            Message(role="tool", contents=[{"type": "function_result", "call_id": "c1", "result": 3}])]
    run(history.save_messages("s", said))
    got = run(history.get_messages("s"))
    assert [m.to_dict() for m in got] == [m.to_dict() for m in said]
    lines = history.store.load("agent-framework/s")
    assert [(m.role, m.content) for m in lines] == [("user", "こんにちは 😊"), ("assistant", None), ("tool", None)]
    history.store.append("agent-framework/s", {"role": "user", "content": "from elsewhere"})  # a line of other code
    assert run(history.get_messages("s"))[-1].text == "from elsewhere"


def test_bad_messages_raise_and_write_nothing(tmp_path: pathlib.Path) -> None:
    history = JsonlHistoryProvider(tmp_path / "store", durability="flush")
    run(history.save_messages("s", [Message(role="user", contents=["kept"])]))
    bad = Message(role="assistant", contents=[{"type": "function_call", "call_id": "c", "name": "f",
                                                "arguments": {"handle": float("nan")}}])
    with pytest.raises(SerializationError):
        run(history.save_messages("s", [Message(role="user", contents=["new"]), bad]))
    with pytest.raises(TypeError):
        run(history.save_messages("s", [{"role": "user", "contents": ["a dict"]}]))  # type: ignore[list-item]
    assert [m.text for m in run(history.get_messages("s"))] == ["kept"]


# -- an Agent with a scripted client ---------------------------------------------------------------
class Scripted(BaseChatClient):  # type: ignore[type-arg]
    """Answers with how many messages it was sent (no model, no network)."""

    async def _get(self, messages: Sequence[Message]) -> ChatResponse:
        return ChatResponse(messages=[Message(role="assistant", contents=[f"I saw {len(messages)} messages"])])

    def _inner_get_response(self, *, messages: Sequence[Message], stream: bool, options: Mapping[str, Any],
                            **kwargs: Any) -> Any:
        return self._get(messages)


def test_an_agent_keeps_its_history_across_provider_objects(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"

    async def ask(text: str) -> str:
        agent = Agent(client=Scripted(), context_providers=[JsonlHistoryProvider(root, durability="flush")])
        response = await agent.run(text, session=agent.create_session(session_id="chat"))
        return response.text

    async def main() -> None:
        assert await ask("hi") == "I saw 1 messages"
        assert await ask("again") == "I saw 3 messages"  # the first turn came back from the files
        got = await JsonlHistoryProvider(root).get_messages("chat")
        assert [m.text for m in got] == ["hi", "I saw 1 messages", "again", "I saw 3 messages"]

    run(main())


# -- SIGKILL and processes --------------------------------------------------------------------------
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.parametrize("trial", range(10 if SOAK else 1))
def test_sigkill_while_saving_loses_no_acknowledged_message(tmp_path: pathlib.Path, trial: int) -> None:
    root, rng = str(tmp_path / "store"), random.Random(trial)
    acked = kill_after([WORKER, "save", root], rng.randint(5, 40), rng)
    got = [m.to_dict() for m in run(JsonlHistoryProvider(root).get_messages("crash"))]
    whole = [[m.to_dict() for n in range(k) for m in turn(n)] for k in (acked + 1, acked + 2)]
    assert got in whole  # every acknowledged save, in order; the one in flight whole or not at all


def test_processes_saving_to_one_session_lose_nothing(tmp_path: pathlib.Path) -> None:
    root, count, names = str(tmp_path / "store"), 25, ["p0", "p1"]
    run_workers([[WORKER, "concurrent", root, name, str(count)] for name in names])
    got = run(JsonlHistoryProvider(root).get_messages("shared"))
    for name in names:  # every message of each writer, in its order
        assert [m.message_id for m in got if m.message_id and m.message_id.startswith(name)] == [
            f"{name}-q{n}" for n in range(count)]
    assert len(got) == count * len(names)


# -- packaging --------------------------------------------------------------------------------------
def test_missing_agent_framework_gives_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    assert_missing_framework_error(monkeypatch, "agent_framework", adapter, "agent-framework")
