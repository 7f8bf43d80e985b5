"""Lifecycle operations under real crashes and real races (child processes, SIGKILL).

- SIGKILL during ``cleanup_stale``, during a loop of ``delete_session`` /
  ``delete_session_owned``, and during ``rename_agent_attribution`` across 100 sessions (200 in a soak):
  a fresh store must then see every session either whole (transcript, sidecar, name,
  alias, state, owner all as written) or gone (not listed, no metadata, loads as []),
  never a transcript without its sidecar, never a half-renamed sidecar; a second run of
  the operation finishes the job and leaves nothing behind.
- Races with a second process: ``delete_session_owned`` against a process re-stamping
  the owner (a deletion may only ever happen while the owner is the one asked for), and
  ``cleanup_stale`` against a process running turns (a session is never deleted in the
  middle of a turn, so its transcript only ever holds whole turns).

The kill lands at a uniformly random moment of the operation: each test first runs one
trial to completion to time it. Trials per test: ``TRIALS`` (3; 25 with
``JSONL_SESSIONS_SOAK=1``); seeds derive from ``JSONL_SESSIONS_SEED``.
"""

from __future__ import annotations

import os
import pathlib
import random
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from _budget import sized
from _child import child_env
from _summary import record
from crashlog import kill, read_events, wait_for_event

from jsonl_sessions import SessionStore, _platform

pytestmark = pytest.mark.skipif(
    not (hasattr(os, "kill") and hasattr(signal, "SIGKILL")), reason="needs os.kill and SIGKILL"
)

WORKER = str(pathlib.Path(__file__).with_name("lifecycle_worker.py"))
SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"
BASE_SEED = int(os.environ.get("JSONL_SESSIONS_SEED", "20240611"))
TRIALS = 25 if SOAK else 3
SESSIONS = sized(100, 200)


def start(tmp: pathlib.Path, root: pathlib.Path, workload: str, seed: int, n: int = SESSIONS
          ) -> tuple[subprocess.Popen[bytes], pathlib.Path, pathlib.Path]:
    out, err = tmp / f"{workload}-{seed}.out", tmp / f"{workload}-{seed}.err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen([sys.executable, WORKER, str(root), workload, str(seed), str(n)],
                                stdout=fo, stderr=fe, cwd=tmp, env=child_env())
    return proc, out, err


def key_of(i: int) -> str:
    return f"s{i:04d}"


def run_killed(tmp: pathlib.Path, workload: str, seed: int, delay: float | None) -> tuple[pathlib.Path, list[dict[str, Any]]]:
    """Run ``workload`` in a fresh root and SIGKILL it ``delay`` seconds after it began
    the operation (None: after it finished). Returns the root and the worker's events."""
    root = tmp / f"store-{seed}"
    proc, out, err = start(tmp, root, workload, seed)
    try:
        wait_for_event(proc, out, err, "begin")
        if delay is None:
            wait_for_event(proc, out, err, "ack")
        else:
            time.sleep(delay)
    finally:
        kill(proc, err)
    return root, read_events(out)


def duration(events: list[dict[str, Any]]) -> float:
    times = {ev["ev"]: ev["t"] for ev in events}
    return float(times["ack"] - times["begin"])


def check_files(root: pathlib.Path) -> None:
    """No transcript without its sidecar (an orphan sidecar is allowed: it is not a session)."""
    names = set(os.listdir(root))
    for name in names:
        if name.endswith(".jsonl"):
            assert name[: -len(".jsonl")] + ".meta.json" in names, f"transcript {name} has no sidecar"


def check_whole_or_gone(store: SessionStore, key: str, *, alias: str = "agent", owner: str | None = None) -> bool:
    """True when the session is whole, False when it is gone; fails on anything else."""
    listed = key in store.list_sessions()
    if not store.session_exists(key):
        assert not listed, f"{key}: listed but does not exist"
        assert store.get_session_metadata(key) is None
        assert store.load(key) == []
        return False
    assert listed, f"{key}: exists but is not listed"
    assert [m.content for m in store.try_load(key)] == [f"{key}-0", f"{key}-1"], key
    md = store.get_session_metadata(key)
    assert md is not None
    assert (md.name, md.agent_alias, md.state, md.principal_id, md.message_count) == (
        f"name-{key}", alias, "idle", owner, 2), f"{key}: metadata damaged: {md}"
    return True


def leftovers(root: pathlib.Path) -> list[str]:
    return sorted(n for n in os.listdir(root) if not n.endswith(".lock"))


def delays(test: str, first: float) -> list[float]:
    rng = random.Random(f"{BASE_SEED}-{test}")
    return [rng.uniform(0, first * 1.1) for _ in range(TRIALS)]


# -- SIGKILL trials -------------------------------------------------------------------
def test_sigkill_during_cleanup_stale(tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> None:
    root, events = run_killed(tmp_path, "cleanup", 0, None)
    assert events[-1]["removed"] == SESSIONS
    assert leftovers(root) == []
    seen = {"whole": 0, "gone": 0}
    for trial, delay in enumerate(delays("cleanup", duration(events)), 1):
        root, events = run_killed(tmp_path, "cleanup", trial, delay)
        context = f"trial {trial}, kill after {delay * 1000:.0f} ms (JSONL_SESSIONS_SEED={BASE_SEED})"
        check_files(root)
        store = SessionStore(root, lock_timeout=10)
        whole = [check_whole_or_gone(store, key_of(i)) for i in range(SESSIONS)]
        seen["whole"] += sum(whole)
        seen["gone"] += whole.count(False)
        # A second cleanup finishes the job: it removes the rest, orphan sidecars included.
        assert store.cleanup_stale(1) == sum(whole), context
        assert leftovers(root) == [], context
        record(request.config, "lifecycle: SIGKILL trials")
    record(request.config, "lifecycle: sessions found whole after a killed cleanup", seen["whole"])
    record(request.config, "lifecycle: sessions found gone after a killed cleanup", seen["gone"])


def test_sigkill_during_deletes(tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> None:
    root, events = run_killed(tmp_path, "delete", 0, None)
    first = duration(events)
    for trial, delay in enumerate(delays("delete", first), 1):
        root, _events = run_killed(tmp_path, "delete", trial, delay)
        check_files(root)
        store = SessionStore(root, lock_timeout=10)
        for i in range(SESSIONS):
            key = key_of(i)
            exists = check_whole_or_gone(store, key, owner="p" if i % 2 == 0 else "q")
            if i % 2 == 1 and i % 3 != 0:
                assert exists, f"{key} is owned by q: delete_session_owned(key, 'p') must never delete it"
        record(request.config, "lifecycle: SIGKILL trials")
    # The uninterrupted run deleted exactly the p-owned and every third session.
    store = SessionStore(tmp_path / "store-0")
    assert store.list_sessions() == [key_of(i) for i in range(SESSIONS) if i % 2 == 1 and i % 3 != 0]


def test_sigkill_during_rename_agent_attribution(tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> None:
    root, events = run_killed(tmp_path, "rename", 0, None)
    assert events[-1]["renamed"] == SESSIONS
    partial = 0
    for trial, delay in enumerate(delays("rename", duration(events)), 1):
        root, events = run_killed(tmp_path, "rename", trial, delay)
        store = SessionStore(root, lock_timeout=10)
        assert sorted(store.list_sessions()) == [key_of(i) for i in range(SESSIONS + 10)]
        renamed = 0
        for i in range(SESSIONS + 10):
            alias = store.get_session_agent_alias(key_of(i))
            if i >= SESSIONS:
                assert alias == "other"
                continue
            assert alias in ("old", "new"), f"{key_of(i)}: alias {alias!r}"
            assert check_whole_or_gone(store, key_of(i), alias=alias)  # nothing else damaged
            renamed += alias == "new"
        assert store.count_agent_attribution("new") == renamed
        partial += 0 < renamed < SESSIONS
        # Running it again finishes exactly the rest.
        assert store.rename_agent_attribution("old", "new") == SESSIONS - renamed
        assert store.count_agent_attribution("new") == SESSIONS
        assert store.count_agent_attribution("other") == 10
        assert [n for n in leftovers(root) if n.endswith(".tmp")] == []
        record(request.config, "lifecycle: SIGKILL trials")
    record(request.config, "lifecycle: renames killed part-way", partial)


# -- races with a second process ------------------------------------------------------
def stop(proc: subprocess.Popen[bytes], err: pathlib.Path) -> None:
    kill(proc, err)


def test_delete_session_owned_races_a_process_restamping_the_owner(
    tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    """The deleter (this process) deletes only for "alice"; the other process stamps
    "alice" or "bob" at random. If the owner check and the deletion were not one step
    under the guard, a stamp of "bob" could land between them and the stamper would
    find its "bob" session deleted."""
    root = tmp_path / "store"
    proc, out, err = start(tmp_path, root, "stamper", 1, 0)
    deletions = attempts = 0
    try:
        wait_for_event(proc, out, err, "ready")
        store = SessionStore(root, durability="flush", lock_timeout=10)
        deadline = time.monotonic() + 20
        while deletions < 100 and time.monotonic() < deadline:
            attempts += 1
            deletions += store.delete_session_owned("owned", "alice")
            assert store.delete_session_owned("owned", "mallory") is False
    finally:
        stop(proc, err)
    events = read_events(out)
    violations = [ev["reason"] for ev in events if ev["ev"] == "violation"]
    assert violations == []
    assert deletions >= 20, f"only {deletions} deletions in {attempts} attempts: the race was not exercised"
    record(request.config, "lifecycle: owner-checked deletions raced by a re-stamping process", deletions)


def test_cleanup_stale_races_a_process_running_turns(
    tmp_path: pathlib.Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other process runs turns on one session, aging its files mid-turn (a slow turn
    in state "running") and after each turn (idle and stale). This process runs
    cleanup_stale(1) in a loop: it may delete the session between turns, never during one.
    Taking a lock is slowed down here (through the platform seam) so that a turn often
    starts between cleanup's first look and its guard: only the second look, under the
    guard, stops it from deleting a session that has just become busy."""
    real_try_lock = _platform.try_lock
    rng = random.Random(BASE_SEED)

    def slow_try_lock(fd: int) -> bool:
        time.sleep(rng.uniform(0, 0.003))
        return real_try_lock(fd)

    monkeypatch.setattr(_platform, "try_lock", slow_try_lock)
    root = tmp_path / "store"
    proc, out, err = start(tmp_path, root, "turns", 2, 0)
    deletions = sweeps = 0
    try:
        wait_for_event(proc, out, err, "ready")
        store = SessionStore(root, durability="flush", lock_timeout=10)
        deadline = time.monotonic() + 20
        while deletions < 40 and time.monotonic() < deadline:
            sweeps += 1
            deletions += store.cleanup_stale(1)
    finally:
        stop(proc, err)
    events = read_events(out)
    violations = [ev["reason"] for ev in events if ev["ev"] == "violation"]
    assert violations == []
    turns = sum(ev["ev"] == "turn" for ev in events)
    assert deletions >= 10, f"only {deletions} deletions in {sweeps} sweeps over {turns} turns: race not exercised"
    record(request.config, "lifecycle: stale sessions deleted while another process ran turns", deletions)
    record(request.config, "lifecycle: turns run against a cleanup loop", turns)
