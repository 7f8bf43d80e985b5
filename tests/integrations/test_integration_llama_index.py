"""JsonlChatStore against the real llama-index-core: a Hypothesis comparison with
llama-index's own ``SimpleChatStore`` as the reference model (every method, sync and
async), lossless messages (blocks, images, additional kwargs), ``ChatMemoryBuffer`` on top,
SIGKILL in the middle of adds (fsync mode, checked against the worker's
acknowledgements), several processes adding to one chat, and values with no JSON form.

Workers: tests/integrations/llama_index_worker.py.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import signal
from typing import Any

import pytest
from _sdk import require

require("llama_index.core")  # skips without the test-integrations extra (fails in CI)

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.base.llms.types import ImageBlock, TextBlock
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.storage.chat_store import SimpleChatStore
from llama_index_worker import message
from missing_package import assert_missing_framework_error
from sigkill import kill_after, run_workers

from jsonl_sessions import SerializationError
from jsonl_sessions.integrations import llama_index as adapter
from jsonl_sessions.integrations.llama_index import JsonlChatStore

SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"
WORKER = str(pathlib.Path(__file__).with_name("llama_index_worker.py"))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def chats(tmp_path: pathlib.Path) -> JsonlChatStore:
    return JsonlChatStore(tmp_path / "store", durability="flush")


# -- SimpleChatStore as the reference model -----------------------------------------------------------
KEYS = ["a", "b/c"]
msg = st.builds(lambda role, text, n: ChatMessage(role=role, content=text, additional_kwargs={"n": n} if n else {}),
                st.sampled_from(["user", "assistant", "system", "tool"]), st.text(max_size=5), st.integers(0, 3))
key = st.sampled_from(KEYS)
op = st.one_of(
    st.tuples(st.just("set_messages"), key, st.lists(msg, max_size=3)),
    st.tuples(st.just("add_message"), key, msg),
    st.tuples(st.just("add_message"), key, msg, st.integers(-4, 4)),
    st.tuples(st.just("add_message"), key, msg, st.integers(-4, 4)),  # inserts: where edits go wrong
    st.tuples(st.just("get_messages"), key),
    st.tuples(st.just("delete_messages"), key),
    st.tuples(st.just("delete_message"), key, st.integers(-4, 4)),
    st.tuples(st.just("delete_last_message"), key),
    st.tuples(st.just("get_keys")),
)
ASYNC = {"set_messages": "aset_messages", "add_message": "async_add_message", "get_messages": "aget_messages",
         "delete_messages": "adelete_messages", "delete_message": "adelete_message",
         "delete_last_message": "adelete_last_message", "get_keys": "aget_keys"}


def _observe(store: Any, step: tuple[Any, ...], use_async: bool) -> Any:
    name, *args = step
    if name == "delete_last_message" and isinstance(store, SimpleChatStore) and store.store.get(args[0]) == []:
        return None  # SimpleChatStore raises IndexError for an empty chat; ours returns None (documented)
    if name == "delete_message" and isinstance(store, SimpleChatStore) and args[1] < -len(store.store.get(args[0], [])):
        return None  # a list raises IndexError there; ours returns None (documented)
    result = run(getattr(store, ASYNC[name])(*args)) if use_async else getattr(store, name)(*args)
    return sorted(result) if name == "get_keys" else result


@settings(max_examples=500 if SOAK else 50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(op, st.booleans()), max_size=25))
def test_agrees_with_simple_chat_store(tmp_path_factory: pytest.TempPathFactory, steps: list[Any]) -> None:
    root = tmp_path_factory.mktemp("store")
    model, ours = SimpleChatStore(), JsonlChatStore(root, durability="flush")
    for step, use_async in steps:
        assert _observe(ours, step, use_async) == _observe(model, step, False), step
    reopened = JsonlChatStore(root)  # nothing lives in the object
    assert sorted(reopened.get_keys()) == sorted(model.get_keys())
    for k in KEYS:
        assert reopened.get_messages(k) == model.get_messages(k)


# -- messages -------------------------------------------------------------------------------------------
def test_messages_round_trip_exactly_and_read_as_text(chats: JsonlChatStore) -> None:
    rich = ChatMessage(role="user", blocks=[TextBlock(text="look at this"),
                                            ImageBlock(image=b"\xff\x00\x89PNG", image_mimetype="image/png")],
                       additional_kwargs={"tool_calls": [{"id": "c1", "args": {"a": [1, None]}}]})
    plain = ChatMessage(role="assistant", content="こんにちは 😊")
    chats.set_messages("k", [rich, plain])
    assert chats.get_messages("k") == [rich, plain]
    lines = chats.store.load("llamaindex/k")
    assert [(m.role, m.content) for m in lines] == [("user", "look at this"), ("assistant", "こんにちは 😊")]
    chats.store.append("llamaindex/k", {"role": "user", "content": "from elsewhere"})  # a line of other code
    assert chats.get_messages("k")[-1] == ChatMessage(role="user", content="from elsewhere")


def test_bad_messages_raise_and_write_nothing(chats: JsonlChatStore) -> None:
    chats.add_message("k", ChatMessage(role="user", content="kept"))
    bad = ChatMessage(role="user", content="x", additional_kwargs={"handle": object()})
    for call in (lambda: chats.add_message("k", bad), lambda: chats.add_message("k", bad, idx=0),
                 lambda: chats.set_messages("k", [ChatMessage(role="user", content="y"), bad]),
                 lambda: run(chats.async_add_message("k", bad))):
        with pytest.raises(SerializationError):
            call()
    with pytest.raises(TypeError):
        chats.add_message("k", {"role": "user", "content": "a dict"})  # type: ignore[arg-type]
    assert chats.get_messages("k") == [ChatMessage(role="user", content="kept")]
    assert chats.get_keys() == ["k"]


def test_chat_memory_buffer_keeps_the_conversation(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    memory = ChatMemoryBuffer.from_defaults(chat_store=JsonlChatStore(root, durability="flush"), chat_store_key="u1")
    memory.put(ChatMessage(role="user", content="hi"))
    memory.put(ChatMessage(role="assistant", content="hello"))
    again = ChatMemoryBuffer.from_defaults(chat_store=JsonlChatStore(root), chat_store_key="u1")
    assert [m.content for m in again.get_all()] == ["hi", "hello"]
    again.reset()
    assert JsonlChatStore(root).get_messages("u1") == []


def test_insert_keeps_earlier_ids_and_orders_the_rest(chats: JsonlChatStore) -> None:
    for n in range(3):
        chats.add_message("k", ChatMessage(role="user", content=str(n)))
    before = chats.store.load("llamaindex/k")
    chats.add_message("k", ChatMessage(role="user", content="new"), idx=1)
    after = chats.store.load("llamaindex/k")
    assert [m.content for m in after] == ["0", "new", "1", "2"]
    assert after[0] == before[0]  # untouched: same id and time
    assert [m.id for m in after] == sorted(m.id for m in after)  # ids still increase through the file


# -- SIGKILL and processes --------------------------------------------------------------------------
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.parametrize("trial", range(10 if SOAK else 1))
def test_sigkill_while_adding_loses_no_acknowledged_message(tmp_path: pathlib.Path, trial: int) -> None:
    root, rng = str(tmp_path / "store"), random.Random(trial)
    acked = kill_after([WORKER, "add", root], rng.randint(5, 40), rng)
    got = JsonlChatStore(root).get_messages("crash")
    assert got in ([message(n) for n in range(acked + 1)], [message(n) for n in range(acked + 2)])


def test_processes_adding_to_one_chat_lose_nothing(tmp_path: pathlib.Path) -> None:
    root, count, names = str(tmp_path / "store"), 30, ["p0", "p1"]
    run_workers([[WORKER, "concurrent", root, name, str(count)] for name in names])
    got = JsonlChatStore(root).get_messages("shared")
    for name in names:  # every message of each writer, in its order
        assert [m for m in got if m.additional_kwargs["name"] == name] == [message(n, name) for n in range(count)]
    assert len(got) == count * len(names)


# -- packaging --------------------------------------------------------------------------------------
def test_missing_llama_index_gives_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    assert_missing_framework_error(monkeypatch, "llama_index", adapter, "llama-index")
