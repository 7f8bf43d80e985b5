"""The one append path of the JSONL store.

An append to a warm session reuses the kept descriptor (one ``lstat``), makes exactly the
expected system calls and no tail read; every other state of the session (a torn or
corrupt tail, an odd counter, a dead writer's record, a renamed transcript) is noticed by
that same check and handled before a byte is written. A lone thread in fsync mode writes
straight away; threads of one process appending durably to one session at once share one
write and one fsync (group commit); a failed write or fsync fails every append it
covered and none of them appears later; a message that cannot be written fails only its
own caller.

Every group test makes the group deterministic: the main thread holds the session's guard
(``store.lock``) until all appending threads are queued on it, then lets go."""

from __future__ import annotations

import errno
import math
import os
import pathlib
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
from _child import child_env
from syscalls import SyscallProbe, probe

from jsonl_sessions import DuplicateMessageError, SerializationError, SessionStore, _platform, ids
from jsonl_sessions.jsonl.control import SEQ_OFFSET
from jsonl_sessions.jsonl.guard import SessionGuard
from jsonl_sessions.jsonl.layout import SessionFiles
from jsonl_sessions.testing import FaultInjector

KEY = "k"
THREADS = 6


def contents(root: pathlib.Path) -> list[str]:
    """What a fresh store reads (ids strictly increasing)."""
    messages = SessionStore(str(root)).try_load(KEY)
    got = [m.id for m in messages]
    assert got == sorted(got) and len(set(got)) == len(got)
    return [str(m.content) for m in messages]


#: The system calls of an append to a warm session (no stat after the write: the lines end the file).
WARM_CALLS = ["try_lock", "pread", "lstat", "write", "pwrite", "unlock"]
#: ... in fsync mode: the visible end set before the write, the visible end cleared and the
#: count cache written in one pwrite after the fsync.
WARM_DURABLE_CALLS = ["try_lock", "pread", "lstat", "pwrite", "write", "fsync", "pwrite", "unlock"]
#: Functions of the group commit's queue: a lone writer never runs them.
QUEUE_FUNCTIONS = {"_queued", "_wait_for_writer", "_step_down"}


def queued(guard: SessionGuard, n: int) -> None:
    deadline = time.monotonic() + 30
    while len(guard.pending) < n:
        assert time.monotonic() < deadline, "the appending threads never queued"
        time.sleep(0.001)


def run_group(store: SessionStore, messages: list[dict[str, object]],
              while_released: Callable[[], object] | None = None) -> list[str | BaseException]:
    """Append ``messages`` from one thread each, all queued behind the guard held here,
    then release it; each thread's id or error. ``while_released``: a context to hold
    around the release (a probe, a fault injector)."""
    outcomes: list[str | BaseException] = [RuntimeError("not run")] * len(messages)

    def one(i: int) -> None:
        try:
            outcomes[i] = store.append(KEY, messages[i])
        except BaseException as exc:  # noqa: BLE001 - recorded for the test to look at
            outcomes[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(messages))]
    held = store.lock(KEY)
    guard = held.__enter__()
    try:
        for t in threads:
            t.start()
        queued(guard, len(messages))
    except BaseException:
        held.__exit__(None, None, None)
        raise
    context = while_released() if while_released is not None else None
    if context is not None:
        context.__enter__()  # type: ignore[attr-defined]
    try:
        held.__exit__(None, None, None)
        for t in threads:
            t.join(60)
    finally:
        if context is not None:
            context.__exit__(None, None, None)  # type: ignore[attr-defined]
    return outcomes


@pytest.fixture
def store(tmp_path: pathlib.Path) -> SessionStore:
    s = SessionStore(str(tmp_path), durability="fsync")
    s.append(KEY, {"role": "user", "content": "first"})
    return s


@pytest.fixture
def warm(tmp_path: pathlib.Path) -> SessionStore:
    """A flush-mode store whose session this process wrote last (its transcript kept open)."""
    s = SessionStore(str(tmp_path), durability="flush")
    for i in range(3):
        s.append(KEY, {"role": "user", "content": f"m{i}"})
    return s


def transcript(root: pathlib.Path) -> str:
    return SessionFiles.of(str(root), KEY).transcript


def counter(root: pathlib.Path) -> int:
    with open(SessionFiles.of(str(root), KEY).lock, "rb") as f:
        f.seek(SEQ_OFFSET)
        value: int = struct.unpack("<Q", f.read(8))[0]
        return value


def transcript_reads(p: SyscallProbe) -> int:
    """The reads of an append besides its one read of the control file (a tail read)."""
    return p.seam["pread"] - p.seam["try_lock"]


def called_functions(op: Callable[[], object]) -> set[str]:
    """The names of the Python functions ``op`` ran (in this thread)."""
    names: set[str] = set()

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            names.add(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        op()
    finally:
        sys.setprofile(None)
    return names


# -- the warm precondition -----------------------------------------------------------------
@pytest.mark.parametrize("durability, calls", [("flush", WARM_CALLS), ("fsync", WARM_DURABLE_CALLS)])
def test_a_warm_append_makes_only_the_expected_system_calls(tmp_path: pathlib.Path, durability: str,
                                                           calls: list[str]) -> None:
    store = SessionStore(str(tmp_path), durability=durability)  # type: ignore[arg-type]
    for i in range(3):
        store.append(KEY, {"role": "user", "content": f"m{i}"})

    p = probe(lambda: store.append(KEY, {"role": "user", "content": "warm"}))

    assert p.sequence("seam") == calls
    assert p.os["os.open"] == 0 and p.os["os.close"] == 0
    assert store.get_message_count(KEY) == 4
    assert contents(tmp_path) == ["m0", "m1", "m2", "warm"]
    # and it stays warm: the view and the count cache it left are right
    assert probe(lambda: store.append(KEY, {"role": "user", "content": "again"})).sequence("seam") == calls
    assert store.get_message_count(KEY) == 5 == len(contents(tmp_path))


#: The Python function calls one warm append makes (the seam's seven or nine wrappers included).
WARM_PYTHON_CALLS = {"flush": 18, "fsync": 25}


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_a_warm_append_makes_few_python_calls_and_builds_no_named_tuple(tmp_path: pathlib.Path,
                                                                        durability: str) -> None:
    """The append path's own cost, counted: Python calls per warm append (sys.setprofile),
    none of them a named tuple's constructor (the kept view moves forward in place, the
    usual control-file head is read without a Head)."""
    store = SessionStore(str(tmp_path), durability=durability)  # type: ignore[arg-type]
    message = {"role": "assistant", "content": "ok", "tool_calls": [{"id": "c1", "type": "function"}]}
    for _ in range(3):
        store.append(KEY, message)
    calls: list[str] = []

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            calls.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        for _ in range(10):
            store.append(KEY, message)
    finally:
        sys.setprofile(None)

    assert len(calls) / 10 <= WARM_PYTHON_CALLS[durability], sorted(set(calls))
    assert "<lambda>" not in calls and "__new__" not in calls
    assert store.get_message_count(KEY) == 13


def test_messages_with_an_id_and_nested_appends_stay_warm(warm: SessionStore, tmp_path: pathlib.Path) -> None:
    own = ids.next_id(warm.load(KEY)[-1].id)
    assert probe(lambda: warm.append(KEY, {"role": "user", "content": "own id", "id": own})).sequence("seam") \
        == WARM_CALLS
    with warm.lock(KEY):  # the guard is held already: no lock, no control file read
        p = probe(lambda: warm.append(KEY, {"role": "user", "content": "nested"}))
    assert p.sequence("seam") == ["lstat", "write", "pwrite"]
    assert probe(lambda: warm.append(KEY, {"role": "user", "content": "warm"})).sequence("seam") == WARM_CALLS
    assert contents(tmp_path)[-3:] == ["own id", "nested", "warm"]
    assert warm.get_message_count(KEY) == 6


def plain_tool_appends(root: pathlib.Path, data: bytes) -> None:
    with open(transcript(root), "ab") as f:
        f.write(data)


@pytest.mark.parametrize("data", [
    b'{"id":"zz',  # a torn tail: saved, then cut before the append
    b"not json\n",  # a corrupt last line: kept, stepped over for the id
])
def test_a_changed_tail_is_read_again(warm: SessionStore, tmp_path: pathlib.Path, data: bytes) -> None:
    plain_tool_appends(tmp_path, data)

    p = probe(lambda: warm.append(KEY, {"role": "user", "content": "new"}))

    assert transcript_reads(p) >= 1
    assert SessionStore(str(tmp_path)).load(KEY)[-1].content == "new"
    raw = pathlib.Path(transcript(tmp_path)).read_bytes()
    assert (b"not json\n" in raw) == (data == b"not json\n") and b'{"id":"zz{' not in raw
    again = probe(lambda: warm.append(KEY, {"role": "user", "content": "warm again"}))
    assert transcript_reads(again) == 0 and again.os["os.open"] == 0  # warm again


def test_an_odd_counter_is_made_even_first(warm: SessionStore, tmp_path: pathlib.Path) -> None:
    seq = counter(tmp_path)
    fd = os.open(SessionFiles.of(str(tmp_path), KEY).lock, os.O_RDWR)
    try:  # a writer that died in the middle of an in-place change
        os.pwrite(fd, struct.pack("<Q", seq | 1), SEQ_OFFSET)
    finally:
        os.close(fd)

    p = probe(lambda: warm.append(KEY, {"role": "user", "content": "new"}))

    assert transcript_reads(p) >= 1  # the kept tail is not trusted across a dead writer's change
    assert counter(tmp_path) % 2 == 0
    assert contents(tmp_path) == ["m0", "m1", "m2", "new"]


def test_a_pending_record_of_a_dead_writer_is_completed_first(warm: SessionStore, tmp_path: pathlib.Path) -> None:
    script = textwrap.dedent(f"""
        from jsonl_sessions import SessionStore, ids
        from jsonl_sessions.testing.faults import FaultInjector
        store = SessionStore({str(tmp_path)!r}, durability="flush")
        with FaultInjector("write", 1, torn=True, action="exit"):
            store.append_many({KEY!r}, [{{"role": "user", "content": "b1"}}, {{"role": "user", "content": "b2"}}])
    """)
    done = subprocess.run([sys.executable, "-c", script], env=child_env(), timeout=60, check=False)
    assert done.returncode != 0  # it died inside the batch's write, its record committed

    warm.append(KEY, {"role": "user", "content": "new"})

    assert contents(tmp_path) == ["m0", "m1", "m2", "new"]  # the unacknowledged batch rolled back
    assert warm.get_message_count(KEY) == 4


def test_a_foreign_rename_over_the_transcript_is_noticed(warm: SessionStore, tmp_path: pathlib.Path) -> None:
    other = SessionStore(str(tmp_path / "other"), durability="flush")
    other.append(KEY, {"role": "user", "content": "theirs"})
    os.replace(transcript(tmp_path / "other"), transcript(tmp_path))

    p = probe(lambda: warm.append(KEY, {"role": "user", "content": "new"}))

    assert p.os["os.open"] == 1 and transcript_reads(p) >= 1  # the new file opened, its tail read
    assert contents(tmp_path) == ["theirs", "new"]


@pytest.mark.parametrize("durability", ["flush", "fsync"])
@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO])
def test_a_failed_warm_write_leaves_nothing_and_the_next_append_works(tmp_path: pathlib.Path, err: int,
                                                                      durability: str) -> None:
    store = SessionStore(str(tmp_path), durability=durability)  # type: ignore[arg-type]
    for i in range(3):
        store.append(KEY, {"role": "user", "content": f"m{i}"})
    size = os.path.getsize(transcript(tmp_path))
    with FaultInjector("write", 1, err=err, torn=True), pytest.raises(OSError) as raised:
        store.append(KEY, {"role": "user", "content": "lost"})

    assert raised.value.errno == err
    assert os.path.getsize(transcript(tmp_path)) == size and counter(tmp_path) % 2 == 0
    store.append(KEY, {"role": "user", "content": "new"})
    assert contents(tmp_path) == ["m0", "m1", "m2", "new"]
    assert store.get_message_count(KEY) == 4


def test_a_changed_counter_alone_is_noticed(warm: SessionStore, tmp_path: pathlib.Path) -> None:
    """As on a file system with coarse mtimes: another process rewrote the last line in
    place (same size) and the mtime still reads as before; the counter tells."""
    before = os.stat(transcript(tmp_path))
    script = textwrap.dedent(f"""
        from jsonl_sessions import SessionStore
        SessionStore({str(tmp_path)!r}).update_last({KEY!r}, {{"role": "user", "content": "mX"}})
    """)
    subprocess.run([sys.executable, "-c", script], env=child_env(), timeout=60, check=True)
    os.utime(transcript(tmp_path), ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(transcript(tmp_path)).st_size == before.st_size

    p = probe(lambda: warm.append(KEY, {"role": "user", "content": "new"}))

    assert transcript_reads(p) >= 1
    assert contents(tmp_path) == ["m0", "m1", "mX", "new"]


# -- group commit --------------------------------------------------------------------------
def test_a_lone_durable_append_does_not_queue(store: SessionStore, tmp_path: pathlib.Path) -> None:
    guard_names = called_functions(lambda: store.append(KEY, user("alone")))
    batch_names = called_functions(lambda: store.append_many(KEY, [user("b1"), user("b2")]))

    assert not guard_names & QUEUE_FUNCTIONS and not batch_names & QUEUE_FUNCTIONS
    assert "_write" in guard_names  # the one write function, reached directly
    assert contents(tmp_path) == ["first", "alone", "b1", "b2"]


def user(text: str) -> dict[str, object]:
    return {"role": "user", "content": text}


def test_queued_appends_share_one_write_and_one_fsync(store: SessionStore, tmp_path: pathlib.Path) -> None:
    probes: list[SyscallProbe] = []

    def probe() -> SyscallProbe:
        probes.append(SyscallProbe())
        return probes[-1]

    outcomes = run_group(store, [user(f"t{i}") for i in range(THREADS)], probe)

    assert all(isinstance(o, str) for o in outcomes), outcomes
    assert probes[0].seam["fsync"] == 1 and probes[0].seam["write"] == 1
    got = contents(tmp_path)
    assert got[0] == "first" and sorted(got[1:]) == sorted(f"t{i}" for i in range(THREADS))
    # every thread got the id of its own message
    by_content = {str(m.content): m.id for m in store.try_load(KEY)}
    assert [by_content[f"t{i}"] for i in range(THREADS)] == outcomes
    assert store.get_message_count(KEY) == THREADS + 1


@pytest.mark.parametrize("kind", ["fsync", "write"])
def test_a_failed_fsync_or_write_fails_every_append_it_covered(store: SessionStore, tmp_path: pathlib.Path,
                                                             kind: str) -> None:
    outcomes = run_group(store, [user(f"t{i}") for i in range(THREADS)],
                         lambda: FaultInjector(kind, 1, err=errno.EIO))

    assert all(isinstance(o, OSError) and o.errno == errno.EIO for o in outcomes), outcomes
    assert len({id(o) for o in outcomes}) == THREADS  # no exception object raised in two threads
    assert contents(tmp_path) == ["first"]  # nothing unacknowledged on disk
    # ... nor later: the next append (and its recovery) brings none of them back
    store.append(KEY, user("after"))
    assert contents(tmp_path) == ["first", "after"]
    assert store.get_message_count(KEY) == 2


def test_a_message_that_cannot_be_written_fails_only_its_caller(store: SessionStore, tmp_path: pathlib.Path) -> None:
    ahead = ids.encode((ids.now_ms() + 3_600_000) << 80)  # sorts after every id made meanwhile
    messages = [user("a"), user("b"), {"role": "user", "content": math.nan}, user("c"),
                {"role": "user", "content": "d", "id": ahead}, {"role": "user", "content": "e", "id": ahead}]

    outcomes = run_group(store, messages)

    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert isinstance(outcomes[2], SerializationError)
    assert len(errors) == 2 and any(isinstance(e, DuplicateMessageError) for e in errors), outcomes
    got = contents(tmp_path)
    assert got[0] == "first" and sorted(got[1:]) == ["a", "b", "c", "d" if isinstance(outcomes[5], BaseException)
                                                     else "e"]


def test_an_append_inside_a_lock_block_writes_only_its_own_message(store: SessionStore,
                                                                  tmp_path: pathlib.Path) -> None:
    done = threading.Event()

    def other() -> None:
        store.append(KEY, user("other"))
        done.set()

    with store.lock(KEY) as guard:
        t = threading.Thread(target=other)
        t.start()
        queued(guard, 1)
        store.append(KEY, user("mine"))
        assert contents(tmp_path) == ["first", "mine"]  # the other thread's did not land inside the block
    t.join(60)
    assert done.is_set() and contents(tmp_path) == ["first", "mine", "other"]


def test_a_waiting_append_times_out_and_is_never_written(tmp_path: pathlib.Path) -> None:
    store = SessionStore(str(tmp_path), durability="fsync", lock_timeout=0.05)
    store.append(KEY, user("first"))
    outcome: list[BaseException | str] = []

    def late() -> None:
        try:
            outcome.append(store.append(KEY, user("late")))
        except BaseException as exc:  # noqa: BLE001
            outcome.append(exc)

    with store.lock(KEY) as guard:
        t = threading.Thread(target=late)
        t.start()
        t.join(60)
        assert not guard.pending
    assert isinstance(outcome[0], TimeoutError)
    store.append(KEY, user("next"))
    assert contents(tmp_path) == ["first", "next"]


def test_threads_of_one_process_contending_for_a_session_share_fsyncs(store: SessionStore, tmp_path: pathlib.Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight threads appending durably to one session, with nothing else holding the guard:
    an append that finds the guard taken by another thread's append joins the queue
    instead of waiting for the guard on its own, so most fsyncs cover several appends.
    (The fsync is slowed to 2 ms through the platform seam, as a disk would, so the
    threads really overlap.)"""
    real_fsync = _platform.fsync
    fsyncs = [0]

    def slow_fsync(fd: int) -> None:
        fsyncs[0] += 1
        time.sleep(0.002)
        real_fsync(fd)

    monkeypatch.setattr(_platform, "fsync", slow_fsync)
    per_thread, threads = 40, 8

    def appender(t: int) -> None:
        for i in range(per_thread):
            store.append(KEY, user(f"{t}-{i}"))

    workers = [threading.Thread(target=appender, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)

    appended = per_thread * threads
    assert len(contents(tmp_path)) == appended + 1
    assert fsyncs[0] <= appended // 2, f"{fsyncs[0]} fsyncs for {appended} appends: the appends did not group"
