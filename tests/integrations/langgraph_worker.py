"""Workers of tests/integrations/test_integration_langgraph.py, and the graph both use.

Usage: ``python langgraph_worker.py graph ROOT ROUNDS`` (runs the graph, printing each
round as it starts), ``raw ROOT`` (put + put_writes in a loop, printing each step once both
returned), ``concurrent ROOT NAME COUNT`` (a chain of COUNT checkpoints in a shared thread).
All but ``concurrent`` use fsync mode: an acknowledgement means on stable storage.
"""

from __future__ import annotations

import operator
import sys
import time
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START, StateGraph

from jsonl_sessions.integrations.langgraph import JsonlCheckpointSaver


class State(TypedDict):
    n: int
    items: Annotated[list[str], operator.add]


def build_graph(saver: Any, rounds: int, pause: float = 0.0) -> Any:
    """step -> (left, right in parallel) -> merge -> step ... ``rounds`` times. ``step``
    prints its round when it starts: by then the previous round is checkpointed."""

    def step(state: State) -> dict[str, Any]:
        if pause:
            sys.stdout.write(f"{state['n']}\n")
            sys.stdout.flush()
            time.sleep(pause)
        return {}

    def side(name: str) -> Any:
        def node(state: State) -> dict[str, Any]:
            time.sleep(pause)
            return {"items": [f"{name}{state['n']}"]}
        return node

    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_node("left", side("L"))
    builder.add_node("right", side("R"))
    builder.add_node("merge", lambda state: {"n": state["n"] + 1})
    builder.add_edge(START, "step")
    builder.add_edge("step", "left")
    builder.add_edge("step", "right")
    builder.add_edge(["left", "right"], "merge")
    builder.add_conditional_edges("merge", lambda state: "step" if state["n"] < rounds else END)
    return builder.compile(checkpointer=saver)


def expected_items(rounds: int) -> list[str]:
    return sorted(f"{side}{n}" for n in range(rounds) for side in "LR")


def graph_worker(root: str, rounds: int) -> None:
    build_graph(JsonlCheckpointSaver(root), rounds, pause=0.003).invoke(  # fsync: a checkpoint is on disk when saved
        {"n": 0, "items": []}, {"configurable": {"thread_id": "run"}}, durability="sync")


def raw_worker(root: str) -> None:
    saver = JsonlCheckpointSaver(root)  # fsync
    config: Any = {"configurable": {"thread_id": "raw", "checkpoint_ns": ""}}
    n = 0
    while True:
        cp = Checkpoint(v=1, id=str(uuid6(clock_seq=-1)), ts="", channel_values={"n": n, "pad": "x" * (n % 7 * 300)},
                        channel_versions={"n": f"{n}", "pad": f"{n}"}, versions_seen={}, updated_channels=None)
        config = saver.put(config, cp, {"step": n}, {"n": f"{n}", "pad": f"{n}"})
        saver.put_writes(config, [("n", n + 1), ("log", f"w{n}")], f"task{n}")
        sys.stdout.write(f"{n}\n")
        sys.stdout.flush()
        n += 1


def concurrent_worker(root: str, name: str, count: int) -> None:
    saver = JsonlCheckpointSaver(root, durability="flush")
    config: Any = {"configurable": {"thread_id": "shared", "checkpoint_ns": ""}}
    for n in range(count):
        cp = Checkpoint(v=1, id=str(uuid6(clock_seq=-1)), ts="", channel_values={name: n},
                        channel_versions={name: f"{n}"}, versions_seen={}, updated_channels=None)
        config = saver.put(config, cp, {"writer": name, "n": n}, {name: f"{n}"})
        saver.put_writes(config, [(name, -n)], f"{name}-task")


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    if mode == "graph":
        graph_worker(rest[0], int(rest[1]))
    elif mode == "raw":
        raw_worker(rest[0])
    elif mode == "concurrent":
        concurrent_worker(rest[0], rest[1], int(rest[2]))
