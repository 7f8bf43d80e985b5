"""Real crashes: a child process mutates a session in fsync mode and is SIGKILLed at a
random moment; a fresh store must then see every acknowledged mutation, at most the one
in flight on top, a breadcrumb flag paired with the transcript it was written with, and
no temp files once it has touched the session.

The child (tests/helpers/crash_worker.py) logs each mutation before the call and acknowledges it
after the call returned, so the checker knows the exact set of allowed outcomes:
"state after the last acknowledged mutation" or "that plus the one in flight".

Trials: ``LEAN_TRIALS`` per workload (``TRIALS`` x10 with ``JSONL_SESSIONS_SOAK=1``), each with its own
seed derived from ``JSONL_SESSIONS_SEED`` (printed, with the kill delay, on failure).
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
from _child import HELPERS, child_env
from _summary import record
from crashlog import kill, outcomes, read_events, temp_files, wait_for_event

from jsonl_sessions import SessionStore
from jsonl_sessions.jsonl.control import RECORD_OFFSET

pytestmark = pytest.mark.skipif(
    not (hasattr(os, "kill") and hasattr(signal, "SIGKILL")), reason="needs os.kill and SIGKILL"
)

WORKER = str(HELPERS / "crash_worker.py")
SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"
BASE_SEED = int(os.environ.get("JSONL_SESSIONS_SEED", "20240611"))
#: SIGKILL trials per workload in a soak (JSONL_SESSIONS_SOAK=1) are ten times these; by
#: default each workload is killed ``LEAN_TRIALS`` times.
TRIALS = {"append": 7, "append_many": 6, "rewrite": 7, "replace": 7, "update_remove": 7}
LEAN_TRIALS = 3
CASES = [(workload, i) for workload, n in TRIALS.items() for i in range(n * 10 if SOAK else LEAN_TRIALS)]
KILL_DELAY = (0.02, 0.2)
KEY = "crash"


# -- running a worker -----------------------------------------------------------------
def start_worker(
    tmp: pathlib.Path, root: pathlib.Path, workload: str, seed: int, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], pathlib.Path, pathlib.Path]:
    out, err = tmp / f"worker-{seed}.out", tmp / f"worker-{seed}.err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(
            [sys.executable, WORKER, str(root), KEY, workload, str(seed)],
            stdout=fo, stderr=fe, env={**child_env(), **(env or {})}, cwd=tmp,
        )
    return proc, out, err


def run_and_kill(tmp: pathlib.Path, root: pathlib.Path, workload: str, seed: int, delay: float) -> list[dict[str, Any]]:
    proc, out, err = start_worker(tmp, root, workload, seed)
    try:
        wait_for_event(proc, out, err, "begin")  # the delay counts from the first mutation
        time.sleep(delay)
    finally:
        kill(proc, err)
    return read_events(out)


def check_after_kill(root: pathlib.Path, events: list[dict[str, Any]], context: str) -> str:
    """Verify the state a fresh store sees; returns which outcome it was."""
    acked, in_flight = outcomes(events)
    store = SessionStore(root, durability="fsync", lock_timeout=10)
    messages = store.try_load(KEY)  # must not raise: no half-written state is visible
    breadcrumb = store.get_session_trim_breadcrumb(KEY)
    seen = [(m.id, m.content) for m in messages]
    ids = [m.id for m in messages]
    assert ids == sorted(set(ids)), f"{context}: ids not strictly increasing: {ids}"
    if messages and any(ev.get("op", "").startswith("replace") for ev in events):
        assert breadcrumb == (len(messages) % 2 == 0), (
            f"{context}: breadcrumb {breadcrumb} does not belong to the {len(messages)}-message transcript"
        )
    if acked.matches(messages, breadcrumb):
        outcome = "acked"
    elif in_flight is not None and in_flight.matches(messages, breadcrumb):
        outcome = "in-flight landed"
    else:
        raise AssertionError(
            f"{context}: state is neither the acknowledged one nor that plus the mutation in flight\n"
            f"seen: {seen} breadcrumb={breadcrumb}\nacked: {acked}\nin flight: {in_flight}"
        )
    # Taking the guard runs recovery; it must not change what readers already saw, and
    # it leaves no temp files.
    with store.lock(KEY):
        pass
    assert temp_files(root) == [], f"{context}: temp files left after recovery"
    assert store.try_load(KEY) == messages, f"{context}: recovery changed a state readers had already seen"
    assert store.get_session_trim_breadcrumb(KEY) == breadcrumb
    probe = store.append(KEY, {"role": "user", "content": "probe"})
    after = store.try_load(KEY)
    assert after[:-1] == messages and after[-1].id == probe, f"{context}: the next append lost or hid messages"
    assert temp_files(root) == []
    return outcome


def trial_seed(workload: str, trial: int) -> int:
    return BASE_SEED * 1000 + list(TRIALS).index(workload) * 100 + trial


def test_the_crash_checker_rejects_a_lost_or_invented_mutation(tmp_path: pathlib.Path) -> None:
    """The check every SIGKILL trial ends with accepts exactly "acknowledged" and "that
    plus the one in flight": a store missing an acknowledged append, or holding one that
    was never begun, fails it."""

    def store_holding(name: str, tokens: list[str]) -> tuple[pathlib.Path, list[str]]:
        root = tmp_path / name
        ids = SessionStore(root, durability="flush").append_many(KEY, [{"role": "user", "content": t} for t in tokens])
        return root, ids

    def begin(token: str) -> dict[str, Any]:
        return {"ev": "begin", "op": "append", "tokens": [token]}

    root, ids = store_holding("acked", ["t0"])
    events = [begin("t0"), {"ev": "ack", "ids": ids}, begin("t1")]
    assert check_after_kill(root, events, "in flight, not landed") == "acked"
    root, ids = store_holding("landed", ["t0", "t1"])
    assert check_after_kill(root, [begin("t0"), {"ev": "ack", "ids": ids[:1]}, begin("t1")],
                            "in flight, landed") == "in-flight landed"
    root, ids = store_holding("lost", ["t0"])
    lost = [begin("t0"), {"ev": "ack", "ids": ids}, begin("t1"), {"ev": "ack", "ids": ["7" + "Z" * 25]}]
    with pytest.raises(AssertionError, match="neither the acknowledged one"):
        check_after_kill(root, lost, "an acknowledged append lost")
    root, ids = store_holding("invented", ["t0", "t1", "t2"])
    with pytest.raises(AssertionError, match="neither the acknowledged one"):
        check_after_kill(root, [begin("t0"), {"ev": "ack", "ids": ids[:1]}, begin("t1")], "an append never begun")


@pytest.mark.parametrize(("workload", "trial"), CASES, ids=[f"{w}-{i}" for w, i in CASES])
def test_sigkill_at_random_moment(tmp_path: pathlib.Path, workload: str, trial: int, request: pytest.FixtureRequest) -> None:
    seed = trial_seed(workload, trial)
    delay = random.Random(seed).uniform(*KILL_DELAY)
    context = f"workload={workload} seed={seed} kill after {delay * 1000:.0f} ms (JSONL_SESSIONS_SEED={BASE_SEED})"
    print(context)
    root = tmp_path / "store"
    events = run_and_kill(tmp_path, root, workload, seed, delay)
    outcome = check_after_kill(root, events, context)
    record(request.config, "crash: SIGKILL trials")
    record(request.config, f"crash: SIGKILL trials, {outcome}")
    record(request.config, "crash: acknowledged mutations checked", sum(ev["ev"] == "ack" for ev in events))


# -- torn tails -----------------------------------------------------------------------
FRAGMENTS = {
    "partial-json": '{"id":"01ZZZZZZZZZZZZZZZZZZZZZZZZ","created_at":1,"role":"user","kind":"mess',
    # A whole object without its newline is still an uncommitted write, not a message.
    "whole-object-no-newline": '{"id":"01ZZZZZZZZZZZZZZZZZZZZZZZZ","created_at":1,"role":"user","kind":"message","content":"ghost"}',
}


@pytest.mark.parametrize("fragment", list(FRAGMENTS))
def test_torn_tail_of_killed_writer_is_ignored_then_removed_by_next_append(
    tmp_path: pathlib.Path, fragment: str, request: pytest.FixtureRequest
) -> None:
    root = tmp_path / "store"
    proc, out, err = start_worker(tmp_path, root, "torn_holder", 1, env={"CRASH_WORKER_FRAGMENT": FRAGMENTS[fragment]})
    try:
        wait_for_event(proc, out, err, "torn")
    finally:
        kill(proc, err)  # dies holding the session's guard, with the fragment on disk
    record(request.config, "crash: SIGKILL trials")
    path = root / f"{KEY}.jsonl"
    raw = path.read_bytes()
    torn = FRAGMENTS[fragment].encode()
    assert raw.endswith(torn)

    store = SessionStore(root, lock_timeout=10)
    assert [m.content for m in store.try_load(KEY)] == ["t0", "t1"]
    assert [m.content for m in store.load(KEY)] == ["t0", "t1"]
    assert path.read_bytes() == raw, "a read modified the transcript"

    # The kernel released the dead holder's lock; the append removes the fragment first.
    new_id = store.append(KEY, {"role": "user", "content": "t2"})
    after = path.read_bytes()
    assert after.startswith(raw[: -len(torn)]) and after.endswith(b"\n")
    assert torn not in after
    assert [(m.id, m.content) for m in store.try_load(KEY)][-1] == (new_id, "t2")
    assert [m.content for m in store.try_load(KEY)] == ["t0", "t1", "t2"]


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ") or sys.platform == "win32", reason="needs RLIMIT_FSIZE / SIGXFSZ")
@pytest.mark.parametrize("torn_bytes", [1, 4000, 70_000])
def test_torn_tail_of_append_cut_by_the_kernel_is_ignored_then_removed(
    tmp_path: pathlib.Path, torn_bytes: int, request: pytest.FixtureRequest
) -> None:
    """The store's own append is cut mid-write: a file-size limit makes the kernel write
    only ``torn_bytes`` of the line and then kill the writer (SIGXFSZ) inside the write."""
    root = tmp_path / "store"
    proc, out, err = start_worker(tmp_path, root, "fsize", 2, env={"CRASH_WORKER_TORN_BYTES": str(torn_bytes)})
    assert proc.wait(timeout=60) == -signal.SIGXFSZ, err.read_text()
    record(request.config, "crash: writers killed mid-append (SIGXFSZ)")
    events = read_events(out)
    assert events[-1]["ev"] == "begin" and events[-1]["tokens"] == ["f1"], "the worker died somewhere else"
    path = root / f"{KEY}.jsonl"
    raw = path.read_bytes()
    committed = raw.rfind(b"\n") + 1
    assert len(raw) - committed == torn_bytes, "expected a torn tail of exactly the bytes the kernel let through"
    prefix = b'{"id":"'
    assert raw[committed : committed + len(prefix)] == prefix[:torn_bytes], "the fragment is not the new line's start"

    store = SessionStore(root, lock_timeout=10)
    assert [m.content for m in store.try_load(KEY)] == ["f0"]
    assert [m.content for m in store.load(KEY)] == ["f0"]
    assert path.read_bytes() == raw, "a read modified the transcript"
    new_id = store.append(KEY, {"role": "user", "content": "f2"})
    after = path.read_bytes()
    assert after.startswith(raw[:committed])
    assert after[committed:].count(b"\n") == 1 and after[committed:].startswith(b'{"id":"' + new_id.encode())
    assert [m.content for m in store.try_load(KEY)] == ["f0", "f2"]
    assert temp_files(root) == []


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ") or sys.platform == "win32", reason="needs RLIMIT_FSIZE / SIGXFSZ")
def test_append_many_cut_mid_write_is_all_or_nothing(tmp_path: pathlib.Path) -> None:
    """append_many is "one locked, single-write batch (all or none)"; the kernel cuts its
    write 1.5 lines in (file-size limit) and kills the writer there (SIGXFSZ)."""
    root = tmp_path / "store"
    line = 100_000 + 200  # about one encoded batch line
    env = {"CRASH_WORKER_TORN_BYTES": str(line + line // 2), "CRASH_WORKER_BATCH": "3"}
    proc, _out, err = start_worker(tmp_path, root, "fsize", 3, env=env)
    assert proc.wait(timeout=60) == -signal.SIGXFSZ, err.read_text()
    raw = (root / f"{KEY}.jsonl").read_bytes()
    assert raw.count(b"\n") == 2 and not raw.endswith(b"\n"), "the cut did not land in the batch's second line"
    assert [m.content for m in SessionStore(root).try_load(KEY)] == ["f0"]


def big_append_times(events: list[dict[str, Any]]) -> list[tuple[float, float | None]]:
    """(begin time, ack time or None) of every 8 MiB append the worker started."""
    times: list[tuple[float, float | None]] = []
    for ev in events:
        if ev["ev"] == "begin" and ev["op"] == "append" and ev["tokens"][0].startswith("big"):
            times.append((ev["t"], None))
        elif ev["ev"] == "ack" and times and times[-1][1] is None:
            times[-1] = (times[-1][0], ev["t"])
    return times


def kill_during_big_append(tmp: pathlib.Path, root: pathlib.Path, seed: int) -> list[dict[str, Any]]:
    """Let the worker time two 8 MiB appends, then kill it at a random point of a later
    one, towards its end, where the write is (the time base is the system-wide monotonic
    clock both processes read)."""
    rng = random.Random(seed)
    proc, out, err = start_worker(tmp, root, "big", seed)
    try:
        wait_for_event(proc, out, err, "ready")
        deadline = time.monotonic() + 60
        while True:
            times = big_append_times(read_events(out))
            done = sorted(ack - begin for begin, ack in times if ack is not None)
            if len(done) >= 2 and times[-1][1] is None and len(times) > len(done):
                break
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.0005)
        duration = done[len(done) // 2]
        target = times[-1][0] + rng.uniform(0.4, 1.05) * duration
        time.sleep(max(0.0, target - time.monotonic()))
    finally:
        kill(proc, err)
    return read_events(out)


BIG_TRIALS = 30 if SOAK else 3


@pytest.mark.parametrize("trial", range(BIG_TRIALS))
def test_sigkill_during_large_append(tmp_path: pathlib.Path, trial: int, request: pytest.FixtureRequest) -> None:
    """SIGKILL aimed at an 8 MiB append (flush mode): Linux stops a large write() at a
    fatal signal, so the file may really end in a fragment (a few percent of the kills
    on a 2-core machine); whatever the kill hit, the usual checks hold, and a fragment
    is gone after the next append. How many kills tore a line is reported, not asserted
    (the deterministic torn-tail tests above assert it)."""
    seed = BASE_SEED * 1000 + 900 + trial
    root = tmp_path / "store"
    events = kill_during_big_append(tmp_path, root, seed)
    path = root / f"{KEY}.jsonl"
    raw = path.read_bytes()
    torn = bool(raw) and not raw.endswith(b"\n")
    check_after_kill(root, events, f"big append seed={seed}")  # the probe append removes a fragment
    if torn:
        committed = raw.rfind(b"\n") + 1
        after = path.read_bytes()
        assert after.startswith(raw[:committed]), "committed bytes changed"
        added = after[committed:]
        assert added.count(b"\n") == 1 and b'"probe"' in added, "the torn fragment was not removed"
    record(request.config, "crash: SIGKILL trials")
    record(request.config, "crash: SIGKILL trials during 8 MiB appends that tore the line", int(torn))


# -- update_last of a large line ------------------------------------------------------
def kill_before_new_last_line(tmp_path: pathlib.Path, update: str) -> tuple[pathlib.Path, str, dict[str, Any]]:
    """Run the ``big_update`` worker (SIGKILL with the ``tail`` record committed and the
    transcript cut to the old last line's start); the root, the acknowledged id of the
    old last line, and the ``update_last`` begin event. Checks the kill landed there."""
    root = tmp_path / "store"
    proc, out, err = start_worker(tmp_path, root, "big_update", 4, env={"CRASH_WORKER_UPDATE": update})
    assert proc.wait(timeout=120) == -signal.SIGKILL, err.read_text()
    events = read_events(out)
    begin = events[-1]
    assert begin["ev"] == "begin" and begin["op"] == "update_last", f"the worker died elsewhere: {events[-3:]}"
    last_id = [ev for ev in events if ev["ev"] == "ack"][-1]["ids"][0]
    transcript = (root / f"{KEY}.jsonl").read_bytes()
    assert transcript.count(b"\n") == 1 and b'"v0"' in transcript, "the transcript was not cut to the old last line"
    record_bytes = (root / f"{KEY}.lock").read_bytes()[RECORD_OFFSET:]
    assert record_bytes.startswith(b'{"op":"tail"') and record_bytes.endswith(b"\n"), "no committed tail record"
    return root, last_id, begin


@pytest.mark.parametrize("update", ["quotes", "max"])
def test_update_last_of_a_large_line_survives_sigkill_after_the_cut(
    tmp_path: pathlib.Path, update: str, request: pytest.FixtureRequest
) -> None:
    """The new line of ``update_last`` lives only in its roll-forward record once the
    transcript is cut. Escaped quotes make that record four times the line, and a plain
    line of ``max_message_bytes`` is already as long as any fixed read limit: recovery
    must read the whole record, however long, and complete the update."""
    root, last_id, begin = kill_before_new_last_line(tmp_path, update)
    record(request.config, "crash: SIGKILL trials")
    lock = root / f"{KEY}.lock"
    assert lock.stat().st_size - RECORD_OFFSET > 1 << 24, "the record is not larger than 16 MiB"

    store = SessionStore(root, lock_timeout=10)
    messages = store.try_load(KEY)
    assert [m.content for m in messages[:1]] == ["v0"]
    assert len(messages) == 2, "the acknowledged last message was lost"
    assert messages[1].id == last_id and messages[1].content == begin["char"] * begin["size"]
    assert store.get_message_count(KEY) == 2
    assert lock.stat().st_size == RECORD_OFFSET, "the record was not cleared after completing it"


def test_verify_reads_a_pending_record_over_one_mib_whole(tmp_path: pathlib.Path,
                                                         request: pytest.FixtureRequest) -> None:
    """``verify`` reads a pending record as recovery does: a committed 2 MB ``tail`` record
    left by a killed writer is reported as committed (rolled forward), not as torn."""
    root, last_id, begin = kill_before_new_last_line(tmp_path, "2000000")
    record(request.config, "crash: SIGKILL trials")
    assert (root / f"{KEY}.lock").stat().st_size - RECORD_OFFSET > 1 << 20
    done = subprocess.run([sys.executable, "-m", "jsonl_sessions", "--root", str(root), "verify", "--json"],
                          capture_output=True, timeout=60, check=False)
    report = json.loads(done.stdout)
    findings = [f for f in report["problems"] + report["notes"] if f["kind"] == "pending-record"]
    assert len(findings) == 1 and "committed 'tail' record" in findings[0]["message"], findings

    messages = SessionStore(root, lock_timeout=10).try_load(KEY)
    assert [(m.id, m.content) for m in messages[1:]] == [(last_id, "x" * begin["size"])]
