"""Reading the event log of a worker SIGKILLed mid-mutation, and the states a fresh store
may then show. The crash tests of every backend that run the JSONL store's workers
(``crash_worker.py``, ``lifecycle_worker.py``, the fork/revert worker) use these.

A worker logs ``{"ev": "begin", ...}`` before each mutation and ``{"ev": "ack", ...}``
after the call returned; :func:`outcomes` turns that log into "the state after the last
acknowledged mutation" and "that plus the one in flight", the only two allowed.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any

import pytest

from jsonl_sessions import ChatMessage


def read_events(path: pathlib.Path) -> list[dict[str, Any]]:
    """The worker's complete event lines (a line cut by the kill is not an event)."""
    data = path.read_bytes()
    return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines()]


def wait_for_event(proc: subprocess.Popen[bytes], out: pathlib.Path, err: pathlib.Path, name: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(ev["ev"] == name for ev in read_events(out)):
            return
        if proc.poll() is not None:
            pytest.fail(f"worker exited ({proc.returncode}) before {name!r}:\n{err.read_text()}")
        time.sleep(0.002)
    pytest.fail(f"worker sent no {name!r} within 60 s")


def kill(proc: subprocess.Popen[bytes], err: pathlib.Path) -> None:
    try:
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"worker died on its own ({proc.returncode}):\n{err.read_text()}"


@dataclass(frozen=True)
class Model:
    messages: tuple[tuple[str | None, str], ...] = ()  # (id if known, content token)
    breadcrumb: bool | None = None

    def apply(self, begin: dict[str, Any], ids: list[str] | None) -> Model:
        """The state after ``begin``'s mutation; ``ids`` are the acknowledged ids (None:
        not acknowledged, ids unknown)."""
        op = begin["op"]
        tokens: list[str] = begin.get("tokens", [])
        if op == "append":
            known = ids if ids is not None else [None] * len(tokens)
            return Model(self.messages + tuple(zip(known, tokens)), self.breadcrumb)
        if op == "rewrite":
            return Model(tuple((None, t) for t in tokens), self.breadcrumb)
        if op in ("replace", "replace_if_exists"):
            return Model(tuple((None, t) for t in tokens), begin["breadcrumb"])
        if op == "update_last":
            last_id = self.messages[-1][0]
            return Model(self.messages[:-1] + ((last_id, tokens[0]),), self.breadcrumb)
        if op == "remove_last":
            return Model(self.messages[:-1], self.breadcrumb)
        if op == "clear":
            return Model((), self.breadcrumb)
        raise AssertionError(f"unknown op {op!r}")

    def matches(self, messages: list[ChatMessage], breadcrumb: bool | None) -> bool:
        if breadcrumb != self.breadcrumb or len(messages) != len(self.messages):
            return False
        return all(
            m.content == token and (known is None or m.id == known)
            for m, (known, token) in zip(messages, self.messages)
        )


def outcomes(events: list[dict[str, Any]]) -> tuple[Model, Model | None]:
    """(state after the last acknowledged mutation, state if the one in flight landed)."""
    acked = Model()
    pending: dict[str, Any] | None = None
    for ev in events:
        if ev["ev"] == "begin":
            pending = ev
        elif ev["ev"] == "ack":
            assert pending is not None
            acked = acked.apply(pending, ev["ids"])
            pending = None
    return acked, (acked.apply(pending, None) if pending is not None else None)


def temp_files(root: pathlib.Path) -> list[str]:
    return sorted(p.name for p in root.glob(".*.tmp"))


