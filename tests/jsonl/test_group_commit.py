"""Group commit: durable appends of several threads to one session share one write and one
fsync; a failed write or fsync fails every append it covered and none of them appears
later; a message that cannot be written fails only its own caller.

Every test makes the group deterministic: the main thread holds the session's guard
(``store.lock``) until all appending threads are queued on it, then lets go."""

from __future__ import annotations

import errno
import math
import pathlib
import threading
import time
from collections.abc import Callable

import pytest
from syscalls import SyscallProbe

from jsonl_sessions import DuplicateMessageError, SerializationError, SessionStore
from jsonl_sessions.jsonl.guard import SessionGuard
from jsonl_sessions.testing import FaultInjector

KEY = "k"
THREADS = 6


def contents(root: pathlib.Path) -> list[str]:
    """What a fresh store reads (ids strictly increasing)."""
    messages = SessionStore(str(root)).try_load(KEY)
    got = [m.id for m in messages]
    assert got == sorted(got) and len(set(got)) == len(got)
    return [str(m.content) for m in messages]


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
    assert contents(tmp_path) == ["first"]  # nothing unacknowledged on disk
    # ... nor later: the next append (and its recovery) brings none of them back
    store.append(KEY, user("after"))
    assert contents(tmp_path) == ["first", "after"]
    assert store.get_message_count(KEY) == 2


def test_a_message_that_cannot_be_written_fails_only_its_caller(store: SessionStore, tmp_path: pathlib.Path) -> None:
    messages = [user("a"), user("b"), {"role": "user", "content": math.nan}, user("c"),
                {"role": "user", "content": "d", "id": "ZZZZ"}, {"role": "user", "content": "e", "id": "ZZZZ"}]

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
