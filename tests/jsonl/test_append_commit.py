"""What an append promises around its commit point: a failure after the line is stored
(releasing the lock) does not fail the call, and a line whose fsync has not succeeded is
never returned to a reader."""

from __future__ import annotations

import errno
import os
import pathlib
import struct
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable

import pytest
from _child import child_env

from jsonl_sessions import SessionQuery, SessionStore, _platform, ids
from jsonl_sessions.jsonl.control import VISIBLE_OFFSET
from jsonl_sessions.jsonl.layout import SessionFiles

KEY = "k"


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


# -- a failed unlock after the append is stored ------------------------------------------

_OTHER_PROCESS_APPENDS = textwrap.dedent(
    """
    import sys
    from jsonl_sessions import SessionStore
    print(SessionStore(sys.argv[1], lock_timeout=5).append(sys.argv[2], {"role": "user", "content": "other"}))
    """
)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_failed_unlock_after_a_stored_append_does_not_fail_it(
        tmp_path: pathlib.Path, durability: str, warm: bool, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    store = SessionStore(tmp_path, durability=durability)  # type: ignore[arg-type]
    if warm:
        store.append(KEY, user("before"))
    real_unlock = _platform.unlock
    failed: list[int] = []

    def unlock_fails_once(fd: int) -> None:
        if not failed:
            failed.append(fd)
            raise OSError(errno.EIO, "injected: unlock")
        real_unlock(fd)

    monkeypatch.setattr(_platform, "unlock", unlock_fails_once)
    new_id = store.append(KEY, user("once"))  # must not raise: the line is stored
    monkeypatch.setattr(_platform, "unlock", real_unlock)

    assert failed, "the injected unlock failure was not reached"
    assert any("releasing the lock" in r.getMessage() for r in caplog.records)
    contents = [m.content for m in store.try_load(KEY)]
    assert contents.count("once") == 1
    assert store.try_load(KEY)[-1].id == new_id
    # The flock was dropped (its descriptor closed): another process gets the lock at once.
    done = subprocess.run([sys.executable, "-c", _OTHER_PROCESS_APPENDS, str(tmp_path), KEY], env=child_env(),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    # And this store still appends (it reopens the lock file).
    store.append(KEY, user("after"))
    assert [m.content for m in store.try_load(KEY)][-3:] == ["once", "other", "after"]


def test_a_failed_unlock_after_a_failed_acquire_still_drops_the_flock(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SessionStore(tmp_path, durability="flush")
    store.append(KEY, user("before"))
    real_pread, real_unlock = _platform.pread, _platform.unlock

    def head_read_fails(fd: int, size: int, offset: int) -> bytes:
        if (size, offset) == (4096, 0):  # the control file's head, read once the flock is taken
            raise OSError(errno.EIO, "injected: pread")
        return real_pread(fd, size, offset)

    def unlock_fails(fd: int) -> None:
        raise OSError(errno.EIO, "injected: unlock")

    monkeypatch.setattr(_platform, "pread", head_read_fails)
    monkeypatch.setattr(_platform, "unlock", unlock_fails)
    with pytest.raises(OSError, match="injected: pread"):
        store.append(KEY, user("failed"))
    monkeypatch.setattr(_platform, "pread", real_pread)
    monkeypatch.setattr(_platform, "unlock", real_unlock)
    done = subprocess.run([sys.executable, "-c", _OTHER_PROCESS_APPENDS, str(tmp_path), KEY], env=child_env(),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr  # the flock went with the closed descriptor
    store.append(KEY, user("after"))
    assert [m.content for m in store.try_load(KEY)] == ["before", "other", "after"]


# -- no reader sees a line before its fsync returned -------------------------------------

#: An id an hour ahead (a caller may give one up to 24 h ahead): sorts after every assigned one.
DIRTY_ID = ids.encode((ids.now_ms() + 3_600_000) << 80)


def test_a_reader_never_returns_a_line_whose_fsync_then_fails(tmp_path: pathlib.Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    store = SessionStore(tmp_path, durability="fsync")
    for i in range(3):
        store.append(KEY, user(f"m{i}"))
    reader = SessionStore(tmp_path, durability="fsync")  # another store: its own view of nothing
    in_fsync = threading.Event()
    reader_done = threading.Event()
    real_fsync = _platform.fsync

    def fsync_blocks_then_fails(fd: int) -> None:
        """The transcript's fsync: wait until the reader has looked, then fail."""
        if not in_fsync.is_set():
            in_fsync.set()
            reader_done.wait(10)
            raise OSError(errno.EIO, "injected: fsync")
        real_fsync(fd)

    outcome: dict[str, BaseException] = {}

    def writer() -> None:
        try:
            store.append(KEY, {"id": DIRTY_ID, "role": "user", "content": "dirty"})
        except OSError as exc:
            outcome["error"] = exc

    monkeypatch.setattr(_platform, "fsync", fsync_blocks_then_fails)
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert in_fsync.wait(10), "the append never reached its fsync"
        # The line is written (in the page cache) but not durable: no reader may return it.
        seen: dict[str, object] = {
            "load": [m.content for m in reader.load(KEY)],
            "try_load": [m.content for m in reader.try_load(KEY)],
            "count": reader.get_message_count(KEY),
            "messages": [m.content for m in reader.get_messages(KEY)],
            "newest": [m.content for m in reader.get_messages(KEY, offset=2)],
            "page": [m.content for m in reader.page(KEY, limit=10).messages],
            "by id": reader.get_message(KEY, DIRTY_ID),
            "search": [md.key for md in reader.search(SessionQuery("dirty"))],
            "listed": [md.message_count for md in reader.list_sessions_with_metadata()],
        }
    finally:
        reader_done.set()
        thread.join(10)
    assert isinstance(outcome.get("error"), OSError), "the injected fsync failure did not fail the append"
    assert seen == {"load": ["m0", "m1", "m2"], "try_load": ["m0", "m1", "m2"], "count": 3,
                    "messages": ["m0", "m1", "m2"], "newest": ["m2"], "page": ["m0", "m1", "m2"], "by id": None,
                    "search": [], "listed": [3]}
    monkeypatch.setattr(_platform, "fsync", real_fsync)
    assert [m.content for m in reader.try_load(KEY)] == ["m0", "m1", "m2"]  # rolled back
    store.append(KEY, user("next"))  # and the session goes on, its lines visible again at once
    assert [m.content for m in reader.try_load(KEY)] == ["m0", "m1", "m2", "next"]
    assert reader.get_message_count(KEY) == 4


def test_a_visible_end_its_dead_writer_left_is_cleared_by_the_next_reader(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path, durability="fsync")
    store.append(KEY, user("durable"))
    files = SessionFiles.of(str(tmp_path), KEY)
    durable_size = os.path.getsize(files.transcript)
    store.append(KEY, user("second"))
    # As if its writer died after the write (or a power loss kept the mark, not its clearing).
    with open(files.lock, "r+b") as f:
        f.seek(VISIBLE_OFFSET)
        f.write(struct.pack("<Q", durable_size + 1))
    store.close()
    reader = SessionStore(tmp_path, durability="fsync")
    assert [m.content for m in reader.try_load(KEY)] == ["durable", "second"]  # the guard was free: stale
    with open(files.lock, "rb") as f:
        assert f.read(8) == bytes(8)
    # Held by a live writer (here: this thread's lock block), the same mark bounds readers.
    with store.lock(KEY):
        with open(files.lock, "r+b") as f:
            f.seek(VISIBLE_OFFSET)
            f.write(struct.pack("<Q", durable_size + 1))
        seen = run_in_thread(lambda: [m.content for m in reader.try_load(KEY)])
        assert seen == ["durable"]
        assert run_in_thread(lambda: reader.get_message_count(KEY)) == 1
    assert [m.content for m in reader.try_load(KEY)] == ["durable", "second"]  # released: stale again, cleared


def run_in_thread(op: Callable[[], object]) -> object:
    """``op()`` run by another thread (this one holds a guard, which it could re-enter)."""
    box: list[object] = []
    thread = threading.Thread(target=lambda: box.append(op()))
    thread.start()
    thread.join(30)
    return box[0]


def test_reads_during_a_durable_append_in_flight_stay_o_page(tmp_path: pathlib.Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """While another thread's durable append waits in its fsync (its line hidden by the
    visible end), the count stays O(1) and a window at the end stays O(window): no reader
    falls back to reading the transcript from its start."""
    store = SessionStore(tmp_path, durability="flush")
    total = 3000
    store.append_many(KEY, [user(f"m{i:05d}" + "x" * 200) for i in range(total)])
    size = os.path.getsize(SessionFiles.of(str(tmp_path), KEY).transcript)
    writer_store = SessionStore(tmp_path, durability="fsync")
    reader = SessionStore(tmp_path, durability="fsync")
    assert reader.get_message_count(KEY) == total  # the count cache is written
    in_fsync = threading.Event()
    reader_done = threading.Event()
    real_fsync, real_pread = _platform.fsync, _platform.pread

    def fsync_waits(fd: int) -> None:
        if not in_fsync.is_set():
            in_fsync.set()
            reader_done.wait(10)
        real_fsync(fd)

    read_bytes = [0]

    def counting_pread(fd: int, n: int, offset: int) -> bytes:
        data = real_pread(fd, n, offset)
        read_bytes[0] += len(data)
        return data

    monkeypatch.setattr(_platform, "fsync", fsync_waits)
    thread = threading.Thread(target=writer_store.append, args=(KEY, user("in flight")))
    thread.start()
    costs: dict[str, int] = {}
    try:
        assert in_fsync.wait(10), "the append never reached its fsync"
        monkeypatch.setattr(_platform, "pread", counting_pread)
        for name, read in (("count", lambda: reader.get_message_count(KEY)),
                           ("window", lambda: reader.get_messages(KEY, limit=2, offset=total - 2)),
                           ("page", lambda: reader.page(KEY, limit=2))):
            read_bytes[0] = 0
            result = read()
            costs[name] = read_bytes[0]
            if name == "count":
                assert result == total
            else:
                assert [m.content[:6] for m in getattr(result, "messages", result)] == ["m02998", "m02999"]
    finally:
        monkeypatch.setattr(_platform, "pread", real_pread)
        reader_done.set()
        thread.join(10)
    assert all(cost < size // 10 for cost in costs.values()), (costs, size)
    assert reader.get_message_count(KEY) == total + 1


def test_a_new_session_whose_directory_fsync_fails_was_never_read_with_its_messages(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Creating a session (its first append) renames the transcript into place, then
    fsyncs the directory; when that fsync fails the session is taken away again. A reader
    in between must not have returned the message that then vanished."""
    store = SessionStore(tmp_path, durability="fsync")
    store.append("other", user("durable already"))
    reader = SessionStore(tmp_path, durability="fsync")
    in_fsync = threading.Event()
    reader_done = threading.Event()
    real_fsync_dir = _platform.fsync_dir
    renamed = [False]

    def fsync_dir_blocks_then_fails(path: str) -> None:
        if os.path.exists(os.path.join(path, "new.jsonl")) and not in_fsync.is_set():
            renamed[0] = True
            in_fsync.set()
            reader_done.wait(10)
            raise OSError(errno.EIO, "injected: directory fsync")
        real_fsync_dir(path)

    outcome: dict[str, BaseException] = {}

    def writer() -> None:
        try:
            store.append("new", user("not durable"))
        except OSError as exc:
            outcome["error"] = exc

    monkeypatch.setattr(_platform, "fsync_dir", fsync_dir_blocks_then_fails)
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert in_fsync.wait(10), "the create never reached its directory fsync"
        seen = {"load": [m.content for m in reader.load("new")], "try_load": [m.content for m in reader.try_load("new")],
                "search": [md.key for md in reader.search(SessionQuery("durable"))]}
    finally:
        reader_done.set()
        thread.join(10)
    assert renamed[0] and isinstance(outcome.get("error"), OSError)
    assert seen == {"load": [], "try_load": [], "search": ["other"]}
    monkeypatch.setattr(_platform, "fsync_dir", real_fsync_dir)
    assert not reader.session_exists("new")
    store.append("new", user("again"))
    assert [m.content for m in reader.try_load("new")] == ["again"]
