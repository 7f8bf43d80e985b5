"""Real crashes during fork and revert: a child process runs copy_messages or
truncate_messages (fsync mode) in a loop and is SIGKILLed at a random moment.

- fork: every acknowledged fork exists whole (the source's exact prefix, its sidecar
  naming parent and fork point); the fork in flight exists whole or not at all (a
  sidecar alone is not a session), and a fresh store leaves no temp files; forking to
  that name again then works.
- revert: the session is the acknowledged state or that plus the mutation in flight
  (a truncation all or nothing, a batch append all or nothing); the message count
  agrees with the transcript after recovery.

The worker is this file run as a script (``python test_history_crash.py ROOT WORKLOAD
SEED``); the event protocol (``begin`` before a call, ``ack`` after it returned) and the
kill helpers are those of test_crash.py / crash_worker.py. Trials: ``LEAN_TRIALS`` per
workload (``TRIALS`` x10 with ``JSONL_SESSIONS_SOAK=1``); seeds derive from ``JSONL_SESSIONS_SEED``.
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
from typing import Any

import pytest
from _child import child_env
from _summary import record
from crash_worker import emit
from crashlog import kill, read_events, temp_files, wait_for_event
from test_crash import BASE_SEED, SOAK

from jsonl_sessions import SessionStore
from jsonl_sessions.keys import key_to_stem

pytestmark = pytest.mark.skipif(
    not (hasattr(os, "kill") and hasattr(signal, "SIGKILL")), reason="needs os.kill and SIGKILL"
)

TRIALS = {"fork": 12, "revert": 12}  # x10 in a soak; LEAN_TRIALS each by default
LEAN_TRIALS = 4
CASES = [(w, i) for w, n in TRIALS.items() for i in range(n * 10 if SOAK else LEAN_TRIALS)]
KILL_DELAY = (0.01, 0.25)
SOURCE = "src"
KEY = "k"


# -- the worker ---------------------------------------------------------------------------
def run_fork(store: SessionStore, rng: random.Random) -> None:
    ids = [m.id for m in store.try_load(SOURCE)]
    i = 0
    while True:
        up_to = None if rng.random() < 0.3 else rng.choice(ids)
        emit({"ev": "begin", "op": "fork", "target": f"fork{i}", "up_to": up_to})
        fork_point = store.copy_messages(SOURCE, f"fork{i}", up_to_message_id=up_to)
        emit({"ev": "ack", "fork_point": fork_point})
        i += 1


def run_revert(store: SessionStore, rng: random.Random) -> None:
    ids = [m.id for m in store.try_load(KEY)]
    i = 0
    while True:
        tokens = [f"v{i}-{j}" for j in range(rng.randint(1, 30))]
        emit({"ev": "begin", "op": "append", "tokens": tokens})
        new = store.append_many(KEY, [{"role": "user", "content": t, "pad": "x" * rng.choice((0, 100, 3000))}
                                      for t in tokens])
        emit({"ev": "ack", "ids": new})
        ids += new
        keep = rng.randrange(len(ids) // 2, len(ids))
        emit({"ev": "begin", "op": "truncate", "up_to": ids[keep]})
        removed = store.truncate_messages(KEY, ids[keep])
        emit({"ev": "ack", "removed": removed})
        del ids[keep + 1 :]
        i += 1


def worker_main(argv: list[str]) -> None:
    root, workload, seed = argv[0], argv[1], int(argv[2])
    store = SessionStore(root, durability="fsync", lock_timeout=10)
    emit({"ev": "ready", "pid": os.getpid()})
    {"fork": run_fork, "revert": run_revert}[workload](store, random.Random(seed))


# -- the parent ---------------------------------------------------------------------------
def run_and_kill(tmp: pathlib.Path, root: pathlib.Path, workload: str, seed: int, delay: float) -> list[dict[str, Any]]:
    out, err = tmp / f"w-{seed}.out", tmp / f"w-{seed}.err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen([sys.executable, __file__, str(root), workload, str(seed)],
                                stdout=fo, stderr=fe, cwd=tmp, env=child_env())
    try:
        wait_for_event(proc, out, err, "begin")
        time.sleep(delay)
    finally:
        kill(proc, err)
    return read_events(out)


def pairs(events: list[dict[str, Any]]) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], dict[str, Any] | None]:
    """(begin, ack) of every acknowledged mutation, and the begin of the one in flight."""
    done: list[tuple[dict[str, Any], dict[str, Any]]] = []
    pending = None
    for ev in events:
        if ev["ev"] == "begin":
            pending = ev
        elif ev["ev"] == "ack":
            assert pending is not None
            done.append((pending, ev))
            pending = None
    return done, pending


def sidecar_of(root: pathlib.Path, key: str) -> dict[str, Any] | None:
    path = root / (key_to_stem(key) + ".meta.json")
    return json.loads(path.read_bytes()) if path.exists() else None  # type: ignore[no-any-return]


def check_fork(root: pathlib.Path, events: list[dict[str, Any]], context: str) -> list[str]:
    """Check a killed fork run; returns what the kill left (for the counts)."""
    left = ["kill left a " + ("transcript" if name.endswith(".jsonl.tmp") else "sidecar") + " temp file"
            for name in temp_files(root)]
    store = SessionStore(root, lock_timeout=10)  # opening removes temp files of a killed write
    assert temp_files(root) == [], f"{context}: temp files left after a fresh store opened"
    source = store.try_load(SOURCE)
    ids = [m.id for m in source]

    def expected(up_to: str | None) -> list[Any]:
        return source if up_to is None else source[: ids.index(up_to) + 1]

    done, pending = pairs(events)
    for begin, ack in done:
        target = begin["target"]
        assert store.try_load(target) == expected(begin["up_to"]), f"{context}: acknowledged fork {target} not whole"
        assert ack["fork_point"] == (begin["up_to"] or ids[-1])
        meta = sidecar_of(root, target)
        assert meta is not None and (meta["parent"], meta["fork_point"]) == (SOURCE, ack["fork_point"])
        assert store.get_message_count(target) == len(expected(begin["up_to"]))
    forks = {begin["target"] for begin, _ in done}
    outcome = "no fork in flight"
    if pending is not None:
        target = pending["target"]
        if store.session_exists(target):
            assert store.try_load(target) == expected(pending["up_to"]), f"{context}: in-flight fork {target} is partial"
            meta = sidecar_of(root, target)
            assert meta is not None and meta["parent"] == SOURCE
            assert store.get_message_count(target) == len(expected(pending["up_to"]))
            forks.add(target)
            outcome = "in-flight fork landed whole"
        else:
            assert target not in store.list_sessions()
            if sidecar_of(root, target) is not None:
                left.append("kill left a sidecar without transcript (not a session)")
            assert store.copy_messages(SOURCE, target) == ids[-1], "forking to the name again must work"
            assert store.try_load(target) == source
            forks.add(target)
            outcome = "in-flight fork absent"
    assert set(store.list_sessions()) == forks | {SOURCE}, f"{context}: unexpected sessions"
    return [outcome, *left]


def check_revert(root: pathlib.Path, events: list[dict[str, Any]], base: list[tuple[str, Any]], context: str) -> str:
    model = list(base)  # (id, content)
    done, pending = pairs(events)
    for begin, ack in done:
        if begin["op"] == "append":
            model += list(zip(ack["ids"], begin["tokens"]))
        else:
            keep = [i for i, _ in model].index(begin["up_to"]) + 1
            assert ack["removed"] == len(model) - keep, f"{context}: truncate reported a wrong count"
            del model[keep:]
    store = SessionStore(root, lock_timeout=10)
    seen = [(m.id, m.content) for m in store.try_load(KEY)]
    if seen == model:
        outcome = "acked"
    else:
        assert pending is not None, f"{context}: state differs from the acknowledged one, nothing in flight"
        if pending["op"] == "append":
            ok = seen[: len(model)] == model and [c for _, c in seen[len(model):]] == pending["tokens"]
        else:
            ids = [i for i, _ in model]
            ok = pending["up_to"] in ids and seen == model[: ids.index(pending["up_to"]) + 1]
        assert ok, f"{context}: neither the acknowledged state nor that plus the {pending['op']} in flight\n" \
                   f"seen {len(seen)} messages, acked {len(model)}"
        outcome = f"in-flight {pending['op']} landed"
    assert store.get_message_count(KEY) == len(seen), f"{context}: count disagrees after recovery"
    with store.lock(KEY):
        pass
    assert temp_files(root) == []
    assert [(m.id, m.content) for m in store.try_load(KEY)] == seen, f"{context}: recovery changed a seen state"
    if seen:
        assert store.truncate_messages(KEY, seen[0][0]) == len(seen) - 1
        store.append(KEY, {"role": "user", "content": "probe"})
        assert [m.content for m in store.try_load(KEY)] == [seen[0][1], "probe"]
    return outcome


@pytest.mark.parametrize(("workload", "trial"), CASES, ids=[f"{w}-{i}" for w, i in CASES])
def test_sigkill_during_fork_or_revert(tmp_path: pathlib.Path, workload: str, trial: int,
                                       request: pytest.FixtureRequest) -> None:
    seed = BASE_SEED * 1000 + 500 + list(TRIALS).index(workload) * 100 + trial
    rng = random.Random(seed)
    delay = rng.uniform(*KILL_DELAY)
    context = f"workload={workload} seed={seed} kill after {delay * 1000:.0f} ms (JSONL_SESSIONS_SEED={BASE_SEED})"
    print(context)
    root = tmp_path / "store"
    setup = SessionStore(root, durability="flush")
    if workload == "fork":
        # ~4 MB, so a copy (and its fsync) takes long enough to be hit
        setup.append_many(SOURCE, [{"role": "user", "content": f"s{i}", "pad": "p" * rng.randint(0, 2000)}
                                   for i in range(4000)])
        events = run_and_kill(tmp_path, root, workload, seed, delay)
        outcomes = check_fork(root, events, context)
    else:
        setup.append_many(KEY, [{"role": "user", "content": f"b{i}"} for i in range(50)])
        base = [(m.id, m.content) for m in setup.try_load(KEY)]
        events = run_and_kill(tmp_path, root, workload, seed, delay)
        outcomes = [check_revert(root, events, base, context)]
    record(request.config, "history crash: SIGKILL trials")
    for outcome in outcomes:
        record(request.config, f"history crash: {workload}, {outcome}")
    record(request.config, f"history crash: {workload} mutations acknowledged",
           sum(ev["ev"] == "ack" for ev in events))


if __name__ == "__main__":
    worker_main(sys.argv[1:])
