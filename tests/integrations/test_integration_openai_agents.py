"""JsonlSession against the real OpenAI Agents SDK: the Session protocol with the
behaviours of the SDK's own SQLiteSession tests, lossless items, concurrency from many
coroutines, a compare-and-remove pop, full ``Runner.run`` turns with the SDK's scripted
model (no network), a SIGKILL in the middle of writing, and the missing-package error.

The cases of the SDK's own session tests (tests/memory/test_session.py and
test_session_limit.py of openai-agents-python, which the wheel does not ship) are
re-stated here against JsonlSession: history across turns and across the three runner
methods, separate sessions, ``RunConfig(session_settings=...)`` limits (N, 0, None, more
than stored), list input appended, ``get_items(limit)`` and ``pop_item`` sequences, and a
limit that still counts valid items when a corrupt line is among the newest. The installed
SDK has ``session_settings`` but no ``turn_limit`` argument, so there is none here.

Worker modes (this file run as a script): ``crash ROOT`` adds batches of 1-3 items in a
loop (fsync mode) and prints each batch's number once ``add_items`` returned; ``writer
ROOT W N GO`` waits for file GO, adds N batches of writer W's items and prints ``done``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import pytest
from _child import child_env
from _sdk import require
from sigkill import kill_after

require("agents")  # skips without the test-integrations extra (fails in CI)

from agents import Agent, RunConfig, Runner, function_tool
from agents.memory import Session, SessionSettings, SQLiteSession
from agents.testing import ScriptedModel, assistant_message, function_call

from jsonl_sessions import (
    AsyncSessionStore,
    ChatMessage,
    CorruptTranscriptError,
    InvalidSessionKeyError,
    SerializationError,
    SessionQuery,
    SessionStore,
    _platform,
)
from jsonl_sessions.integrations import openai_agents
from jsonl_sessions.integrations.openai_agents import JsonlSession, item_to_message, message_to_item
from jsonl_sessions.keys import key_to_stem

KEY = "conv"
STORE_KEY = f"openai-agents/{KEY}"  # the session's key in the store: the framework's namespace, then the id
FILE = f"{key_to_stem(STORE_KEY)}.jsonl"
SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"  # more SIGKILL trials


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def root(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "store"


@pytest.fixture
def session(root: pathlib.Path) -> JsonlSession:
    return JsonlSession(KEY, root, durability="flush")


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def contents(items: list[Any]) -> list[Any]:
    return [item.get("content") for item in items]


# Every kind of item a run produces or a caller adds, with fields in the SDK's own order.
ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "Hello"},
    {"content": "content first", "role": "user"},
    {"role": "system", "content": "You are terse."},
    {"role": "developer", "content": [{"type": "input_text", "text": "Rules"}], "type": "message"},
    {
        "role": "user",
        "type": "message",
        "content": [
            {"type": "input_text", "text": "What is in this image? こんにちは 😊"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0K", "detail": "auto"},
            {"type": "input_file", "file_id": "file-123", "filename": "a.pdf"},
        ],
    },
    {
        "id": "msg_0123",
        "content": [{"annotations": [{"type": "url_citation", "url": "https://x", "start_index": 0, "end_index": 3,
                                      "title": "X"}], "text": "San Francisco", "type": "output_text", "logprobs": []},
                    {"type": "refusal", "refusal": "no"}],
        "role": "assistant",
        "status": "completed",
        "type": "message",
    },
    {"arguments": "{\"a\":2,\"b\":3}", "call_id": "call_1", "name": "add", "type": "function_call", "id": "fc_1",
     "status": "completed"},
    {"call_id": "call_1", "output": "5", "type": "function_call_output"},
    {"call_id": "call_2", "output": [{"type": "input_text", "text": "five"}], "type": "function_call_output",
     "id": "fco_2", "status": "incomplete"},
    {"id": "rs_1", "summary": [{"type": "summary_text", "text": "thinking about sums"}], "type": "reasoning",
     "encrypted_content": "gAAAAB...", "content": [{"type": "reasoning_text", "text": "2+3"}], "status": None},
    {"id": "rs_2", "summary": [], "type": "reasoning"},
    {"type": "compaction", "encrypted_content": "enc-summary", "id": "cmp_1"},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
    {"type": "item_reference", "id": "msg_0123"},
    {"role": "assistant", "content": None},
    {"type": "custom", "content": {"a": [1, 2.5, -0.0, True, False, None, "", 2**63 - 1, -(2**63)]},
     "kind": "not ours", "created_at": "2020", "id": "", "role": 7, "item": {"nested": "x"}, "content_at": 99},
]


# -- the protocol ----------------------------------------------------------------------------
def test_is_an_sdk_session(session: JsonlSession) -> None:
    assert isinstance(session, Session)  # the SDK's runtime-checkable protocol
    assert session.session_id == KEY
    assert session.session_settings == SessionSettings()
    for name in ("get_items", "add_items", "pop_item", "clear_session"):
        assert asyncio.iscoroutinefunction(getattr(session, name)), name
    assert repr(session) == f"JsonlSession({KEY!r}, {session.store.root!r})"


def test_add_get_clear_like_sqlite_session(session: JsonlSession) -> None:
    async def main() -> None:
        assert await session.get_items() == []
        await session.add_items([user("Hello"), {"role": "assistant", "content": "Hi there!"}])
        got = await session.get_items()
        assert [(i.get("role"), i.get("content")) for i in got] == [("user", "Hello"), ("assistant", "Hi there!")]
        await session.clear_session()
        assert await session.get_items() == []
        await session.add_items([user("after clear")])
        assert contents(await session.get_items()) == ["after clear"]

    run(main())


def test_pop_item_newest_first_and_none_when_empty(session: JsonlSession) -> None:
    async def main() -> None:
        assert await session.pop_item() is None
        assert not session.store.session_exists(STORE_KEY)  # popping never creates a session
        await session.add_items([user("Hello"), {"role": "assistant", "content": "Hi there!"}, user("How are you?")])
        assert await session.pop_item() == user("How are you?")
        assert contents(await session.get_items()) == ["Hello", "Hi there!"]
        assert await session.pop_item() == {"role": "assistant", "content": "Hi there!"}
        assert await session.pop_item() == user("Hello")
        assert await session.pop_item() is None
        assert await session.get_items() == []

    run(main())


def test_sessions_are_isolated(root: pathlib.Path) -> None:
    async def main() -> None:
        one, two = JsonlSession("session_1", root), JsonlSession("session_2", root)
        await one.add_items([user("Session 1 message")])
        await two.add_items([user("Session 2 message 1"), user("Session 2 message 2")])
        assert await two.pop_item() == user("Session 2 message 2")
        assert contents(await one.get_items()) == ["Session 1 message"]
        assert contents(await two.get_items()) == ["Session 2 message 1"]
        await one.clear_session()
        assert contents(await two.get_items()) == ["Session 2 message 1"]

    run(main())


def test_limit_returns_the_newest_in_chronological_order(session: JsonlSession) -> None:
    async def main() -> None:
        texts = ["Message 1", "Response 1", "Message 2", "Response 2", "Message 3", "Response 3"]
        await session.add_items([user(t) for t in texts])
        assert contents(await session.get_items()) == texts
        assert contents(await session.get_items(limit=2)) == texts[-2:]
        assert contents(await session.get_items(limit=4)) == texts[-4:]
        assert contents(await session.get_items(limit=10)) == texts
        assert await session.get_items(limit=0) == []
        assert contents(await session.get_items(limit=-1)) == texts  # SQLite's LIMIT -1: everything
        assert await JsonlSession("missing", session.store).get_items(limit=3) == []

    run(main())


def test_session_settings_limit_is_the_default(root: pathlib.Path) -> None:
    async def main() -> None:
        session = JsonlSession(KEY, root, session_settings={"limit": 2})
        assert session.session_settings == SessionSettings(limit=2)
        await session.add_items([user(str(i)) for i in range(5)])
        assert contents(await session.get_items()) == ["3", "4"]
        assert contents(await session.get_items(limit=3)) == ["2", "3", "4"]  # explicit wins
        typed = JsonlSession(KEY, root, session_settings=SessionSettings(limit=1))
        assert contents(await typed.get_items()) == ["4"]

    run(main())
    with pytest.raises(TypeError):
        JsonlSession(KEY, root, session_settings=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("settings", [
    {"limt": 2},  # a typo
    {"limit": 2, "turn_limit": 1},
    {"limit": "3"},  # coerced by pydantic, as the SDK does
    {"limit": "x"},
    {},
    3,
    MappingProxyType({"limit": 2}),  # a mapping that is not a dict
    SessionSettings(limit=4),
], ids=repr)
def test_session_settings_are_checked_as_the_sdk_sessions_check_them(root: pathlib.Path, settings: Any) -> None:
    def outcome(make: Callable[[], Any]) -> tuple[str, Any]:
        try:
            return "ok", make().session_settings
        except (TypeError, ValueError) as exc:  # the SDK's own error, type and message, is the reference
            return type(exc).__name__, str(exc)

    expected = outcome(lambda: SQLiteSession("s", session_settings=settings))
    assert outcome(lambda: JsonlSession(KEY, root, session_settings=settings)) == expected
    if expected[0] != "ok":
        assert not root.exists()  # a refused session created nothing


def test_limit_reads_a_page_from_the_end_not_the_whole_file(session: JsonlSession,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    big = "x" * 1000
    run(session.add_items([user(f"{i} {big}") for i in range(2000)]))
    size = os.path.getsize(os.path.join(session.store.root, FILE))
    read = [0]
    real_pread = _platform.pread

    def counting_pread(fd: int, n: int, offset: int) -> bytes:
        data = real_pread(fd, n, offset)
        read[0] += len(data)
        return data

    monkeypatch.setattr(_platform, "pread", counting_pread)
    got = run(session.get_items(limit=3))
    assert contents(got) == [f"{i} {big}" for i in (1997, 1998, 1999)]
    assert read[0] < size // 20  # a few lines' worth, not the 2 MB transcript
    read[0] = 0
    assert len(run(session.get_items())) == 2000
    assert read[0] >= size  # the counter does see a whole-file read


def test_unicode_and_special_characters(session: JsonlSession) -> None:
    texts = ["こんにちは", "😊👍", "Привет", "O'Reilly", "DROP TABLE sessions;", "Robert'); DROP TABLE students;--",
             "line\nbreak\r\n\x00nul", "\"quoted\" \\ back"]
    run(session.add_items([user(t) for t in texts]))
    assert contents(run(session.get_items())) == texts


# -- lossless items ------------------------------------------------------------------------------
def test_every_item_field_round_trips_in_order(root: pathlib.Path) -> None:
    async def main() -> None:
        session = JsonlSession(KEY, root, durability="flush")
        await session.add_items(ITEMS[:5])
        await session.add_items(ITEMS[5:])
        for got in (await session.get_items(), await JsonlSession(KEY, root).get_items()):  # also a fresh store
            assert got == ITEMS
            assert [list(g) for g in got] == [list(i) for i in ITEMS]  # key order too
        assert await session.get_items(limit=3) == ITEMS[-3:]
        popped = [await session.pop_item() for _ in ITEMS]
        assert popped == ITEMS[::-1]

    run(main())


def test_transcript_lines_are_readable_and_searchable(root: pathlib.Path) -> None:
    store = SessionStore(root, durability="flush")
    run(JsonlSession(KEY, store).add_items(ITEMS))
    lines = store.try_load(STORE_KEY)
    assert [m.role for m in lines[:7]] == ["user", "user", "system", "developer", "user", "assistant", "function_call"]
    assert [m.role for m in lines[7:12]] == ["function_call_output", "function_call_output", "reasoning", "reasoning",
                                            "compaction"]
    assert lines[-1].role == "custom"  # a non-str role falls back to the type
    assert [m.kind for m in lines].count("compaction") == 1 and lines[11].kind == "compaction"
    assert lines[5].content == ITEMS[5]["content"] and lines[5].extra["item"]["id"] == "msg_0123"
    assert all(len(m.id) == 26 for m in lines)  # the store's ULIDs, not the items' ids
    assert "content_at" not in lines[6].extra  # a function call has no content
    assert [s.key for s in store.search(SessionQuery("SAN FRANCISCO"))] == [STORE_KEY]
    assert store.page(STORE_KEY, limit=100, breakpoint=True).messages[0].kind == "compaction"
    with open(os.path.join(store.root, FILE), "rb") as f:
        first = json.loads(f.readline())
    assert first["role"] == "user" and first["content"] == "Hello" and first["item"] == {"role": "user"}


def test_arbitrary_json_items_round_trip(tmp_path: pathlib.Path) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
    scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | text | st.floats(
        allow_nan=False, allow_infinity=False)
    json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner,
                                                                                                   max_size=4),
                               max_leaves=12)
    items = st.lists(st.dictionaries(st.sampled_from(["content", "role", "type", "id", "item", "content_at", "kind"])
                                     | text, json_values, max_size=6), min_size=1, max_size=4)
    store = SessionStore(tmp_path / "h", durability="flush")
    counter = iter(range(10**9))

    @settings(max_examples=60, deadline=None)
    @given(items)
    def check(batch: list[dict[str, Any]]) -> None:
        for item in batch:
            back = message_to_item(item_to_message(item))
            assert back == item and list(back) == list(item)
        session = JsonlSession(f"h{next(counter)}", store)
        run(session.add_items(batch))  # type: ignore[arg-type]
        got = run(session.get_items())
        assert got == batch and [list(g) for g in got] == [list(i) for i in batch]

    check()


def test_lines_written_by_other_code_read_as_easy_messages(session: JsonlSession) -> None:
    session.store.append(STORE_KEY, {"role": "user", "content": "typed elsewhere"})
    session.store.append(STORE_KEY, ChatMessage("tool", "42", extra={"tool_call_id": "c1"}))
    assert run(session.get_items()) == [{"role": "user", "content": "typed elsewhere"},
                                        {"role": "tool", "content": "42", "tool_call_id": "c1"}]


def test_bad_items_write_nothing(session: JsonlSession) -> None:
    async def main() -> None:
        await session.add_items([])
        assert not session.store.session_exists(STORE_KEY)  # an empty add creates nothing
        await session.add_items([user("kept")])
        with pytest.raises(TypeError):
            await session.add_items([user("ok"), "not a dict"])  # type: ignore[list-item]
        with pytest.raises(SerializationError):
            await session.add_items([user("ok"), {"role": "user", "content": {1, 2}}])  # type: ignore[dict-item]
        with pytest.raises(SerializationError):
            await session.add_items([user("ok"), {"role": "user", "content": float("nan")}])
        assert await session.get_items() == [user("kept")]  # the batches were all or nothing

    run(main())


def test_store_argument_forms(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SessionStore(tmp_path / "a", durability="flush")
    assert JsonlSession(KEY, store).store is store
    astore = AsyncSessionStore.wrapping(store)
    assert JsonlSession(KEY, astore).store is store
    as_str = JsonlSession(KEY, str(tmp_path / "b"), durability="flush", lock_timeout=5.0)
    assert as_str.store.root == str(tmp_path / "b") and as_str.store.durability == "flush"
    monkeypatch.setenv("JSONL_SESSIONS_ROOT", str(tmp_path / "default"))  # no store: the command line's
    default = JsonlSession(KEY)
    run(default.add_items([user("x")]))
    assert os.path.isfile(tmp_path / "default" / FILE)
    with pytest.raises(TypeError):
        JsonlSession(KEY, store, durability="flush")  # options would be ignored
    with pytest.raises(TypeError):
        JsonlSession(KEY, 42)  # type: ignore[arg-type]
    for bad in ("", "a\x00b"):
        with pytest.raises(InvalidSessionKeyError):
            JsonlSession(bad, store)
    default.close()  # SQLiteSession's close: nothing to release, the session still works
    assert run(default.get_items()) == [user("x")]
    assert run(default.get_item_count()) == 1 and run(JsonlSession("none", store).get_item_count()) == 0


def test_corrupt_lines_are_skipped_by_reads_and_refused_by_destructive_writes(session: JsonlSession) -> None:
    run(session.add_items([user("a"), user("b")]))
    path = os.path.join(session.store.root, FILE)
    with open(path, "ab") as f:
        f.write(b"{not json}\n")
    assert contents(run(session.get_items())) == ["a", "b"]
    assert contents(run(session.get_items(limit=1))) == ["b"]  # the limit counts items, not lines
    before = pathlib.Path(path).read_bytes()
    with pytest.raises(CorruptTranscriptError):
        run(session.pop_item())
    with pytest.raises(CorruptTranscriptError):
        run(session.clear_session())
    assert pathlib.Path(path).read_bytes() == before


# -- concurrency ------------------------------------------------------------------------------------
def test_many_coroutines_adding_at_once_lose_and_duplicate_nothing(root: pathlib.Path) -> None:
    async def main() -> None:
        session = JsonlSession(KEY, root, durability="flush")
        await asyncio.gather(*(session.add_items([user(f"{n}a"), user(f"{n}b")]) for n in range(60)))
        got = contents(await session.get_items())
        assert sorted(got) == sorted(f"{n}{x}" for n in range(60) for x in "ab")
        for i in range(0, len(got), 2):  # each batch stayed in one piece
            assert got[i][:-1] == got[i + 1][:-1] and (got[i][-1], got[i + 1][-1]) == ("a", "b")

    run(main())


def test_many_coroutines_popping_at_once_each_get_a_different_item(root: pathlib.Path) -> None:
    async def main() -> None:
        session = JsonlSession(KEY, root, durability="flush")
        await session.add_items([user(str(i)) for i in range(50)])
        popped = await asyncio.gather(*(session.pop_item() for _ in range(60)))
        got = [p["content"] for p in popped if p is not None]
        assert sorted(got, key=int) == [str(i) for i in range(50)] and popped.count(None) == 10
        assert await session.get_items() == []

    run(main())


def test_adds_and_pops_from_two_session_objects_conserve_items(root: pathlib.Path) -> None:
    async def main() -> None:
        one = JsonlSession(KEY, root, durability="flush")
        two = JsonlSession(KEY, SessionStore(root, durability="flush"))  # another store object, same files
        await one.add_items([user(f"seed{i}") for i in range(20)])
        added = [f"new{i}" for i in range(40)]
        jobs: list[Any] = [(one if i % 2 else two).add_items([user(t)]) for i, t in enumerate(added)]
        jobs += [(two if i % 2 else one).pop_item() for i in range(30)]
        random.Random(1).shuffle(jobs)
        results = await asyncio.gather(*jobs)
        popped = [r["content"] for r in results if isinstance(r, dict)]
        left = contents(await one.get_items())
        assert len(popped) == len(set(popped))
        assert sorted(popped + left) == sorted([f"seed{i}" for i in range(20)] + added)

    run(main())


class _RacyStore(SessionStore):
    """Appends another item right after pop_item has read the newest one, once: the
    interleaving a concurrent writer (another process) can produce."""

    racing: dict[str, Any] | None = None

    def page(self, key: str, **kwargs: Any) -> Any:
        got = super().page(key, **kwargs)
        if self.racing is not None:
            item, self.racing = self.racing, None
            self.append(key, item_to_message(item))
        return got


def test_pop_never_removes_an_item_it_did_not_read(root: pathlib.Path) -> None:
    store = _RacyStore(root, durability="flush")
    session = JsonlSession(KEY, store)
    run(session.add_items([user("mine")]))
    store.racing = user("theirs")
    assert run(session.pop_item()) == user("theirs")  # the compare failed, it read again
    assert run(session.get_items()) == [user("mine")]


def test_a_cancelled_add_still_completes_before_the_cancellation(session: JsonlSession) -> None:
    async def main() -> None:
        task = asyncio.create_task(session.add_items([user("x"), user("y")]))
        await asyncio.sleep(0)  # running: the write is in a worker thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert contents(await session.get_items()) == ["x", "y"]  # known outcome: written whole

    run(main())


# -- full runs -------------------------------------------------------------------------------------
@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def test_runner_persists_every_turn(root: pathlib.Path) -> None:
    model = ScriptedModel([
        [assistant_message("San Francisco")],
        [function_call("add", {"a": 2, "b": 3}, call_id="call_1")],
        [assistant_message("5")],
        [assistant_message("cats")],
    ])
    agent = Agent(name="test", model=model, tools=[add])
    config = RunConfig(tracing_disabled=True)

    async def main() -> None:
        session = JsonlSession(KEY, root)
        first = await Runner.run(agent, "Where is the Golden Gate Bridge?", session=session, run_config=config)
        assert first.final_output == "San Francisco"
        second = await Runner.run(agent, "What is 2 + 3?", session=session, run_config=config)
        assert second.final_output == "5"
        # A fresh process would see the same history: open the store again.
        items = await JsonlSession(KEY, SessionStore(root)).get_items()
        kinds = [i.get("type") or i.get("role") for i in items]
        assert kinds == ["user", "message", "user", "function_call", "function_call_output", "message"]
        assert items[3]["call_id"] == items[4]["call_id"] == "call_1" and items[4]["output"] == "5"
        assert items[1]["content"][0]["text"] == "San Francisco" and items[5]["content"][0]["text"] == "5"
        # The model's last call (after the tool ran) got the whole history from the session.
        assert model.last_call is not None and list(model.last_call.input) == items[:5]
        # The session's default limit reaches the model: only the 3 newest items plus the new input.
        limited = JsonlSession(KEY, root, session_settings=SessionSettings(limit=3))
        third = await Runner.run(agent, "Pets?", session=limited, run_config=config)
        assert third.final_output == "cats"
        assert model.last_call is not None and list(model.last_call.input) == [*items[-3:], user("Pets?")]
        assert len(await session.get_items()) == 8
        model.assert_complete()

    run(main())


def test_runner_run_sync_and_streamed(root: pathlib.Path) -> None:
    model = ScriptedModel([[assistant_message("one")], [assistant_message("two")]])
    agent = Agent(name="test", model=model)
    config = RunConfig(tracing_disabled=True)
    session = JsonlSession(KEY, root)
    loop = asyncio.new_event_loop()  # run_sync uses the thread's default loop: ours, closed after
    asyncio.set_event_loop(loop)
    try:
        assert Runner.run_sync(agent, "first", session=session, run_config=config).final_output == "one"
    finally:
        asyncio.set_event_loop(None)
        loop.close()

    async def streamed() -> None:
        result = Runner.run_streamed(agent, "second", session=session, run_config=config)
        async for _event in result.stream_events():
            pass
        assert result.final_output == "two"

    run(streamed())
    assert [i.get("role") for i in run(session.get_items())] == ["user", "assistant", "user", "assistant"]


# -- the SDK's own session test cases, re-stated against JsonlSession ---------------------------------
RUNNERS = ["run", "run_sync", "run_streamed"]


async def run_with(method: str, agent: Agent[Any], text: Any, **kwargs: Any) -> Any:
    """One turn through ``Runner.run``, ``Runner.run_sync`` (in a thread with its own loop)
    or ``Runner.run_streamed`` (every event consumed)."""
    kwargs.setdefault("run_config", RunConfig(tracing_disabled=True))
    if method == "run":
        return await Runner.run(agent, text, **kwargs)
    if method == "run_sync":
        def in_thread() -> Any:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                return Runner.run_sync(agent, text, **kwargs)
            finally:
                asyncio.set_event_loop(None)
                loop.close()

        return await asyncio.to_thread(in_thread)
    result = Runner.run_streamed(agent, text, **kwargs)
    async for _event in result.stream_events():
        pass
    return result


def scripted(*replies: str) -> ScriptedModel:
    return ScriptedModel([[assistant_message(r)] for r in replies])


def model_input(model: ScriptedModel) -> list[Any]:
    assert model.last_call is not None
    return list(model.last_call.input)


def text_of(item: Any) -> Any:
    content = item.get("content")
    return content[0]["text"] if isinstance(content, list) else content


@pytest.mark.parametrize("method", RUNNERS)
def test_sdk_case_history_reaches_the_next_turn_and_sessions_stay_apart(root: pathlib.Path, method: str) -> None:
    model = scripted("I like cats", "I like dogs", "You mentioned cats")
    agent = Agent(name="test", model=model)

    async def main() -> None:
        cats, dogs = JsonlSession("s1", root), JsonlSession("s2", root)
        assert (await run_with(method, agent, "I like cats", session=cats)).final_output == "I like cats"
        await run_with(method, agent, "I like dogs", session=dogs)
        assert (await run_with(method, agent, "What do I like?", session=cats)).final_output == "You mentioned cats"
        assert [text_of(i) for i in model_input(model)] == ["I like cats", "I like cats", "What do I like?"]

    run(main())


@pytest.mark.parametrize("method", RUNNERS)
@pytest.mark.parametrize(("limit", "history"), [(2, ["Message 3", "Reply 3"]), (0, []), (None, None), (100, None)])
def test_sdk_case_run_config_session_limit(root: pathlib.Path, method: str, limit: int | None,
                                           history: list[str] | None) -> None:
    model = scripted("Reply 1", "Reply 2", "Reply 3", "Reply 4")
    agent = Agent(name="test", model=model)

    async def main() -> None:
        session = JsonlSession("limited", root, durability="flush")
        for n in (1, 2, 3):
            await run_with(method, agent, f"Message {n}", session=session)
        assert len(await session.get_items()) == 6
        config = RunConfig(tracing_disabled=True, session_settings=SessionSettings(limit=limit))
        await run_with(method, agent, "Message 4", session=session, run_config=config)
        everything = [f"{kind} {n}" for n in (1, 2, 3) for kind in ("Message", "Reply")]
        expected = everything if history is None else history
        assert [text_of(i) for i in model_input(model)] == [*expected, "Message 4"]

    run(main())


@pytest.mark.parametrize("method", RUNNERS)
def test_sdk_case_list_input_is_appended_to_the_history(root: pathlib.Path, method: str) -> None:
    model = scripted("This should run")
    agent = Agent(name="test", model=model)

    async def main() -> None:
        session = JsonlSession("listed", root, durability="flush")
        earlier = [user("Earlier message"), {"role": "assistant", "content": "Saved reply"}]
        await session.add_items(earlier)  # type: ignore[arg-type]
        await run_with(method, agent, [user("Test message")], session=session)
        assert model_input(model) == [*earlier, user("Test message")]

    run(main())


def test_sdk_case_get_items_limits_and_pop_sequence(session: JsonlSession) -> None:
    async def main() -> None:
        assert await session.pop_item() is None
        texts = [f"{kind} {n}" for n in (1, 2, 3) for kind in ("Message", "Response")]
        await session.add_items([user(t) for t in texts])  # type: ignore[misc]
        assert contents(await session.get_items()) == texts
        assert contents(await session.get_items(limit=2)) == texts[-2:]
        assert contents(await session.get_items(limit=4)) == texts[-4:]
        assert contents(await session.get_items(limit=10)) == texts
        assert await session.get_items(limit=0) == []
        assert contents(await session.get_items(limit=-1)) == texts  # as the installed SQLiteSession
        for t in reversed(texts):
            popped = await session.pop_item()
            assert popped is not None and popped.get("content") == t
        assert await session.pop_item() is None and await session.get_items() == []

    run(main())


def test_sdk_case_limit_counts_valid_items_past_a_corrupt_newest_line(session: JsonlSession) -> None:
    run(session.add_items([user(str(n)) for n in range(4)]))  # type: ignore[misc]
    root = pathlib.Path(session.store.root)  # type: ignore[attr-defined]
    [transcript] = root.glob("*.jsonl")
    with open(transcript, "ab") as f:
        f.write(b"{not json}\n")
    assert contents(run(session.get_items(limit=2))) == ["2", "3"]


# -- SIGKILL --------------------------------------------------------------------------------------
def batch_of(n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"{n}.{j}", "type": "message"} for j in range(n % 3 + 1)]


def worker(root: str) -> None:
    async def main() -> None:
        session = JsonlSession("crash", root)  # fsync: acknowledged means on disk
        n = 0
        while True:
            await session.add_items(batch_of(n))  # type: ignore[arg-type]
            sys.stdout.write(f"{n}\n")
            sys.stdout.flush()
            n += 1

    asyncio.run(main())


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.parametrize("trial", range(10 if SOAK else 1))
def test_sigkill_while_adding_loses_no_acknowledged_item(tmp_path: pathlib.Path, trial: int) -> None:
    root = str(tmp_path / "store")
    rng = random.Random(trial)
    want = rng.randint(5, 40)
    acked = kill_after([__file__, "crash", root], want, rng, jitter=0.01)  # at a random point in a later write
    items = run(JsonlSession("crash", root).get_items())
    whole = [[item for n in range(k) for item in batch_of(n)] for k in (acked + 1, acked + 2)]
    assert items in whole  # every acknowledged batch, in order; the one in flight whole or not at all


# -- several processes ----------------------------------------------------------------------------
def writer_worker(root: str, writer: int, batches: int, go: str) -> None:
    async def main() -> None:
        session = JsonlSession("shared", root, durability="flush")  # the guard, not fsync, is under test
        while not os.path.exists(go):
            await asyncio.sleep(0.001)
        for n in range(batches):
            await session.add_items([user(f"{writer}.{n}.{j}") for j in range(n % 3 + 1)])  # type: ignore[misc]
        print("done", flush=True)

    asyncio.run(main())


def test_processes_adding_to_one_session_lose_and_duplicate_nothing(tmp_path: pathlib.Path) -> None:
    root, go = str(tmp_path / "store"), str(tmp_path / "go")
    writers, batches = 2, 12
    procs = [subprocess.Popen([sys.executable, __file__, "writer", root, str(w), str(batches), go],
                              stdout=subprocess.PIPE, text=True, env=child_env()) for w in range(writers)]
    pathlib.Path(go).touch()
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out.strip() == "done"
    got = contents(run(JsonlSession("shared", root).get_items()))
    for w in range(writers):  # each writer's items all there, once, in its order, each batch contiguous
        mine = [c for c in got if c.startswith(f"{w}.")]
        assert mine == [f"{w}.{n}.{j}" for n in range(batches) for j in range(n % 3 + 1)]
        for n in range(batches):
            at = got.index(f"{w}.{n}.0")
            assert got[at:at + n % 3 + 1] == [f"{w}.{n}.{j}" for j in range(n % 3 + 1)]
    assert len(got) == writers * sum(n % 3 + 1 for n in range(batches))


# -- packaging --------------------------------------------------------------------------------------
def _hide(monkeypatch: pytest.MonkeyPatch, package: str, module: str) -> Callable[[], Any]:
    for name in list(sys.modules):
        if name == package or name.startswith(package + "."):
            monkeypatch.setitem(sys.modules, name, None)  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, package, None)  # type: ignore[arg-type]
    monkeypatch.delitem(sys.modules, module, raising=False)
    return lambda: importlib.import_module(module)


def test_missing_sdk_gives_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    load = _hide(monkeypatch, "agents", "jsonl_sessions.integrations.openai_agents")
    with pytest.raises(ImportError, match=r"pip install 'jsonl-sessions\[openai-agents\]'"):
        load()
    monkeypatch.undo()
    assert importlib.import_module("jsonl_sessions.integrations.openai_agents") is openai_agents


def test_importing_jsonl_sessions_imports_no_adapter_or_sdk() -> None:
    code = ("import sys, jsonl_sessions, jsonl_sessions.integrations; "
            "loaded = [m for m in sys.modules if m.split('.')[0] in ('agents', 'langchain_core', 'openai') "
            "or m.startswith('jsonl_sessions.integrations.')]; print(loaded)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=child_env())
    assert out.stdout.strip() == "[]"


if __name__ == "__main__":
    if sys.argv[1] == "crash":
        worker(sys.argv[2])
    else:
        writer_worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
