"""The SQLite backend under real crashes and real concurrency, with the JSONL backend's
own workers and checks (tests/helpers/crash_worker.py, tests/helpers/concurrency_worker.py), run in
subprocesses whose ``SessionStore`` is swapped for a :class:`SqliteSessionStore` on
``ROOT/sessions.db``.

- SIGKILL at a random moment of each mutation workload in fsync mode: a fresh store sees
  every acknowledged mutation and at most the one in flight on top (the same ack-log
  check as tests/jsonl/test_crash.py), the breadcrumb paired with its transcript, and
  ``verify()`` (``PRAGMA integrity_check`` included) finds nothing.
- 4 processes x 3 threads appending to one session while another process polls
  ``try_load``: nothing lost, duplicated or reordered, ids strictly increasing, every
  poll extends the previous one.
- appends mixed with ``update_last`` / ``remove_last`` while a reader polls: the reader
  only ever sees states the writer had, in its order.

No fault loop through the ``_platform`` seam here: SQLite does its I/O through its own
VFS in C, which that seam does not see. What stands in for it: these SIGKILL trials (a
kill lands anywhere in SQLite's write path, including inside a commit) and the kernel's
own write failures in tests/sqlite/test_sqlite_faults.py.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from typing import Any

import pytest
from _child import HELPERS
from concurrency_worker import state_hash
from crashlog import kill, outcomes, read_events, wait_for_event

from jsonl_sessions.sqlite import SqliteSessionStore

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")

SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"
BASE_SEED = int(os.environ.get("JSONL_SESSIONS_SEED", "20240611"))
WORKLOADS = ["append", "append_many", "rewrite", "replace", "update_remove"]
TRIALS = 20 if SOAK else 2
CASES = [(w, i) for w in WORKLOADS for i in range(TRIALS)]
KEY = "crash"

#: Runs a worker module's ``main()`` with its ``SessionStore`` opening ``ROOT/sessions.db``.
SWAP = """
import os, sys
sys.path.insert(0, {tests!r})
import {module} as worker
from jsonl_sessions.sqlite import SqliteSessionStore
worker.SessionStore = lambda root, **options: SqliteSessionStore(os.path.join(root, "sessions.db"), **options)
sys.argv = [{module!r} + ".py", *sys.argv[1:]]
worker.main()
"""


def swapped(module: str) -> list[str]:
    return [sys.executable, "-c", SWAP.format(tests=str(HELPERS), module=module)]


def db(root: pathlib.Path, **options: Any) -> SqliteSessionStore:
    return SqliteSessionStore(root / "sessions.db", **options)


# -- SIGKILL ----------------------------------------------------------------------------
@pytest.mark.parametrize(("workload", "trial"), CASES, ids=[f"{w}-{i}" for w, i in CASES])
def test_sigkill_at_random_moment(tmp_path: pathlib.Path, workload: str, trial: int) -> None:
    seed = BASE_SEED * 1000 + WORKLOADS.index(workload) * 100 + trial
    delay = random.Random(seed).uniform(0.05, 0.4)
    context = f"workload={workload} seed={seed} kill after {delay * 1000:.0f} ms"
    root = tmp_path / "store"
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen([*swapped("crash_worker"), str(root), KEY, workload, str(seed)], stdout=fo, stderr=fe)
    try:
        wait_for_event(proc, out, err, "begin")
        time.sleep(delay)
        # On a loaded machine the first mutation can outlast the delay: a trial that
        # kills before any acknowledgement checks nothing, so the kill waits for one.
        wait_for_event(proc, out, err, "ack")
    finally:
        kill(proc, err)
    events = read_events(out)
    acked, in_flight = outcomes(events)
    store = db(root, lock_timeout=10)
    messages = store.try_load(KEY)
    breadcrumb = store.get_session_trim_breadcrumb(KEY)
    ids = [m.id for m in messages]
    assert ids == sorted(set(ids)), f"{context}: ids not strictly increasing"
    assert acked.matches(messages, breadcrumb) or (in_flight is not None and in_flight.matches(messages, breadcrumb)), (
            f"{context}: neither the acknowledged state nor that plus the mutation in flight\n"
            f"seen: {[(m.id, m.content) for m in messages]} breadcrumb={breadcrumb}\nacked: {acked}\n"
            f"in flight: {in_flight}")
    assert sum(ev["ev"] == "ack" for ev in events) > 0, f"{context}: nothing was acknowledged before the kill"
    report = store.verify()
    assert report.ok, f"{context}: {report.findings}"
    probe = store.append(KEY, {"role": "user", "content": "probe"})
    assert [m.id for m in store.try_load(KEY)] == [*ids, probe]
    store.close()


# -- concurrency ------------------------------------------------------------------------
PROCESSES, THREADS, PER_THREAD = (6, 4, 300) if SOAK else (4, 3, 40)
MIXED_OPS = 3000 if SOAK else 400


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*swapped("concurrency_worker"), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        pytest.fail(f"worker did not start: {line!r}\n{proc.communicate()[1]}")


def finish(proc: subprocess.Popen[str]) -> str:
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{err}"
    return out


@pytest.mark.parametrize("durability", ["fsync", "flush"] if SOAK else ["fsync"])
def test_processes_and_threads_append_to_one_session(tmp_path: pathlib.Path, durability: str) -> None:
    root, key = tmp_path / "store", "shared"
    db(root).append(key, {"role": "system", "content": "start"})
    go, stop, reader_out = tmp_path / "go", tmp_path / "stop", tmp_path / "reader.json"
    reader = spawn("reader", str(root), key, str(stop), str(reader_out))
    writers = [spawn("writer", str(root), key, f"p{p}", str(THREADS), str(PER_THREAD), str(go), durability)
               for p in range(PROCESSES)]
    try:
        for proc in (reader, *writers):
            ready(proc)
        go.touch()
        returned: dict[str, list[str]] = {}
        for proc in writers:
            returned.update(json.loads(finish(proc).splitlines()[-1]))
    finally:
        stop.touch()
        for proc in writers:
            if proc.poll() is None:
                proc.kill()
    finish(reader)
    polls = json.loads(reader_out.read_text())
    store = db(root)
    messages = store.try_load(key)[1:]
    total = PROCESSES * THREADS * PER_THREAD
    assert len(messages) == total == store.get_message_count(key) - 1
    ids = [m.id for m in messages]
    assert ids == sorted(set(ids)), "ids not strictly increasing"
    per_writer: dict[str, list[int]] = defaultdict(list)
    stored: dict[tuple[str, int], str] = {}
    for m in messages:
        per_writer[m.content["w"]].append(m.content["s"])
        stored[(m.content["w"], m.content["s"])] = m.id
    assert sorted(per_writer) == sorted(returned)
    for w, seqs in per_writer.items():
        assert seqs == list(range(PER_THREAD)), f"writer {w}'s messages lost, duplicated or reordered"
        assert [stored[(w, s)] for s in seqs] == returned[w], f"writer {w} was told other ids than were stored"
    assert polls["last"] == total + 1
    assert store.verify().ok
    store.close()


def test_reader_sees_only_states_the_writer_had(tmp_path: pathlib.Path) -> None:
    from concurrency_worker import checked_content

    root, key = tmp_path / "store", "mixed"
    setup = db(root)
    rng = random.Random(7)
    for i in range(3):
        setup.append(key, {"role": "user", "content": checked_content(rng, f"init{i}")})
    go, stop, log, out = tmp_path / "go", tmp_path / "stop", tmp_path / "mutator.log", tmp_path / "checker.json"
    checker = spawn("checker", str(root), key, str(stop), str(out))
    mutator = spawn("mutator", str(root), key, str(MIXED_OPS), "11", str(go), str(log), "flush")
    try:
        ready(checker)
        ready(mutator)
        go.touch()
        finish(mutator)
    finally:
        stop.touch()
        if mutator.poll() is None:
            mutator.kill()
    finish(checker)
    history = log.read_text().split()
    assert len(history) == MIXED_OPS + 1
    final = setup.try_load(key)
    assert state_hash([(m.id, m.content["tag"]) for m in final]) == history[-1]
    states = json.loads(out.read_text())["states"]
    pos = 0
    for i, state in enumerate(states):
        while pos < len(history) and history[pos] != state:
            pos += 1
        assert pos < len(history), f"the reader's state {i} was never the writer's state at that point"
    assert len(states) > 1, "the reader never saw the session change"
    setup.close()
