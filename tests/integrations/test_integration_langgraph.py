"""JsonlCheckpointSaver against the real LangGraph: the official checkpointer conformance
suite (``langgraph-checkpoint-conformance``, run unmodified: every base and extended
capability), a Hypothesis comparison with LangGraph's own ``InMemorySaver`` as the
reference model, a compiled ``StateGraph`` (no LLM) that persists and resumes, SIGKILL in
the middle of a graph run and of raw ``put``/``put_writes`` loops (fsync mode, checked
against the worker's acknowledgements), several processes writing one thread at once, and
values the serializer cannot encode.

Workers: tests/integrations/langgraph_worker.py.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import signal
import subprocess
import sys
import uuid
from typing import Any, TypedDict

import pytest
from _sdk import require

require("langgraph.graph", "langgraph.checkpoint.conformance")  # skips without the test-integrations extra (fails in CI)

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph_worker import build_graph, expected_items
from missing_package import assert_missing_framework_error
from sigkill import ENV, kill_after, run_workers

from jsonl_sessions import SerializationError
from jsonl_sessions.integrations import langgraph as adapter
from jsonl_sessions.integrations.langgraph import JsonlCheckpointSaver

SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"
WORKER = str(pathlib.Path(__file__).with_name("langgraph_worker.py"))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- the official conformance suite ------------------------------------------------------------
@pytest.mark.parametrize("backend", ["flush", "fsync", "memory", "sqlite"])
def test_conformance_suite_passes_every_capability(tmp_path: pathlib.Path, backend: str) -> None:
    @checkpointer_test(name=f"JsonlCheckpointSaver-{backend}")
    async def factory() -> Any:
        if backend == "memory":  # any backend of the store contract, here the in-memory one
            from jsonl_sessions.testing import MemorySessionStore

            class Memory(MemorySessionStore):
                def close(self) -> None:  # the one method of the backend contract it lacks
                    pass

            yield JsonlCheckpointSaver(Memory())
        elif backend == "sqlite":
            from jsonl_sessions.sqlite import SqliteSessionStore

            yield JsonlCheckpointSaver(SqliteSessionStore(tmp_path / f"{uuid.uuid4().hex}.db", durability="flush"))
        else:
            yield JsonlCheckpointSaver(tmp_path / f"store-{uuid.uuid4().hex}", durability=backend)

    report = run(validate(factory))
    failures = {name: r.failures for name, r in report.results.items() if not r.passed}
    assert failures == {}
    assert report.passed_all_base()
    assert {name for name, r in report.results.items() if r.detected} == {
        "put", "put_writes", "get_tuple", "list", "delete_thread", "delete_for_runs", "copy_thread", "prune"}


# -- InMemorySaver as the reference model -------------------------------------------------------
THREADS = ["t1", "t2", "t3"]
NAMESPACES = ["", "child:1"]
CHANNELS = ["a", "b", "c"]
WRITE_CHANNELS = ["a", "b", "__error__", "__interrupt__"]
int64 = st.integers(-(2**63), 2**63 - 1)  # msgpack's range: LangGraph's serializer refuses bigger ints
value = st.one_of(int64, st.text(max_size=5), st.lists(int64, max_size=3), st.none(),
                  st.dictionaries(st.text(max_size=3), int64, max_size=2))
op = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(THREADS), st.sampled_from(NAMESPACES), st.integers(0, 50),
              st.dictionaries(st.sampled_from(CHANNELS), value, max_size=3), st.sets(st.sampled_from(CHANNELS)),
              st.integers(0, 2)),
    st.tuples(st.just("writes"), st.integers(0, 50), st.sampled_from(["task-1", "task-2"]),
              st.lists(st.tuples(st.sampled_from(WRITE_CHANNELS), value), min_size=1, max_size=3)),
    st.tuples(st.just("delete"), st.sampled_from(THREADS)),
)


def _comparable(t: CheckpointTuple | None) -> Any:
    if t is None:
        return None
    return (t.config["configurable"]["checkpoint_id"], t.checkpoint, t.metadata, t.parent_config, t.pending_writes)


def _call(step: tuple[Any, ...], stored: list[dict[str, Any]]) -> tuple[str, tuple[Any, ...], dict[str, Any]] | None:
    """The saver call ``step`` stands for, given the configs of the checkpoints stored so far."""
    if step[0] == "put":
        _, thread, ns, parent_at, values, changed, step_no = step
        parents = [c for c in stored if c["configurable"]["thread_id"] == thread and c["configurable"]["checkpoint_ns"] == ns]
        config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
        if parents:
            config["configurable"]["checkpoint_id"] = parents[parent_at % len(parents)]["configurable"]["checkpoint_id"]
        versions = {ch: f"{len(stored) + 1:05}.{ch}" for ch in changed}
        checkpoint = Checkpoint(v=1, id=str(uuid6(clock_seq=-1)), ts="2026-01-01T00:00:00+00:00",
                                channel_values={k: v for k, v in values.items() if k in changed},
                                channel_versions=versions, versions_seen={}, updated_channels=None)
        return "put", (config, checkpoint, {"source": "loop", "step": step_no, "parents": {}}, versions), {}
    if step[0] == "writes" and stored:
        _, at, task, writes = step
        return "put_writes", (stored[at % len(stored)], writes, task), {"task_path": f"~{task}"}
    if step[0] == "delete":
        return "delete_thread", (step[1],), {}
    return None


@settings(max_examples=300 if SOAK else 25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(op, max_size=25))
def test_agrees_with_in_memory_saver(tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[Any, ...]]) -> None:
    root = tmp_path_factory.mktemp("store")
    model, ours = InMemorySaver(), JsonlCheckpointSaver(root, durability="flush")
    stored: list[dict[str, Any]] = []
    for step in steps:
        call = _call(step, stored)
        if call is None:
            continue
        name, args, kwargs = call
        expected = getattr(model, name)(*args, **kwargs)
        assert getattr(ours, name)(*args, **kwargs) == expected
        if name == "put":
            stored.append(expected)
    reopened = JsonlCheckpointSaver(root, durability="flush")  # everything is on disk, nothing in the object
    for thread in THREADS:
        for ns in [*NAMESPACES, None]:
            config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
            if ns is None:
                del config["configurable"]["checkpoint_ns"]
            else:
                assert _comparable(reopened.get_tuple(config)) == _comparable(model.get_tuple(config))
            assert [_comparable(t) for t in reopened.list(config)] == [_comparable(t) for t in model.list(config)]
            for limit in (1, 2):
                assert ([_comparable(t) for t in reopened.list(config, limit=limit, filter={"step": 1})]
                        == [_comparable(t) for t in model.list(config, limit=limit, filter={"step": 1})])
    for config in stored:
        assert _comparable(reopened.get_tuple(config)) == _comparable(model.get_tuple(config))  # type: ignore[arg-type]
        # across threads the two savers list in different thread orders: compare as sets
        assert ({_comparable(t)[0] for t in reopened.list(None, before=config)}  # type: ignore[arg-type]
                == {_comparable(t)[0] for t in model.list(None, before=config)})  # type: ignore[arg-type]


# -- a compiled graph ---------------------------------------------------------------------------
def test_a_graph_persists_forks_and_resumes_in_another_saver(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    config: Any = {"configurable": {"thread_id": "chat"}}
    # durability="sync": with "async", LangGraph itself can store a later superstep's join-barrier
    # set into an earlier checkpoint (its channels hand savers live sets:
    # https://github.com/langchain-ai/langgraph/issues/8748)
    out = build_graph(JsonlCheckpointSaver(root, durability="flush"), 3).invoke(
        {"n": 0, "items": []}, config, durability="sync")
    assert out["n"] == 3 and sorted(out["items"]) == expected_items(3)

    graph = build_graph(JsonlCheckpointSaver(root), 3)  # another saver object: only the files are shared
    assert graph.get_state(config).values == out
    history = list(graph.get_state_history(config))
    assert len(history) == 1 + 3 * 3 + 1  # input, three supersteps a round, the final merge... as LangGraph counts
    # time travel: re-run from the end of round 1; the fork must not disturb the original branch's values
    round1 = next(s for s in history if s.values.get("n") == 1 and s.next == ("step",))
    forked = graph.invoke(None, round1.config, durability="sync")
    assert forked["n"] == 3 and sorted(forked["items"]) == expected_items(3)
    assert graph.get_state(history[0].config).values == out
    assert len(list(graph.get_state_history(config))) > len(history)


def test_async_graph_and_interrupt_resume_across_savers(tmp_path: pathlib.Path) -> None:
    from langgraph.types import Command, interrupt

    root = tmp_path / "store"

    class Ask(TypedDict):
        answer: str

    def ask(state: Ask) -> dict[str, Any]:
        return {"answer": str(interrupt("name?"))}

    def graph(saver: Any) -> Any:
        builder = StateGraph(Ask)
        builder.add_node("ask", ask)
        builder.add_edge(START, "ask")
        builder.add_edge("ask", END)
        return builder.compile(checkpointer=saver)

    config: Any = {"configurable": {"thread_id": "hitl"}}

    async def main() -> None:
        first = await graph(JsonlCheckpointSaver(root, durability="flush")).ainvoke({"answer": ""}, config)
        assert first["__interrupt__"][0].value == "name?"
        resumed = await graph(JsonlCheckpointSaver(root, durability="flush")).ainvoke(Command(resume="Ada"), config)
        assert resumed == {"answer": "Ada"}

    run(main())


# -- bad input --------------------------------------------------------------------------------------
def test_values_the_serializer_cannot_encode_raise_and_write_nothing(tmp_path: pathlib.Path) -> None:
    saver = JsonlCheckpointSaver(tmp_path / "store", durability="flush")
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    bad = Checkpoint(v=1, id=str(uuid6(clock_seq=-1)), ts="", channel_values={"a": object()},
                     channel_versions={"a": "1"}, versions_seen={}, updated_channels=None)
    with pytest.raises(SerializationError, match="object"):
        saver.put(config, bad, {}, {"a": "1"})
    assert not saver.store.session_exists("langgraph/t")  # nothing created

    good = Checkpoint(v=1, id=str(uuid6(clock_seq=-1)), ts="", channel_values={"a": 1},
                      channel_versions={"a": "1"}, versions_seen={}, updated_channels=None)
    stored = saver.put(config, good, {}, {"a": "1"})
    path = next((tmp_path / "store").glob("*.jsonl"))
    before = path.read_bytes()
    with pytest.raises(SerializationError):
        saver.put_writes(stored, [("a", 2), ("b", lambda: 0)], "task")  # the good write is not kept either
    with pytest.raises(TypeError):  # SerializationError is a TypeError, for callers catching that
        run(saver.aput(stored, {**bad, "id": str(uuid6(clock_seq=-1))}, {}, {"a": "2"}))
    assert path.read_bytes() == before
    assert saver.get_tuple(config).pending_writes == []  # type: ignore[union-attr]


# -- SIGKILL ------------------------------------------------------------------------------------------
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.parametrize("trial", range(10 if SOAK else 1))
def test_sigkill_mid_graph_run_resumes_to_the_same_result(tmp_path: pathlib.Path, trial: int) -> None:
    root, rounds, rng = str(tmp_path / "store"), 40, random.Random(trial)
    acked = kill_after([WORKER, "graph", root, str(rounds)], rng.randint(3, 25), rng)
    graph = build_graph(JsonlCheckpointSaver(root), rounds)
    config: Any = {"configurable": {"thread_id": "run"}}
    state = graph.get_state(config).values
    assert state["n"] >= acked  # round `acked` started: every earlier round was checkpointed
    n = state["n"]  # the last checkpoint is after a merge (round n not begun) or after round n's two sides
    assert sorted(state["items"]) in (expected_items(n), sorted([*expected_items(n), f"L{n}", f"R{n}"]))
    final = graph.invoke(None, config)  # resume from the last checkpoint
    assert final["n"] == rounds and sorted(final["items"]) == expected_items(rounds)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.parametrize("trial", range(10 if SOAK else 1))
def test_sigkill_mid_puts_loses_no_acknowledged_checkpoint_or_write(tmp_path: pathlib.Path, trial: int) -> None:
    root, rng = str(tmp_path / "store"), random.Random(100 + trial)
    acked = kill_after([WORKER, "raw", root], rng.randint(5, 40), rng)
    saver = JsonlCheckpointSaver(root)
    found = list(saver.list({"configurable": {"thread_id": "raw"}}))[::-1]  # oldest first
    assert acked + 1 <= len(found) <= acked + 2  # the one in flight: whole or absent
    for n, t in enumerate(found):
        assert t.checkpoint["channel_values"] == {"n": n, "pad": "x" * (n % 7 * 300)}
        assert t.metadata["step"] == n
        assert (t.parent_config or {}).get("configurable", {}).get("checkpoint_id") == (
            found[n - 1].config["configurable"]["checkpoint_id"] if n else None)
        if n <= acked:
            assert t.pending_writes == [(f"task{n}", "n", n + 1), (f"task{n}", "log", f"w{n}")]
        else:
            assert t.pending_writes in ([], [(f"task{n}", "n", n + 1), (f"task{n}", "log", f"w{n}")])


# -- several processes ------------------------------------------------------------------------------
def test_processes_writing_one_thread_at_once_lose_nothing(tmp_path: pathlib.Path) -> None:
    root, count, names = str(tmp_path / "store"), 25, ["p0", "p1"]
    run_workers([[WORKER, "concurrent", root, name, str(count)] for name in names])
    saver = JsonlCheckpointSaver(root)
    found = list(saver.list({"configurable": {"thread_id": "shared"}}))
    assert len(found) == count * len(names)
    for t in found:
        name, n = t.metadata["writer"], t.metadata["n"]
        assert t.checkpoint["channel_values"] == {name: n}
        assert t.pending_writes == [(f"{name}-task", name, -n)]
    for name in names:  # each writer's chain of parents is intact
        chain = sorted((t for t in found if t.metadata["writer"] == name), key=lambda t: t.metadata["n"])
        assert [t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None for t in chain] == [
            None, *(t.config["configurable"]["checkpoint_id"] for t in chain[:-1])]


# -- packaging ------------------------------------------------------------------------------------------
def test_missing_langgraph_gives_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    assert_missing_framework_error(monkeypatch, "langgraph", adapter, "langgraph")


def test_importing_jsonl_sessions_imports_none_of_these_frameworks() -> None:
    code = ("import sys, jsonl_sessions, jsonl_sessions.integrations; print(sorted({m.split('.')[0] for m in sys.modules} "
            "& {'langgraph', 'google', 'llama_index', 'agent_framework'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=ENV)
    assert out.stdout.strip() == "[]"
