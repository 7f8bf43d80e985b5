"""JsonlChatMessageHistory against the real langchain-core: BaseChatMessageHistory's
contract, lossless messages of every type, RunnableWithMessageHistory with a fake chat
model (no network), concurrency from many coroutines and from several processes, a SIGKILL
in the middle of writing, and the missing-package error.

Worker modes (this file run as a script): ``crash ROOT`` adds batches of 1-3 messages in a
loop (fsync mode) and prints each batch's number once ``add_messages`` returned; ``writer
ROOT W N GO`` waits for file GO, adds N pairs of writer W's messages and prints ``done``.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import pathlib
import random
import signal
import subprocess
import sys
import time
import warnings
from typing import Any

import pytest
from _child import child_env
from _sdk import require
from sigkill import kill_after

require("langchain_core")  # skips without the test-integrations extra (fails in CI)

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
)
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from jsonl_sessions import (
    AsyncSessionStore,
    CorruptTranscriptError,
    InvalidSessionKeyError,
    SerializationError,
    SessionQuery,
    SessionStore,
)
from jsonl_sessions import ChatMessage as StoreMessage
from jsonl_sessions.integrations import langchain as adapter
from jsonl_sessions.integrations.langchain import JsonlChatMessageHistory
from jsonl_sessions.keys import key_to_stem

KEY = "chat"
STORE_KEY = f"langchain/{KEY}"  # the history's key in the store: the framework's namespace, then the id
FILE = f"{key_to_stem(STORE_KEY)}.jsonl"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def root(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "store"


@pytest.fixture
def history(root: pathlib.Path) -> JsonlChatMessageHistory:
    return JsonlChatMessageHistory(KEY, root, durability="flush")


MESSAGES: list[BaseMessage] = [
    SystemMessage("You are terse.", id="sys-1"),
    HumanMessage("What is 2 + 3? こんにちは 😊", name="bob", additional_kwargs={"x": [1, 2.5, None]}),
    HumanMessage([{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:x"}}]),
    AIMessage(
        "",
        id="run-1",
        tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "call_1", "type": "tool_call"}],
        invalid_tool_calls=[{"name": "bad", "args": "{oops", "id": "call_x", "error": "not JSON",
                             "type": "invalid_tool_call"}],
        additional_kwargs={"tool_calls": [{"id": "call_1", "type": "function",
                                           "function": {"name": "add", "arguments": "{\"a\":2,\"b\":3}"}}]},
        response_metadata={"model_name": "fake", "finish_reason": "tool_calls"},
        usage_metadata={"input_tokens": 10, "output_tokens": 2, "total_tokens": 12},
    ),
    ToolMessage("5", tool_call_id="call_1", name="add", artifact={"raw": [5]}),
    ToolMessage("boom", tool_call_id="call_x", status="error"),
    FunctionMessage("legacy", name="old_fn"),
    AIMessage([{"type": "text", "text": "The answer is 5."}], name="helper"),
    ChatMessage("I object", role="critic"),
    AIMessageChunk("partial", id="run-2", tool_call_chunks=[{"name": "f", "args": "{}", "id": "c", "index": 0,
                                                             "type": "tool_call_chunk"}]),
]


# -- the contract -----------------------------------------------------------------------------
def test_is_a_chat_message_history(history: JsonlChatMessageHistory) -> None:
    assert isinstance(history, BaseChatMessageHistory)
    assert history.session_id == KEY
    assert history.messages == []
    assert repr(history) == f"JsonlChatMessageHistory({KEY!r}, {history.store.root!r})"


def test_add_read_clear(history: JsonlChatMessageHistory) -> None:
    history.add_messages([HumanMessage("hi"), AIMessage("hello")])
    history.add_user_message("more")  # the base class's conveniences go through add_messages
    history.add_ai_message("sure")
    assert [(m.type, m.content) for m in history.messages] == [("human", "hi"), ("ai", "hello"), ("human", "more"),
                                                               ("ai", "sure")]
    history.clear()
    assert history.messages == []
    assert history.store.session_exists(STORE_KEY)  # cleared, not deleted: the metadata stays
    history.add_messages([])
    assert history.messages == []


def test_async_methods(history: JsonlChatMessageHistory) -> None:
    async def main() -> None:
        assert await history.aget_messages() == []
        await history.aadd_messages([HumanMessage("a"), AIMessage("b")])
        await history.aadd_messages([])
        assert [m.content for m in await history.aget_messages()] == ["a", "b"]
        await history.aclear()
        assert await history.aget_messages() == []

    run(main())


def test_histories_are_isolated(root: pathlib.Path) -> None:
    one, two = JsonlChatMessageHistory("one", root), JsonlChatMessageHistory("two", root)
    one.add_messages([HumanMessage("for one")])
    two.add_messages([HumanMessage("for two")])
    one.clear()
    assert one.messages == [] and [m.content for m in two.messages] == ["for two"]


# -- lossless messages ------------------------------------------------------------------------
def test_every_message_type_and_field_round_trips(root: pathlib.Path) -> None:
    history = JsonlChatMessageHistory(KEY, root)
    history.add_messages(MESSAGES[:4])
    run(history.aadd_messages(MESSAGES[4:]))
    for got in (history.messages, JsonlChatMessageHistory(KEY, SessionStore(root)).messages):  # a fresh store too
        assert got == MESSAGES
        assert [type(m) for m in got] == [type(m) for m in MESSAGES]
        assert [message_to_dict(m) for m in got] == [message_to_dict(m) for m in MESSAGES]


def test_transcript_lines_are_readable_and_searchable(root: pathlib.Path) -> None:
    store = SessionStore(root, durability="flush")
    JsonlChatMessageHistory(KEY, store).add_messages(MESSAGES)
    lines = store.try_load(STORE_KEY)
    assert [m.role for m in lines] == ["system", "user", "user", "assistant", "tool", "tool", "function", "assistant",
                                       "critic", "assistant"]
    assert lines[1].content == "What is 2 + 3? こんにちは 😊"
    assert lines[3].extra["langchain"]["type"] == "ai"
    assert lines[3].extra["langchain"]["data"]["tool_calls"][0]["id"] == "call_1"
    assert all("content" not in m.extra["langchain"]["data"] for m in lines)  # stored once, as the line's content
    assert [s.key for s in store.search(SessionQuery("answer is 5"))] == [STORE_KEY]


def test_lines_written_by_other_code_read_by_role(history: JsonlChatMessageHistory) -> None:
    store = history.store
    store.append_many(STORE_KEY, [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": None},
        StoreMessage("tool", "42", extra={"tool_call_id": "c1"}),
        {"role": "narrator", "content": {"type": "text", "text": "once"}},
    ])
    assert history.messages == [SystemMessage("s"), HumanMessage("u"), AIMessage(""),
                                ToolMessage("42", tool_call_id="c1"),
                                ChatMessage([{"type": "text", "text": "once"}], role="narrator")]


def test_bad_messages_write_nothing(history: JsonlChatMessageHistory) -> None:
    history.add_messages([HumanMessage("kept")])
    with pytest.raises(TypeError):
        history.add_messages([HumanMessage("ok"), "not a message"])  # type: ignore[list-item]
    with pytest.raises(SerializationError):
        history.add_messages([HumanMessage("ok"), HumanMessage("x", additional_kwargs={"obj": object()})])
    with pytest.raises(SerializationError):
        run(history.aadd_messages([HumanMessage("ok"), AIMessage("x", response_metadata={"v": float("inf")})]))
    assert history.messages == [HumanMessage("kept")]  # the batches were all or nothing


def test_store_argument_forms(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SessionStore(tmp_path / "a", durability="flush")
    assert JsonlChatMessageHistory(KEY, store).store is store
    assert JsonlChatMessageHistory(KEY, AsyncSessionStore.wrapping(store)).store is store
    assert JsonlChatMessageHistory(KEY, tmp_path / "b", durability="flush").store.durability == "flush"
    monkeypatch.setenv("JSONL_SESSIONS_ROOT", str(tmp_path / "default"))  # no store: the command line's
    JsonlChatMessageHistory(KEY).add_messages([HumanMessage("x")])
    assert os.path.isfile(tmp_path / "default" / FILE)
    with pytest.raises(TypeError):
        JsonlChatMessageHistory(KEY, store, lock_timeout=1.0)
    with pytest.raises(InvalidSessionKeyError):
        JsonlChatMessageHistory("", store)


def test_corrupt_lines_are_skipped_by_reads_and_refused_by_clear(history: JsonlChatMessageHistory) -> None:
    history.add_messages([HumanMessage("a")])
    path = pathlib.Path(history.store.root) / FILE
    with open(path, "ab") as f:
        f.write(b"[1, 2]\n")
    history.add_messages([AIMessage("b")])
    assert [m.content for m in history.messages] == ["a", "b"]
    before = path.read_bytes()
    with pytest.raises(CorruptTranscriptError):
        history.clear()
    with pytest.raises(CorruptTranscriptError):
        run(history.aclear())
    assert path.read_bytes() == before


# -- with a chain -------------------------------------------------------------------------------
def test_runnable_with_message_history_persists_and_replays(root: pathlib.Path) -> None:
    seen: list[list[BaseMessage]] = []

    def record(messages: list[BaseMessage]) -> list[BaseMessage]:
        seen.append(list(messages))
        return messages

    model = FakeListChatModel(responses=["Paris", "About 2.1 million"])
    with warnings.catch_warnings():  # langchain-core >= 1.3.3 deprecates the class; it still works
        warnings.simplefilter("ignore", DeprecationWarning)
        chain = RunnableWithMessageHistory(RunnableLambda(record) | model,
                                           lambda session_id: JsonlChatMessageHistory(session_id, root))
    config: Any = {"configurable": {"session_id": "user-1"}}
    assert chain.invoke("Capital of France?", config=config).content == "Paris"
    reply = run(chain.ainvoke("Population?", config=config))
    assert reply.content == "About 2.1 million"
    assert [m.content for m in seen[1]] == ["Capital of France?", "Paris", "Population?"]  # history replayed
    stored = JsonlChatMessageHistory("user-1", SessionStore(root)).messages  # as a new process would see it
    assert [(m.type, m.content) for m in stored] == [("human", "Capital of France?"), ("ai", "Paris"),
                                                     ("human", "Population?"), ("ai", "About 2.1 million")]
    assert stored[1].id is not None and stored[3].id is not None  # the model's message ids are kept
    assert JsonlChatMessageHistory("user-2", root).messages == []


# -- concurrency --------------------------------------------------------------------------------
def test_many_coroutines_adding_at_once_lose_and_duplicate_nothing(root: pathlib.Path) -> None:
    async def main() -> None:
        histories = [JsonlChatMessageHistory(KEY, root, durability="flush") for _ in range(3)]
        await asyncio.gather(*(histories[n % 3].aadd_messages([HumanMessage(f"{n}?"), AIMessage(f"{n}!")])
                               for n in range(60)))
        got = await histories[0].aget_messages()
        assert sorted(str(m.content) for m in got) == sorted(f"{n}{x}" for n in range(60) for x in "?!")
        for question, answer in zip(got[::2], got[1::2]):  # each batch stayed in one piece, in order
            assert isinstance(question, HumanMessage) and isinstance(answer, AIMessage)
            assert str(question.content)[:-1] == str(answer.content)[:-1]

    run(main())


def test_a_cancelled_add_still_completes_before_the_cancellation(history: JsonlChatMessageHistory) -> None:
    async def main() -> None:
        task = asyncio.create_task(history.aadd_messages([HumanMessage("x"), AIMessage("y")]))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert [m.content for m in await history.aget_messages()] == ["x", "y"]

    run(main())


# -- SIGKILL --------------------------------------------------------------------------------------
def batch_of(n: int) -> list[BaseMessage]:
    kinds = [HumanMessage(f"{n}.q"), AIMessage(f"{n}.a", tool_calls=[{"name": "f", "args": {"n": n}, "id": f"c{n}"}]),
             ToolMessage(f"{n}.t", tool_call_id=f"c{n}")]
    return kinds[: n % 3 + 1]


def worker(root: str) -> None:
    history = JsonlChatMessageHistory("crash", root)  # fsync: acknowledged means on disk
    n = 0
    while True:
        history.add_messages(batch_of(n))
        sys.stdout.write(f"{n}\n")
        sys.stdout.flush()
        n += 1


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.parametrize("trial", range(3))
def test_sigkill_while_adding_loses_no_acknowledged_message(tmp_path: pathlib.Path, trial: int) -> None:
    root = str(tmp_path / "store")
    rng = random.Random(trial)
    want = rng.randint(5, 40)
    acked = kill_after([__file__, "crash", root], want, rng, jitter=0.01)  # at a random point in a later write
    got = JsonlChatMessageHistory("crash", root).messages
    whole = [[m for n in range(k) for m in batch_of(n)] for k in (acked + 1, acked + 2)]
    assert got in whole  # every acknowledged batch, in order; the one in flight whole or not at all


# -- several processes ----------------------------------------------------------------------------
def writer_worker(root: str, writer: int, batches: int, go: str) -> None:
    history = JsonlChatMessageHistory("shared", root, durability="flush")  # the guard, not fsync, is under test
    while not os.path.exists(go):
        time.sleep(0.001)
    for n in range(batches):
        history.add_messages([HumanMessage(f"{writer}.{n}.q"), AIMessage(f"{writer}.{n}.a")])
    print("done", flush=True)


def test_processes_adding_to_one_history_lose_and_duplicate_nothing(tmp_path: pathlib.Path) -> None:
    root, go = str(tmp_path / "store"), str(tmp_path / "go")
    writers, batches = 2, 15
    procs = [subprocess.Popen([sys.executable, __file__, "writer", root, str(w), str(batches), go],
                              stdout=subprocess.PIPE, text=True, env=child_env()) for w in range(writers)]
    pathlib.Path(go).touch()
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out.strip() == "done"
    got = [m.content for m in JsonlChatMessageHistory("shared", root).messages]
    assert len(got) == writers * batches * 2
    for w in range(writers):  # each writer's messages once, in its order, each pair together
        assert [c for c in got if c.startswith(f"{w}.")] == [f"{w}.{n}.{x}" for n in range(batches) for x in "qa"]
        for n in range(batches):
            at = got.index(f"{w}.{n}.q")
            assert got[at + 1] == f"{w}.{n}.a"


# -- packaging --------------------------------------------------------------------------------------
def test_missing_langchain_gives_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(sys.modules):
        if name == "langchain_core" or name.startswith("langchain_core."):
            monkeypatch.setitem(sys.modules, name, None)  # type: ignore[arg-type]
    monkeypatch.delitem(sys.modules, "jsonl_sessions.integrations.langchain")
    with pytest.raises(ImportError, match=r"pip install 'jsonl-sessions\[langchain\]'"):
        importlib.import_module("jsonl_sessions.integrations.langchain")
    monkeypatch.undo()
    assert importlib.import_module("jsonl_sessions.integrations.langchain") is adapter


if __name__ == "__main__":
    if sys.argv[1] == "crash":
        worker(sys.argv[2])
    else:
        writer_worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
