"""JsonlSessionStore against the real Claude Agent SDK: the SDK's own
``run_session_store_conformance`` (unmodified), lossless Claude Code entries, ``uuid``
deduplication, a reference model, the SDK's store helpers (listing with summaries,
reading messages, importing a local transcript, materializing a session for resume) on
our store, bad entries, a SIGKILL in the middle of appending, and several processes
appending to one session at once.

Worker modes (this file run as a script):

- ``crash ROOT``: append batches of 1-3 entries in a loop (fsync mode) and print each
  batch's number once ``append`` returned;
- ``writer ROOT W N GO``: wait for file GO, then append N batches of writer W's entries,
  each batch sent twice (an SDK retry) and each also carrying one entry shared by every
  writer; print ``done``.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

import pytest
from _child import child_env
from _sdk import require
from sigkill import kill_after

require("claude_agent_sdk", "trio")  # skips without the test-integrations extra (fails in CI)

import anyio  # the SDK's own dependency
from claude_agent_sdk import (
    get_session_messages_from_store,
    import_session_to_store,
    list_sessions_from_store,
    project_key_for_directory,
)
from claude_agent_sdk.testing import run_session_store_conformance
from hypothesis import given, settings
from hypothesis import strategies as st

from jsonl_sessions import (
    AsyncSessionStore,
    InvalidSessionKeyError,
    SerializationError,
    SessionQuery,
    SessionStore,
)
from jsonl_sessions.foreign.claude_sessions import SUMMARY_CONTEXT
from jsonl_sessions.integrations import claude_agent_sdk
from jsonl_sessions.integrations.claude_agent_sdk import JsonlSessionStore
from jsonl_sessions.testing import MemorySessionStore  # the whole backend contract, in memory

SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"  # more SIGKILL trials, more model examples
KEY: Any = {"project_key": "proj", "session_id": "0b1f7f3e-8a7a-4c1e-9d2b-2f6f0f6c1a11"}
STORE_KEY = f"claude/proj/{KEY['session_id']}"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def user(uuid: str, text: Any, parent: str | None = None, **more: Any) -> dict[str, Any]:
    """A Claude Code user entry, fields in the CLI's order."""
    return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/work/app",
            "sessionId": KEY["session_id"], "version": "2.1.3", "type": "user",
            "message": {"role": "user", "content": text}, "uuid": uuid,
            "timestamp": "2026-01-05T10:00:00.000Z", **more}


def assistant(uuid: str, text: str, parent: str) -> dict[str, Any]:
    return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/work/app",
            "sessionId": KEY["session_id"], "version": "2.1.3",
            "message": {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                        "usage": {"input_tokens": 10, "output_tokens": 3}},
            "requestId": "req_1", "type": "assistant", "uuid": uuid, "timestamp": "2026-01-05T10:00:01.000Z"}


TRANSCRIPT: list[dict[str, Any]] = [
    user("u1", "Fix the failing test in parser.py"),
    assistant("a1", "Looking at parser.py.", "u1"),
    {**assistant("a2", "", "a1"), "message": {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "parser.py"}}]}},
    user("u2", [{"tool_use_id": "toolu_1", "type": "tool_result", "content": "def parse(): ..."}], "a2",
         toolUseResult={"type": "text"}),
    {"parentUuid": "u2", "type": "system", "subtype": "compact_boundary", "content": "Conversation compacted",
     "uuid": "s1", "timestamp": "2026-01-05T10:05:00.000Z", "compactMetadata": {"trigger": "auto"}},
    user("u3", "This session is being continued from a previous conversation.", "s1", isCompactSummary=True),
    {"type": "custom-title", "customTitle": "parser fix", "sessionId": KEY["session_id"]},
    {"type": "summary", "summary": "Fixed parser", "leafUuid": "u3"},
]


@pytest.fixture
def root(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "store"


# -- the SDK's conformance suite ---------------------------------------------------------------------
# The SDK runs on anyio and its own tests run the store conformance under asyncio and trio.
LOOPS = ["asyncio", "trio"]


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("durability", ["fsync", "flush"])
def test_sdk_conformance_suite_passes(tmp_path: pathlib.Path, durability: str, loop: str) -> None:
    made = []

    def make_store() -> JsonlSessionStore:  # a fresh store for every contract, as the suite asks
        made.append(tmp_path / f"s{len(made)}")
        return JsonlSessionStore(made[-1], durability=durability)

    anyio.run(run_session_store_conformance, make_store, backend=loop)
    assert len(made) > 10  # every optional contract ran (none skipped for a missing method)


@pytest.mark.parametrize("loop", LOOPS)
def test_sdk_conformance_suite_passes_on_a_shared_async_store(tmp_path: pathlib.Path, loop: str) -> None:
    async def make_store() -> JsonlSessionStore:
        return JsonlSessionStore(AsyncSessionStore(tmp_path / f"s{len(os.listdir(tmp_path))}", durability="flush"))

    anyio.run(run_session_store_conformance, make_store, backend=loop)


@pytest.mark.parametrize("loop", LOOPS)
def test_sdk_conformance_suite_passes_on_another_backend(loop: str) -> None:
    anyio.run(run_session_store_conformance, lambda: JsonlSessionStore(MemorySessionStore()), backend=loop)


class _HeldStore(MemorySessionStore):
    """A backend whose ``append_many`` waits in the worker thread until released."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def append_many(self, key: str, messages: Any) -> list[str]:
        self.entered.set()
        self.release.wait(30)
        return super().append_many(key, messages)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_cancelled_append_still_completes_before_the_cancellation(loop: str) -> None:
    backend = _HeldStore()
    store = JsonlSessionStore(backend)
    outcome: list[str] = []

    async def append() -> None:
        try:
            await store.append(KEY, TRANSCRIPT)
        except anyio.get_cancelled_exc_class():
            outcome.append(f"cancelled after the write: {backend.session_exists(STORE_KEY)}")
            raise
        outcome.append("returned")

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(append)
            await anyio.to_thread.run_sync(backend.entered.wait, abandon_on_cancel=True)  # the write runs
            tasks.cancel_scope.cancel()
            backend.release.set()
        assert await store.load(KEY) == TRANSCRIPT  # known outcome: written whole

    anyio.run(main, backend=loop)
    assert outcome == ["cancelled after the write: True"]


# -- mapping -------------------------------------------------------------------------------------------
def test_entries_round_trip_exactly_with_key_order(root: pathlib.Path) -> None:
    store = JsonlSessionStore(root, durability="flush")
    run(store.append(KEY, TRANSCRIPT[:3]))
    run(store.append(KEY, TRANSCRIPT[3:]))
    loaded = run(store.load(KEY))
    assert loaded == TRANSCRIPT
    assert [json.dumps(e) for e in loaded] == [json.dumps(e) for e in TRANSCRIPT]  # key order too


def test_lines_are_readable_searchable_and_mark_compactions(root: pathlib.Path) -> None:
    store = JsonlSessionStore(root, durability="flush")
    run(store.append(KEY, TRANSCRIPT))
    backend = store.store
    store_key = f"claude/proj/{KEY['session_id']}"
    assert backend.list_sessions() == [store_key]
    lines = backend.load(store_key)
    assert [m.role for m in lines] == [e["type"] for e in TRANSCRIPT]
    assert lines[0].content == "Fix the failing test in parser.py"  # the conversation text is the content
    assert [m.kind for m in lines].count("compaction") == 1 and lines[4].kind == "compaction"
    page = backend.page(store_key, limit=100, breakpoint=True)
    assert [m.role for m in page.messages] == ["system", "user", "custom-title", "summary"]  # since the compaction
    assert [md.key for md in backend.search(SessionQuery("failing test"))] == [store_key]


def test_keys_with_slashes_and_percent_signs_stay_apart(root: pathlib.Path) -> None:
    store = JsonlSessionStore(root, durability="flush")
    keys: list[Any] = [
        {"project_key": "a/b", "session_id": "c"},
        {"project_key": "a", "session_id": "b/c"},
        {"project_key": "a%2Fb", "session_id": "c"},
        {"project_key": "a/b", "session_id": "c", "subpath": "subagents/x/agent-1"},
        {"project_key": "-home-me-proj", "session_id": "ü 1"},
    ]
    for n, key in enumerate(keys):
        run(store.append(key, [{"type": "user", "n": n}]))
    for n, key in enumerate(keys):
        assert run(store.load(key)) == [{"type": "user", "n": n}]
    assert run(store.list_subkeys({"project_key": "a/b", "session_id": "c"})) == ["subagents/x/agent-1"]
    assert sorted(s["session_id"] for s in run(store.list_sessions("a/b"))) == ["c"]
    assert [s["session_id"] for s in run(store.list_sessions("a"))] == ["b/c"]


@pytest.mark.parametrize("key", [
    {"project_key": "", "session_id": "s"},
    {"project_key": "p", "session_id": ""},
    {"project_key": "p", "session_id": "s", "subpath": ""},
    {"project_key": "p"},
    {"project_key": 1, "session_id": "s"},
    "p/s",
])
def test_bad_keys_raise_invalid_session_key(root: pathlib.Path, key: Any) -> None:
    store = JsonlSessionStore(root, durability="flush")
    with pytest.raises(InvalidSessionKeyError):
        run(store.append(key, [{"type": "user"}]))
    with pytest.raises(InvalidSessionKeyError):
        run(store.load(key))
    assert store.store.list_sessions() == []


# -- uuid deduplication -------------------------------------------------------------------------------
def test_a_retried_batch_is_stored_once_and_entries_without_uuid_every_time(root: pathlib.Path) -> None:
    store = JsonlSessionStore(root, durability="flush")
    batch = [user("u1", "hi"), {"type": "custom-title", "customTitle": "t"}, user("u1", "dup in batch")]
    run(store.append(KEY, batch))
    run(store.append(KEY, batch))  # the SDK's retry of a batch whose outcome it did not see
    run(store.append(KEY, [user("u2", "next", "u1"), user("u1", "late duplicate")]))
    loaded = run(store.load(KEY))
    assert loaded == [batch[0], batch[1], batch[1], user("u2", "next", "u1")]
    assert store.store.get_message_count(f"claude/proj/{KEY['session_id']}") == 4  # nothing skipped was written


def test_dedup_sees_writes_of_other_writers_and_removals(root: pathlib.Path) -> None:
    first, second = JsonlSessionStore(root, durability="flush"), JsonlSessionStore(root, durability="flush")
    run(first.append(KEY, [user("u1", "a")]))
    run(second.append(KEY, [user("u2", "b", "u1")]))  # another writer (as another process would)
    run(first.append(KEY, [user("u2", "b again", "u1"), user("u3", "c", "u2")]))  # first must see u2
    assert [e["uuid"] for e in run(first.load(KEY))] == ["u1", "u2", "u3"]
    first.store.remove_last(f"claude/proj/{KEY['session_id']}")  # u3 removed by other code
    run(first.append(KEY, [user("u3", "c, sent again", "u2")]))  # so it is new again
    assert [e["message"]["content"] for e in run(first.load(KEY))] == ["a", "b", "c, sent again"]


def test_incremental_summary_equals_a_fold_of_the_whole_transcript(root: pathlib.Path) -> None:
    from claude_agent_sdk import fold_session_summary

    store = JsonlSessionStore(root, durability="flush")
    for n in range(0, len(TRANSCRIPT), 2):
        run(store.append(KEY, TRANSCRIPT[n:n + 2]))
    [summary] = run(store.list_session_summaries("proj"))
    assert summary["data"] == fold_session_summary(None, KEY, run(store.load(KEY)))["data"]


def test_load_shows_a_uuid_once_even_when_other_code_wrote_it_twice(root: pathlib.Path) -> None:
    store = JsonlSessionStore(root, durability="flush")
    run(store.append(KEY, [user("u1", "first")]))
    store_key = f"claude/proj/{KEY['session_id']}"
    store.store.append(store_key, {"role": "user", "content": "x", "claude": user("u1", "second")})
    store.store.append(store_key, {"role": "note", "content": "a line of other code"})
    assert run(store.load(KEY)) == [user("u1", "first")]


# -- against a reference model ------------------------------------------------------------------------
KEYS: list[Any] = [
    {"project_key": "p1", "session_id": "s1"},
    {"project_key": "p1", "session_id": "s2"},
    {"project_key": "p2", "session_id": "s1"},
    {"project_key": "p1", "session_id": "s1", "subpath": "subagents/agent-a"},
    {"project_key": "p1", "session_id": "s1", "subpath": "subagents/w/agent-b"},
]
ENTRY = st.fixed_dictionaries(
    {"type": st.sampled_from(["user", "assistant", "custom-title"]), "n": st.integers(0, 9)},
    optional={"uuid": st.sampled_from(["u1", "u2", "u3", "u4"])})
OPS = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, len(KEYS) - 1), st.lists(ENTRY, max_size=4)),
    st.tuples(st.just("delete"), st.integers(0, len(KEYS) - 1), st.just([]))), max_size=12)


def model_append(model: dict[int, list[Any]], at: int, entries: list[Any]) -> None:
    """What a store that treats ``uuid`` as an idempotency key holds after the append."""
    seen = {e["uuid"] for e in model.get(at, []) if "uuid" in e}
    for entry in entries:
        if "uuid" in entry:
            if entry["uuid"] in seen:
                continue
            seen.add(entry["uuid"])
        model.setdefault(at, []).append(entry)


def model_delete(model: dict[int, list[Any]], at: int) -> None:
    key = KEYS[at]
    for other, other_key in enumerate(KEYS):
        same_session = (other_key["project_key"], other_key["session_id"]) == (key["project_key"], key["session_id"])
        if other == at or ("subpath" not in key and same_session):
            model.pop(other, None)


@settings(max_examples=300 if SOAK else 30, deadline=None)
@given(OPS)
def test_matches_a_reference_model(ops: list[tuple[str, int, list[Any]]]) -> None:
    model: dict[int, list[Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = JsonlSessionStore(tmp, durability="flush")

        async def main() -> None:
            for op, at, entries in ops:
                if op == "append":
                    await store.append(KEYS[at], entries)
                    model_append(model, at, entries)
                else:
                    await store.delete(KEYS[at])
                    model_delete(model, at)
            for at, key in enumerate(KEYS):
                assert await store.load(key) == model.get(at)
            for project in ("p1", "p2"):
                listed = sorted(s["session_id"] for s in await store.list_sessions(project))
                assert listed == sorted(k["session_id"] for at, k in enumerate(KEYS)
                                        if at in model and k["project_key"] == project and "subpath" not in k)
                summarized = sorted(s["session_id"] for s in await store.list_session_summaries(project))
                assert summarized == listed
            assert await store.list_subkeys(KEYS[0]) == sorted(KEYS[at]["subpath"] for at in (3, 4) if at in model)

        run(main())


# -- the SDK's helpers on this store ------------------------------------------------------------------
def test_sdk_lists_and_reads_sessions_from_the_store(root: pathlib.Path, tmp_path: pathlib.Path) -> None:
    directory = str(tmp_path / "project")
    os.mkdir(directory)
    store = JsonlSessionStore(root, durability="flush")
    key = {"project_key": project_key_for_directory(directory), "session_id": KEY["session_id"]}
    run(store.append(key, TRANSCRIPT[:2]))
    run(store.append(key, TRANSCRIPT[2:]))
    [info] = run(list_sessions_from_store(store, directory=directory))
    assert info.session_id == KEY["session_id"]
    assert info.custom_title == "parser fix"
    assert info.first_prompt == "Fix the failing test in parser.py"
    [summary] = run(store.list_session_summaries(key["project_key"]))
    [listed] = run(store.list_sessions(key["project_key"]))
    assert summary["mtime"] == listed["mtime"]  # fresh: the SDK takes its fast path
    messages = run(get_session_messages_from_store(store, KEY["session_id"], directory=directory))
    assert [m.uuid for m in messages][:2] == ["u1", "a1"]


@pytest.mark.parametrize("how", ["resume", "continue"])
def test_sdk_materializes_a_session_for_resume_from_the_store(root: pathlib.Path, tmp_path: pathlib.Path,
                                                              how: str) -> None:
    """What the SDK does before it starts the CLI to resume: load the session (and its
    subagent transcripts) from the store into a Claude Code config directory."""
    from claude_agent_sdk import ClaudeAgentOptions
    from claude_agent_sdk._internal.session_resume import materialize_resume_session

    directory = tmp_path / "project"
    directory.mkdir()
    store = JsonlSessionStore(root, durability="flush")
    key = {"project_key": project_key_for_directory(str(directory)), "session_id": KEY["session_id"]}
    run(store.append(key, TRANSCRIPT))
    sub = [user("x1", "subtask", isSidechain=True)]
    run(store.append({**key, "subpath": "subagents/agent-1"}, sub))
    chosen = {"resume": KEY["session_id"]} if how == "resume" else {"continue_conversation": True}
    options = ClaudeAgentOptions(session_store=store, cwd=str(directory),
                                 env={"CLAUDE_CONFIG_DIR": str(tmp_path / "no-config")}, **chosen)  # type: ignore[arg-type]

    async def main() -> None:
        done = await materialize_resume_session(options)
        assert done is not None and done.resume_session_id == KEY["session_id"]
        try:
            project = done.config_dir / "projects" / key["project_key"]
            written = (project / f"{KEY['session_id']}.jsonl").read_text().splitlines()
            assert [json.loads(line) for line in written] == TRANSCRIPT
            subagent = (project / KEY["session_id"] / "subagents" / "agent-1.jsonl").read_text().splitlines()
            assert [json.loads(line) for line in subagent] == sub
        finally:
            await done.cleanup()

    run(main())


def test_mtimes_strictly_increase_across_sessions_written_in_one_millisecond(root: pathlib.Path) -> None:
    frozen = 1_900_000_000_000  # every write inside the same millisecond
    calls = itertools.count()
    store = JsonlSessionStore(root, durability="flush",
                              clock=lambda: frozen if next(calls) < 40 else frozen - 5_000)  # then a step back
    ids = [f"s{i:02}" for i in range(25)]

    async def main() -> tuple[list[Any], list[Any]]:
        for n in range(2):  # a second round: appends to sessions that already have lines
            for session_id in ids:
                await store.append({"project_key": "proj", "session_id": session_id}, [user(f"{session_id}.{n}", "hi")])
        return await store.list_sessions("proj"), await store.list_session_summaries("proj")

    listed, summaries = run(main())
    by_write = sorted(listed, key=lambda e: e["mtime"])
    assert [e["session_id"] for e in by_write] == ids  # listing order is write order (the second round's)
    assert [e["mtime"] for e in by_write] == list(range(frozen + 25, frozen + 50))  # strictly increasing
    assert {s["session_id"]: s["mtime"] for s in summaries} == {e["session_id"]: e["mtime"] for e in listed}


def test_a_summary_older_than_the_session_is_stale_for_the_sdk(root: pathlib.Path) -> None:
    from jsonl_sessions.foreign.claude_code import ClaudeKey
    from jsonl_sessions.foreign.claude_sessions import ClaudeSessions

    store = JsonlSessionStore(root, durability="flush")
    run(store.append(KEY, TRANSCRIPT[:2]))
    # As if the process died between the append and the summary write.
    ClaudeSessions(store.store).append(ClaudeKey.of(KEY), TRANSCRIPT[2:3])
    [summary] = run(store.list_session_summaries("proj"))
    [listed] = run(store.list_sessions("proj"))
    assert summary["mtime"] < listed["mtime"]
    run(store.append(KEY, TRANSCRIPT[3:]))  # the next append folds the whole transcript again
    [summary] = run(store.list_session_summaries("proj"))
    [listed] = run(store.list_sessions("proj"))
    assert summary["mtime"] == listed["mtime"]
    assert summary["data"]["custom_title"] == "parser fix" and summary["data"]["first_prompt"].startswith("Fix")


def test_sdk_imports_a_local_transcript_into_the_store(root: pathlib.Path, tmp_path: pathlib.Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "claude-config"
    project = config / "projects" / "-work-app"
    (project / KEY["session_id"] / "subagents").mkdir(parents=True)
    (project / f"{KEY['session_id']}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in TRANSCRIPT))
    sub = [user("x1", "subtask", isSidechain=True)]
    (project / KEY["session_id"] / "subagents" / "agent-1.jsonl").write_text(json.dumps(sub[0]) + "\n")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    store = JsonlSessionStore(root, durability="flush")
    for _ in range(2):  # a re-import adds nothing: uuids are idempotency keys
        run(import_session_to_store(KEY["session_id"], store))
    main = {"project_key": "-work-app", "session_id": KEY["session_id"]}
    assert run(store.load(main)) == TRANSCRIPT + TRANSCRIPT[6:]  # entries without uuid appended again
    assert run(store.list_subkeys(main)) == ["subagents/agent-1"]
    assert run(store.load({**main, "subpath": "subagents/agent-1"})) == sub


# -- bad input ---------------------------------------------------------------------------------------
def test_bad_entries_raise_and_write_nothing(root: pathlib.Path) -> None:
    store = JsonlSessionStore(root, durability="fsync")
    run(store.append(KEY, [user("u1", "kept")]))
    before = run(store.list_session_summaries("proj"))
    with pytest.raises(SerializationError):
        run(store.append(KEY, [user("u2", "ok"), user("u3", {1, 2})]))
    with pytest.raises(SerializationError):
        run(store.append(KEY, [user("u2", "ok"), user("u3", float("nan"))]))
    with pytest.raises(TypeError):
        run(store.append(KEY, [user("u2", "ok"), "not an entry"]))  # type: ignore[list-item]
    assert run(store.load(KEY)) == [user("u1", "kept")]
    assert run(store.list_session_summaries("proj")) == before
    with pytest.raises(SerializationError):  # nothing created for a new key either
        run(store.append({"project_key": "proj", "session_id": "new"}, [user("u9", object())]))
    assert run(store.load({"project_key": "proj", "session_id": "new"})) is None


def test_store_argument_forms(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = SessionStore(tmp_path / "a", durability="flush")
    assert JsonlSessionStore(backend).store is backend
    assert JsonlSessionStore(AsyncSessionStore(tmp_path / "b")).store.root == str(tmp_path / "b")
    monkeypatch.setenv("JSONL_SESSIONS_ROOT", str(tmp_path / "default"))  # no store: the command line's
    assert JsonlSessionStore().store.root == str(tmp_path / "default")
    with pytest.raises(TypeError):
        JsonlSessionStore(backend, durability="flush")
    custom = JsonlSessionStore(backend, prefix="cc:")
    run(custom.append(KEY, [user("u1", "hi")]))
    assert f"cc:proj/{KEY['session_id']}" in backend.list_sessions()
    assert run(JsonlSessionStore(backend).load(KEY)) is None  # another prefix, another namespace


# -- SIGKILL -----------------------------------------------------------------------------------------
def batch_of(n: int) -> list[dict[str, Any]]:
    return [user(f"{n}.{j}", f"text {n}.{j}") for j in range(n % 3 + 1)]


def crash_worker(root: str) -> None:
    async def main() -> None:
        store = JsonlSessionStore(root)  # fsync: acknowledged means on disk
        n = 0
        while True:
            await store.append(KEY, batch_of(n))  # type: ignore[arg-type]
            sys.stdout.write(f"{n}\n")
            sys.stdout.flush()
            n += 1

    asyncio.run(main())


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.parametrize("trial", range(10 if SOAK else 2))
def test_sigkill_while_appending_loses_no_acknowledged_entry(tmp_path: pathlib.Path, trial: int) -> None:
    root = str(tmp_path / "store")
    rng = random.Random(trial)
    want = rng.randint(5, 30)
    acked = kill_after([__file__, "crash", root], want, rng, jitter=0.01)  # at a random point in a later append
    loaded = run(JsonlSessionStore(root).load(KEY))
    whole = [[e for n in range(k) for e in batch_of(n)] for k in (acked + 1, acked + 2)]
    assert loaded in whole  # every acknowledged batch, in order; the one in flight whole or not at all
    run(JsonlSessionStore(root).append(KEY, batch_of(acked + 2)))  # and the session takes appends again


# -- several processes ----------------------------------------------------------------------------------
def writer_worker(root: str, writer: int, batches: int, go: str) -> None:
    async def main() -> None:
        store = JsonlSessionStore(root, durability="flush")  # the guard, not fsync, is under test here
        while not os.path.exists(go):
            await asyncio.sleep(0.001)
        for n in range(batches):
            batch = [user(f"w{writer}.{n}", f"{writer}.{n}"), user(f"shared.{n}", "same in every writer")]
            await store.append(KEY, batch)  # type: ignore[arg-type]
            await store.append(KEY, batch)  # type: ignore[arg-type]  # a retry
        print("done", flush=True)

    asyncio.run(main())


def test_processes_appending_to_one_session_lose_and_duplicate_nothing(tmp_path: pathlib.Path) -> None:
    root, go = str(tmp_path / "store"), str(tmp_path / "go")
    writers, batches = 2, 10
    procs = [subprocess.Popen([sys.executable, __file__, "writer", root, str(w), str(batches), go],
                              stdout=subprocess.PIPE, text=True, env=child_env()) for w in range(writers)]
    pathlib.Path(go).touch()
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out.strip() == "done"
    uuids = [e["uuid"] for e in run(JsonlSessionStore(root).load(KEY))]
    assert len(uuids) == len(set(uuids))  # each once, on disk too (the guard makes dedup + append one step)
    assert len(SessionStore(root).load(f"claude/proj/{KEY['session_id']}")) == len(uuids)
    assert set(uuids) == {f"w{w}.{n}" for w in range(writers) for n in range(batches)} | {
        f"shared.{n}" for n in range(batches)}
    for w in range(writers):  # each writer's entries in its order
        mine = [u for u in uuids if u.startswith(f"w{w}.")]
        assert mine == [f"w{w}.{n}" for n in range(batches)]


# -- packaging ---------------------------------------------------------------------------------------
def _hide(monkeypatch: pytest.MonkeyPatch, package: str, module: str) -> Callable[[], Any]:
    for name in list(sys.modules):
        if name == package or name.startswith(package + "."):
            monkeypatch.setitem(sys.modules, name, None)  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, package, None)  # type: ignore[arg-type]
    monkeypatch.delitem(sys.modules, module, raising=False)
    return lambda: importlib.import_module(module)


def test_missing_sdk_gives_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    load = _hide(monkeypatch, "claude_agent_sdk", "jsonl_sessions.integrations.claude_agent_sdk")
    with pytest.raises(ImportError, match=r"pip install 'jsonl-sessions\[claude-agent-sdk\]'"):
        load()
    monkeypatch.undo()
    assert importlib.import_module("jsonl_sessions.integrations.claude_agent_sdk") is claude_agent_sdk


def test_importing_jsonl_sessions_and_the_foreign_formats_imports_no_sdk() -> None:
    code = ("import sys, jsonl_sessions, jsonl_sessions.foreign.claude_sessions; "
            "print([m for m in sys.modules if m.split('.')[0] == 'claude_agent_sdk'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=child_env())
    assert out.stdout.strip() == "[]"


def test_summary_is_kept_in_the_sidecar_context(root: pathlib.Path) -> None:
    store = JsonlSessionStore(root, durability="flush")
    run(store.append(KEY, TRANSCRIPT[:1]))
    meta = store.store.get_session_metadata(f"claude/proj/{KEY['session_id']}")
    assert meta is not None and json.loads(meta.context[SUMMARY_CONTEXT])["session_id"] == KEY["session_id"]


if __name__ == "__main__":
    if sys.argv[1] == "crash":
        crash_worker(sys.argv[2])
    else:
        writer_worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
