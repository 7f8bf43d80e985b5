"""The PostgreSQL backend under real concurrency and real failures.

- 4 processes x 3 threads appending to one session and to a session each: nothing lost,
  nothing duplicated, ids strictly increasing in every session;
- client processes SIGKILLed mid-mutation (appends, batches, a ``lock()`` block): no
  acknowledged write lost, the guard free again, ``verify()`` clean;
- backends terminated by the server (``pg_terminate_backend``) mid-transaction: typed
  errors, nothing half-done, no acknowledged write lost; a connection lost during COMMIT
  is :class:`OutcomeUnknownError` and a retry with the caller's id is idempotent;
- a server restart (crash and recovery) mid-run: typed errors while it is down, then the
  same store object works again, no acknowledged write lost.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from _budget import sized
from _child import child_env

from jsonl_sessions import DatabaseUnavailableError, DuplicateMessageError, LockTimeoutError, OutcomeUnknownError

WORKER = os.path.join(os.path.dirname(__file__), "pg_worker.py")


def _store(dsn: str, schema: str, **options: Any) -> Any:
    from jsonl_sessions.postgres import PostgresSessionStore

    return PostgresSessionStore(dsn, schema=schema, pool_size=4, **options)


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, WORKER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=child_env())


def _increasing(ids: list[str]) -> bool:
    return all(a < b for a, b in itertools.pairwise(ids))


# -- processes x threads ----------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["one", "many"])
def test_four_processes_of_three_threads(pg_dsn: str, pg_schema: str, mode: str) -> None:
    count = sized(12, 100)
    store = _store(pg_dsn, pg_schema)  # the schema exists before the writers start
    procs = [_spawn("writer", pg_dsn, pg_schema, mode, f"p{p}", "3", str(count)) for p in range(4)]
    acked: dict[str, list[str]] = {}
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        acked.update(json.loads(out))
    assert len(acked) == 12
    for tag, ids in acked.items():
        assert len(ids) == count and _increasing(ids), tag
    sessions = ["shared"] if mode == "one" else [f"s-p{p}-{t}" for p in range(4) for t in range(3)]
    stored: dict[str, list[tuple[str, int]]] = {}
    for key in sessions:
        messages = store.try_load(key)
        assert _increasing([m.id for m in messages]), key
        for m in messages:
            stored.setdefault(m.content["w"], []).append((m.id, m.content["s"]))
    assert sum(map(len, stored.values())) == 12 * count  # nothing lost, nothing duplicated
    for tag, ids in acked.items():
        assert stored[tag] == list(zip(ids, range(count))), tag
    assert store.verify().ok
    store.close()


# -- SIGKILL of clients -----------------------------------------------------------------------
def _acks(proc: subprocess.Popen[str], wanted: int) -> list[tuple[int, str]]:
    """Lines ``ack N ID`` from the child until ``wanted`` of them came."""
    assert proc.stdout is not None
    got = []
    while len(got) < wanted:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else "the child ended"
        _, n, mid = line.split()
        got.append((int(n), mid))
    return got


def test_sigkill_of_clients_mid_mutation_loses_no_acknowledged_write(pg_dsn: str, pg_schema: str) -> None:
    store = _store(pg_dsn, pg_schema, lock_timeout=10)
    rng = random.Random(7)
    for trial in range(sized(3, 20)):
        key = f"k{trial}"
        procs = [_spawn("appender", pg_dsn, pg_schema, key) for _ in range(2)]
        acked: list[tuple[int, str]] = []
        for proc in procs:
            acked += _acks(proc, 1)  # killed only after a first acknowledgement: the kill lands mid-run
        time.sleep(rng.uniform(0.0, 0.15))
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
        for proc in procs:
            rest, _ = proc.communicate(timeout=30)
            acked += [(int(n), mid) for _, n, mid in (line.split() for line in rest.splitlines() if line.startswith("ack "))]
        messages = store.try_load(key)  # every stored line parses: no half-written row
        ids = [m.id for m in messages]
        assert _increasing(ids)
        missing = {mid for _, mid in acked} - set(ids)
        assert not missing, f"acknowledged but lost: {missing}"
        store.append(key, {"role": "user", "content": "after"})  # the killed clients' guards are free
    assert store.verify().ok
    store.close()


def test_append_inside_lock_is_visible_before_the_block_ends_and_survives_sigkill(pg_dsn: str,
                                                                                   pg_schema: str) -> None:
    store = _store(pg_dsn, pg_schema, lock_timeout=0.3)
    proc = _spawn("lockheld", pg_dsn, pg_schema, "k")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("acked "), proc.stderr.read() if proc.stderr else line
        mid = line.split()[1]
        assert [m.id for m in store.load("k")] == [mid]  # committed before the block ends
        with pytest.raises(LockTimeoutError):  # and the block still holds the guard
            store.append("k", {"role": "user", "content": "while held"})
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while True:  # the server notices the dead client and ends its transaction (and lock)
        try:
            store.append("k", {"role": "user", "content": "after the kill"})
            break
        except LockTimeoutError:
            assert time.monotonic() < deadline, "the killed client's guard was never released"
    assert [m.content for m in store.load("k")] == ["inside the block", "after the kill"]
    store.close()


# -- backends terminated by the server -----------------------------------------------------------
def _terminate(dsn: str, application_name: str, *, busy_only: bool = False) -> int:
    """Terminate the backends of ``application_name`` (``busy_only``: those running a
    statement or inside a transaction, not idle in the pool); how many."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return len(conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s "
                                "AND pid <> pg_backend_pid() AND (NOT %s OR state <> 'idle')",
                                (application_name, busy_only)).fetchall())


def test_terminated_backends_give_typed_errors_and_lose_no_acknowledged_write(pg_dsn: str, pg_schema: str) -> None:
    store = _store(pg_dsn, pg_schema, application_name="jsonl-victim")
    outcomes: dict[str, str] = {}  # content -> "ok" / "unavailable" / "unknown"
    batches: set[str] = set()  # the first content of each append_many of two
    stop = threading.Event()
    unexpected: list[BaseException] = []

    def append(t: int) -> None:
        n = 0
        while not stop.is_set():
            tag = f"{t}.{n}"
            n += 1
            try:
                if n % 4 == 0:
                    batches.add(tag)
                    store.append_many("k", [{"role": "user", "content": tag}, {"role": "user", "content": tag + "b"}])
                else:
                    store.append("k", {"role": "user", "content": tag})
                outcomes[tag] = "ok"
            except OutcomeUnknownError:
                outcomes[tag] = "unknown"
            except DatabaseUnavailableError:
                outcomes[tag] = "unavailable"
            except BaseException as exc:  # noqa: BLE001 - reported below
                unexpected.append(exc)
                return

    threads = [threading.Thread(target=append, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    killed = 0
    for _ in range(sized(300, 2000)):  # until enough calls were cut off mid-transaction
        time.sleep(0.005)
        killed += _terminate(pg_dsn, "jsonl-victim", busy_only=True)
        if sum(o != "ok" for o in list(outcomes.values())) >= sized(3, 30):
            break
    stop.set()
    for t in threads:
        t.join()
    assert not unexpected, unexpected
    assert killed and sum(o != "ok" for o in outcomes.values()) >= sized(3, 30), (killed, outcomes)
    stored = [m.content for m in store.try_load("k")]
    assert len(stored) == len(set(stored))
    present = set(stored)
    for tag, outcome in outcomes.items():
        if outcome == "ok":
            assert tag in present, tag
        elif outcome == "unavailable":
            assert tag not in present, f"{tag}: the call said nothing was committed"
        if tag in batches:  # a batch is all or nothing
            assert len({tag, tag + "b"} & present) in (0, 2), tag
    assert store.verify().ok
    store.close()


def test_a_lock_block_whose_guard_connection_is_terminated_refuses_further_calls(pg_dsn: str, pg_schema: str) -> None:
    store = _store(pg_dsn, pg_schema, application_name="jsonl-guard")
    with store.lock("k"):
        store.append("k", {"role": "user", "content": "before"})
        assert _terminate(pg_dsn, "jsonl-guard") >= 1  # the pinned connection among them
        with pytest.raises(DatabaseUnavailableError, match="guard"):
            store.append("k", {"role": "user", "content": "unguarded"})
    assert [m.content for m in store.load("k")] == ["before"]
    store.append("k", {"role": "user", "content": "after"})
    store.close()


def test_connection_lost_during_commit_is_outcome_unknown_and_an_own_id_makes_the_retry_safe(
        pg_dsn: str, pg_schema: str) -> None:
    """A deferred constraint trigger ends its own backend while COMMIT runs: the client
    loses the connection during COMMIT (a real server-side failure at that exact point)."""
    import psycopg

    from jsonl_sessions import ids

    store = _store(pg_dsn, pg_schema)
    store.append("k", {"role": "user", "content": "first"})
    s = store._s
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE FUNCTION {s}.die() RETURNS trigger LANGUAGE plpgsql AS "
                     "$$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$")
        conn.execute(f"CREATE CONSTRAINT TRIGGER die AFTER INSERT ON {s}.messages DEFERRABLE INITIALLY DEFERRED "
                     f"FOR EACH ROW EXECUTE FUNCTION {s}.die()")
    own = ids.next_id(store.load("k")[-1].id)
    assert own is not None
    with pytest.raises(OutcomeUnknownError) as info:
        store.append("k", {"role": "user", "content": "maybe", "id": own})
    assert isinstance(info.value, ConnectionError)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"DROP TRIGGER die ON {s}.messages")
    assert store.append("k", {"role": "user", "content": "maybe", "id": own}) == own  # it was not committed
    with pytest.raises(DuplicateMessageError):  # a second retry finds the first
        store.append("k", {"role": "user", "content": "maybe", "id": own})
    assert [m.content for m in store.load("k")] == ["first", "maybe"]
    store.close()


# -- server restart --------------------------------------------------------------------------
@pytest.fixture
def own_cluster(pg_server: Any) -> Iterator[Any]:
    """A cluster of this test's own (it is stopped and restarted)."""
    from jsonl_sessions.testing.pgserver import TempCluster

    cluster = TempCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@pytest.mark.parametrize("mode", ["immediate", "fast"])
def test_server_restart_mid_run(own_cluster: Any, mode: str) -> None:
    """``immediate``: the server crashes (recovery at restart); ``fast``: a clean shutdown.
    While it is down, calls raise DatabaseUnavailableError (or OutcomeUnknownError for a
    COMMIT in flight); afterwards the same store works again; every acknowledged append
    is there."""
    store = _store(own_cluster.dsn, "restart", connect_timeout=1, lock_timeout=5)
    acked: list[str] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def run() -> None:
        n = 0
        while not stop.is_set():
            try:
                acked.append(store.append("k", {"role": "user", "content": n}))
            except DatabaseUnavailableError as exc:
                errors.append(exc)
                time.sleep(0.05)
            except BaseException as exc:  # noqa: BLE001 - an untyped error fails the test
                errors.append(exc)
                return
            n += 1

    t = threading.Thread(target=run)
    t.start()
    try:
        while len(acked) < 5:
            time.sleep(0.01)
        own_cluster.stop(mode)
        time.sleep(2.0)  # longer than connect_timeout: calls meanwhile must fail, typed
        before = len(acked)
        own_cluster.start()
        deadline = time.monotonic() + 30
        while len(acked) < before + 5:
            assert time.monotonic() < deadline, f"no recovery: {errors[-3:]}"
            time.sleep(0.05)
    finally:
        stop.set()
        t.join()
    assert errors, "the outage was not noticed"
    assert all(isinstance(e, DatabaseUnavailableError) for e in errors), errors
    stored = {m.id for m in store.try_load("k")}
    assert set(acked) <= stored
    store.close()


def test_the_first_calls_after_a_restart_succeed_on_fresh_connections(own_cluster: Any) -> None:
    """The pool's idle connections died with the old server: the first read and the first
    write notice it before anything was sent, check the pool and run on a new connection."""
    store = _store(own_cluster.dsn, "restart", connect_timeout=5)
    store.append("k", {"role": "user", "content": "before"})
    own_cluster.restart("fast")
    assert [m.content for m in store.load("k")] == ["before"]
    own_cluster.restart("fast")
    assert store.get_message_count("k") == 1  # a one-statement read
    own_cluster.restart("fast")
    store.append("k", {"role": "user", "content": "after"})
    assert [m.content for m in store.load("k")] == ["before", "after"]
    store.close()
