"""Real concurrency: several processes (each with several threads) write one session
while lock-free readers in other processes poll it.

- appends from 4 processes x 3 threads: nothing lost, duplicated or interleaved, each
  writer's messages in its own order, ids strictly increasing; a reader polling
  ``try_load`` meanwhile never raises and only ever sees the list grow;
- appends mixed with in-place truncation (``remove_last`` / ``update_last``): a
  lock-free reader never sees a spliced or half-rewritten transcript, only states the
  writer actually had, in the writer's order;
- the guard is per session: holding one session's guard does not block another's.

Workers: tests/helpers/concurrency_worker.py. ``JSONL_SESSIONS_SOAK=1`` runs bigger workloads.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import subprocess
import sys
import threading
from collections import defaultdict

import pytest
from _child import HELPERS
from _summary import record
from concurrency_worker import checked_content, state_hash

from jsonl_sessions import LockTimeoutError, SessionStore

WORKER = str(HELPERS / "concurrency_worker.py")
SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"
PROCESSES, THREADS, PER_THREAD = (6, 4, 300) if SOAK else (4, 3, 40)
MIXED_OPS = 5000 if SOAK else 600
TIMEOUT = 300


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKER, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"worker did not start: {line!r}\n{err}")


def finish(proc: subprocess.Popen[str]) -> str:
    """Wait for a worker; fail with its stderr unless it exited 0. Returns its stdout."""
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"worker timed out:\n{err}")
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{err}"
    return out


def test_processes_and_threads_append_to_one_session(
    tmp_path: pathlib.Path, durability: str, request: pytest.FixtureRequest
) -> None:
    root, key = tmp_path / "store", "shared"
    SessionStore(root).append(key, {"role": "system", "content": "start"})
    go, stop, reader_out = tmp_path / "go", tmp_path / "stop", tmp_path / "reader.json"
    reader = spawn("reader", str(root), key, str(stop), str(reader_out))
    writers = [
        spawn("writer", str(root), key, f"p{p}", str(THREADS), str(PER_THREAD), str(go), durability)
        for p in range(PROCESSES)
    ]
    try:
        for proc in (reader, *writers):
            wait_ready(proc)
        go.touch()
        returned: dict[str, list[str]] = {}
        for proc in writers:
            returned.update(json.loads(finish(proc).splitlines()[-1]))
    finally:
        stop.touch()
        for proc in (reader, *writers):
            if proc.poll() is None and proc is not reader:
                proc.kill()
    finish(reader)
    polls = json.loads(reader_out.read_text())

    messages = SessionStore(root).try_load(key)[1:]
    total = PROCESSES * THREADS * PER_THREAD
    assert len(messages) == total
    ids = [m.id for m in messages]
    assert ids == sorted(set(ids)), "ids not strictly increasing"
    per_writer: dict[str, list[int]] = defaultdict(list)
    stored_id: dict[tuple[str, int], str] = {}
    for m in messages:
        w, s = m.content["w"], m.content["s"]
        per_writer[w].append(s)
        stored_id[(w, s)] = m.id
    assert len(stored_id) == total, "a (writer, seq) pair appears twice"
    assert sorted(per_writer) == sorted(returned)
    for w, seqs in per_writer.items():
        assert seqs == list(range(PER_THREAD)), f"writer {w}'s messages lost, duplicated or reordered"
        assert [stored_id[(w, s)] for s in seqs] == returned[w], f"writer {w} was told other ids than were stored"
    raw = (root / f"{key}.jsonl").read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == total + 1, "lines interleaved or blank lines written"
    assert polls["last"] == total + 1
    record(request.config, "concurrency: appends from processes x threads", total)
    record(request.config, "concurrency: lock-free reader polls during appends", polls["polls"])


def is_subsequence(seen: list[str], history: list[str]) -> int | None:
    """Index in ``seen`` of the first state that breaks "a subsequence of ``history``", or None."""
    pos = 0
    for i, state in enumerate(seen):
        while pos < len(history) and history[pos] != state:
            pos += 1
        if pos == len(history):
            return i
    return None


def test_lock_free_reader_never_sees_spliced_lines_during_in_place_truncation(
    tmp_path: pathlib.Path, durability: str, request: pytest.FixtureRequest
) -> None:
    """update_last / remove_last rewrite the transcript's end in place (truncate, write);
    lines of 0-9 KB cross page boundaries, so a reader without the control file's
    sequence counter could read a line spliced from old and new bytes, or the moment
    the last line is truncated away."""
    root, key = tmp_path / "store", "mixed"
    setup = SessionStore(root)
    rng = random.Random(7)
    for i in range(3):
        setup.append(key, {"role": "user", "content": checked_content(rng, f"init{i}")})
    go, stop = tmp_path / "go", tmp_path / "stop"
    log, checker_out = tmp_path / "mutator.log", tmp_path / "checker.json"
    checker = spawn("checker", str(root), key, str(stop), str(checker_out))
    mutator = spawn("mutator", str(root), key, str(MIXED_OPS), "11", str(go), str(log), durability)
    try:
        wait_ready(checker)
        wait_ready(mutator)
        go.touch()
        finish(mutator)
    finally:
        stop.touch()
        if mutator.poll() is None:
            mutator.kill()
    finish(checker)
    history = log.read_text().split()
    assert len(history) == MIXED_OPS + 1
    final = SessionStore(root).try_load(key)
    assert state_hash([(m.id, m.content["tag"]) for m in final]) == history[-1]
    seen = json.loads(checker_out.read_text())
    bad = is_subsequence(seen["states"], history)
    assert bad is None, (
        f"the reader's {bad + 1}th distinct state was never the writer's state at that point "
        f"(a half-done in-place rewrite was visible)"
    )
    assert len(seen["states"]) > 1, "the reader never saw the session change"
    record(request.config, "concurrency: in-place mutations raced by a lock-free reader", MIXED_OPS)
    record(request.config, "concurrency: lock-free reader polls during in-place mutations", seen["polls"])
    record(request.config, "concurrency: distinct states the lock-free reader saw", len(seen["states"]))


def test_holding_one_sessions_guard_does_not_block_another_session(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    store = SessionStore(root, lock_timeout=30)
    store.append("a", {"role": "user", "content": "a0"})
    holder = spawn("hold", str(root), "a")
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        # Another process appends to session b while a's guard is held...
        other = spawn("append", str(root), "b")
        b_id = finish(other).strip()
        # ...and so does this process, in a thread of its own.
        from_thread: list[str] = []
        t = threading.Thread(target=lambda: from_thread.append(store.append("b", {"role": "user", "content": "b1"})))
        t.start()
        t.join(60)
        assert from_thread, "appending to b waited for a's guard"
        assert [m.id for m in store.try_load("b")] == [b_id, from_thread[0]]
        # a really was held the whole time (by that process).
        with pytest.raises(LockTimeoutError) as info:
            SessionStore(root, lock_timeout=0.05).append("a", {"role": "user", "content": "blocked"})
        if sys.platform.startswith("linux"):
            assert info.value.holder_pid == holder.pid
    finally:
        finish(holder)  # closes its stdin: it lets go of a and exits
    store.append("a", {"role": "user", "content": "a1"})
    assert [m.content for m in store.try_load("a")] == ["a0", "a1"]
