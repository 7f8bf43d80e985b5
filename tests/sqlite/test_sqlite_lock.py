"""``lock(key)`` on the SQLite backend: it keeps other writers out, it is not a transaction.

Each call inside a block is atomic and durable when it returns, exactly as outside one:
another connection (or process) reads it at once, and a SIGKILL before the block ends
loses nothing acknowledged. Meanwhile writers of other threads and processes wait (up to
``lock_timeout``, then :class:`LockTimeoutError`), between the block's calls too.
"""

from __future__ import annotations

import os
import pathlib
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from _budget import sized
from sigkill import ENV, kill_after

from jsonl_sessions import InvalidMessageError, LockTimeoutError
from jsonl_sessions.sqlite import SqliteSessionStore

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")

#: Tries one append with a short lock_timeout; prints "ok" or "timeout".
WRITER = textwrap.dedent("""
    import sys
    from jsonl_sessions import LockTimeoutError
    from jsonl_sessions.sqlite import SqliteSessionStore
    store = SqliteSessionStore(sys.argv[1], lock_timeout=float(sys.argv[2]))
    try:
        store.append(sys.argv[3], {"role": "user", "content": "from the other process"})
    except LockTimeoutError as exc:
        print("timeout", exc.holder_pid)
    else:
        print("ok")
""")

#: Appends messages 0, 1, ... inside one lock() block, printing each number once the
#: append returned, then waits inside the block until it is killed.
HOLDER = textwrap.dedent("""
    import sys, time
    from jsonl_sessions.sqlite import SqliteSessionStore
    store = SqliteSessionStore(sys.argv[1])
    with store.lock("k"):
        for i in range(int(sys.argv[2])):
            if i % 3 == 2:
                store.update_last("k", {"role": "user", "content": str(i)})
            else:
                store.append("k", {"role": "user", "content": str(i)})
            print(i, flush=True)
        time.sleep(600)
""")


def _other_process_writes(path: pathlib.Path, key: str, timeout: float) -> str:
    out = subprocess.run([sys.executable, "-c", WRITER, str(path), str(timeout), key], env=ENV, capture_output=True,
                         text=True, timeout=60, check=True)
    return out.stdout.strip()


def _rows(path: pathlib.Path, key: str) -> list[bytes]:
    """The session's rows read through a plain sqlite3 connection (another reader)."""
    conn = sqlite3.connect(path, timeout=10)
    try:
        return [line for (line,) in conn.execute(
            "SELECT m.line FROM messages m JOIN sessions s ON m.session = s.id WHERE s.key = ? ORDER BY m.seq",
            (key,))]
    finally:
        conn.close()


def test_each_call_inside_lock_commits_when_it_returns(tmp_path: pathlib.Path) -> None:
    """Inside a block, every call is visible to other connections as soon as it returns
    (each is its own transaction); a call that raised is undone alone."""
    path = tmp_path / "s.db"
    store = SqliteSessionStore(path)
    other = SqliteSessionStore(path)
    with store.lock("k"):
        first = store.append("k", {"role": "user", "content": "one"})
        assert [m.id for m in other.load("k")] == [first], "an acknowledged append is invisible to other readers"
        assert len(_rows(path, "k")) == 1
        store.append_many("k", [{"role": "user", "content": "two"}, {"role": "user", "content": "three"}])
        with pytest.raises(RuntimeError), store.lock("k"):  # a nested block that raises keeps what its calls did
            store.set_session_name("k", "named")
            raise RuntimeError("the caller's block fails")
        assert other.get_session_name("k") == "named"
        with pytest.raises(InvalidMessageError):  # a call that raised is undone alone
            store.append_many("k", [{"role": "user", "content": "never"}, {"role": "user", "id": "0"}])
        assert store.remove_last("k") is True
        assert [m.content for m in other.load("k")] == ["one", "two"]
    assert [m.content for m in other.load("k")] == ["one", "two"]
    store.close()
    other.close()


def test_other_writers_wait_for_the_whole_block(tmp_path: pathlib.Path) -> None:
    """Between the block's calls (each already committed) another process's writer and
    another thread's writer still wait: LockTimeoutError after their short timeout,
    naming the holder's pid. After the block they write."""
    path = tmp_path / "s.db"
    store = SqliteSessionStore(path)
    store.append("k", {"role": "user", "content": "before"})
    timed_out: list[BaseException] = []

    def thread_writer() -> None:
        other = SqliteSessionStore(path, lock_timeout=0.2)
        try:
            other.append("t", {"role": "user", "content": "thread"})
        except LockTimeoutError as exc:
            timed_out.append(exc)
        finally:
            other.close()

    with store.lock("k"):
        store.append("k", {"role": "user", "content": "inside"})
        assert _other_process_writes(path, "p", 0.2) == f"timeout {os.getpid()}"
        thread = threading.Thread(target=thread_writer)
        thread.start()
        thread.join(30)
        assert len(timed_out) == 1 and timed_out[0].holder_pid == os.getpid()  # type: ignore[attr-defined]
        store.append("k", {"role": "user", "content": "inside again"})
        assert _other_process_writes(path, "other key", 0.2).startswith("timeout")  # the lock is the file's
    assert _other_process_writes(path, "p", 5) == "ok"
    assert [m.content for m in store.load("k")] == ["before", "inside", "inside again"]
    assert store.session_exists("p") and not store.session_exists("t")
    store.close()


def _state_after(last: int) -> list[str]:
    """The session once HOLDER's calls 0..last returned."""
    out: list[str] = []
    for i in range(min(last, 7) + 1):
        if i % 3 == 2:
            out[-1] = str(i)
        else:
            out.append(str(i))
    return out


@pytest.mark.parametrize("trial", range(sized(2, 20)))
def test_sigkill_inside_lock_loses_nothing_acknowledged(tmp_path: pathlib.Path, trial: int) -> None:
    """A process killed (SIGKILL) inside a lock() block, after some of its calls returned:
    every acknowledged call is in the file (and at most the one in flight on top), the
    block's end never came, the lock is free again and the file verifies clean."""
    rng = random.Random(trial)
    path = tmp_path / "s.db"
    SqliteSessionStore(path).close()
    want = rng.randrange(1, 8)
    acked = kill_after(["-c", HOLDER, str(path), "8"], want, rng)
    store = SqliteSessionStore(path, lock_timeout=5)
    contents = [m.content for m in store.load("k")]
    assert contents in (_state_after(acked), _state_after(acked + 1)), f"acknowledged up to {acked}, found {contents}"
    store.append("k", {"role": "user", "content": "after"})  # the dead holder's lock is gone
    assert store.verify().ok, store.verify().findings
    store.close()


#: Forks a child that lingers, from inside a lock() block; prints the child's pid.
FORKER = textwrap.dedent("""
    import os, sys, time
    from jsonl_sessions.sqlite import SqliteSessionStore
    store = SqliteSessionStore(sys.argv[1])
    with store.lock("k"):
        store.append("k", {"role": "user", "content": "held"})
        child = os.fork()
        if child == 0:
            time.sleep(120)
            os._exit(0)
        print(child, flush=True)
        time.sleep(600)
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_keep_a_dead_holders_lock(tmp_path: pathlib.Path) -> None:
    """A process forks inside a lock() block and is then killed: its child, still
    running, does not hold the lock (it closed its inherited descriptor of the lock
    file at the fork), so writers go on."""
    path = tmp_path / "s.db"
    SqliteSessionStore(path).close()
    proc = subprocess.Popen([sys.executable, "-c", FORKER, str(path)], stdout=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        store = SqliteSessionStore(path, lock_timeout=1)
        store.append("k", {"role": "user", "content": "after"})
        assert [m.content for m in store.load("k")] == ["held", "after"]
        store.close()
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        os.kill(child, signal.SIGKILL)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fork_while_the_store_is_busy_does_not_hang_the_child(tmp_path: pathlib.Path) -> None:
    """A fork taken while a thread of the parent is inside the store's bookkeeping (its
    internal mutex held): the child's fork handler does not wait for that mutex (its
    holder is not in the child), and the child writes."""
    store = SqliteSessionStore(tmp_path / "s.db")
    store.append("k", {"role": "user", "content": "parent"})
    with store._db._mutex:  # as if another thread were opening its connection right now
        pid = os.fork()
        if pid == 0:  # the child: exit status 0 only if its write worked
            ok = False
            try:
                store.append("k", {"role": "user", "content": "child"})
                ok = True
            finally:
                os._exit(0 if ok else 1)
    deadline = time.monotonic() + 20
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung")
    assert os.waitstatus_to_exitcode(done[1]) == 0
    assert [m.content for m in store.load("k")] == ["parent", "child"]
    store.close()
