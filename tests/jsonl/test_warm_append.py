"""The lean append of one message to a warm session ("flush" mode): it is taken in the
plain case, with exactly the expected system calls, and every other state of the session
goes to the general append, which then does what it always did."""

from __future__ import annotations

import errno
import os
import pathlib
import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from _child import child_env
from syscalls import probe

import jsonl_sessions.jsonl.append
from jsonl_sessions import SessionStore, ids
from jsonl_sessions.jsonl import messages
from jsonl_sessions.jsonl.control import SEQ_OFFSET
from jsonl_sessions.jsonl.layout import SessionFiles
from jsonl_sessions.testing.faults import FaultInjector

KEY = "k"
WARM_CALLS = ["try_lock", "pread", "lstat", "write", "fstat", "pwrite", "unlock"]


class GeneralPath:
    """Counts the appends that went to the general path (the real one still runs)."""

    def __init__(self) -> None:
        self.calls = 0


@pytest.fixture
def general(monkeypatch: pytest.MonkeyPatch) -> Iterator[GeneralPath]:
    spy = GeneralPath()
    real = messages.append_many

    def counted(*args: object) -> list[str]:
        spy.calls += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(jsonl_sessions.jsonl.append, "append_many", counted)
    yield spy


@pytest.fixture
def store(tmp_path: pathlib.Path) -> SessionStore:
    store = SessionStore(str(tmp_path), durability="flush")
    for i in range(3):
        store.append(KEY, {"role": "user", "content": f"m{i}"})
    return store


def contents(root: pathlib.Path) -> list[str]:
    messages = SessionStore(str(root)).try_load(KEY)
    got = [m.id for m in messages]
    assert got == sorted(got) and len(set(got)) == len(got), "ids must strictly increase"
    return [str(m.content) for m in messages]


def transcript(root: pathlib.Path) -> str:
    return SessionFiles.of(str(root), KEY).transcript


def counter(root: pathlib.Path) -> int:
    with open(SessionFiles.of(str(root), KEY).lock, "rb") as f:
        f.seek(SEQ_OFFSET)
        value: int = struct.unpack("<Q", f.read(8))[0]
        return value


def test_a_warm_append_takes_the_lean_path_with_seven_system_calls(store: SessionStore, general: GeneralPath,
                                                                  tmp_path: pathlib.Path) -> None:
    p = probe(lambda: store.append(KEY, {"role": "user", "content": "warm"}))

    assert p.sequence("seam") == WARM_CALLS
    assert p.os["os.open"] == 0 and p.os["os.close"] == 0
    assert general.calls == 0
    assert store.get_message_count(KEY) == 4
    assert contents(tmp_path) == ["m0", "m1", "m2", "warm"]
    # and it stays warm: the view and the count cache it left are right
    store.append(KEY, {"role": "user", "content": "again"})
    assert general.calls == 0
    assert store.get_message_count(KEY) == 5 == len(contents(tmp_path))


def test_messages_with_an_id_and_nested_appends_take_the_general_path(store: SessionStore, general: GeneralPath,
                                                                      tmp_path: pathlib.Path) -> None:
    own = ids.next_id(store.load(KEY)[-1].id)
    store.append(KEY, {"role": "user", "content": "own id", "id": own})
    assert general.calls == 1
    with store.lock(KEY):
        store.append(KEY, {"role": "user", "content": "nested"})
    assert general.calls == 2
    store.append(KEY, {"role": "user", "content": "warm"})
    assert general.calls == 2
    assert contents(tmp_path)[-3:] == ["own id", "nested", "warm"]


def plain_tool_appends(root: pathlib.Path, data: bytes) -> None:
    with open(transcript(root), "ab") as f:
        f.write(data)


@pytest.mark.parametrize("data, kept", [
    (b'{"id":"zz', ["m0", "m1", "m2"]),  # a torn tail: cut before the append
    (b"not json\n", ["m0", "m1", "m2"]),  # a corrupt last line: kept, stepped over for the id
])
def test_a_changed_tail_takes_the_general_path(store: SessionStore, general: GeneralPath, tmp_path: pathlib.Path,
                                              data: bytes, kept: list[str]) -> None:
    plain_tool_appends(tmp_path, data)

    store.append(KEY, {"role": "user", "content": "new"})

    assert general.calls == 1
    assert SessionStore(str(tmp_path)).load(KEY)[-1].content == "new"
    raw = pathlib.Path(transcript(tmp_path)).read_bytes()
    assert (b"not json\n" in raw) == (data == b"not json\n") and b'{"id":"zz{' not in raw
    store.append(KEY, {"role": "user", "content": "warm again"})
    assert general.calls == 1


def test_an_odd_counter_is_made_even_by_the_general_path(store: SessionStore, general: GeneralPath,
                                                        tmp_path: pathlib.Path) -> None:
    seq = counter(tmp_path)
    fd = os.open(SessionFiles.of(str(tmp_path), KEY).lock, os.O_RDWR)
    try:  # a writer that died in the middle of an in-place change
        os.pwrite(fd, struct.pack("<Q", seq | 1), SEQ_OFFSET)
    finally:
        os.close(fd)

    store.append(KEY, {"role": "user", "content": "new"})

    assert general.calls == 1
    assert counter(tmp_path) % 2 == 0
    assert contents(tmp_path) == ["m0", "m1", "m2", "new"]


def test_a_pending_record_of_a_dead_writer_is_completed_first(store: SessionStore, general: GeneralPath,
                                                             tmp_path: pathlib.Path) -> None:
    script = textwrap.dedent(f"""
        from jsonl_sessions import SessionStore, ids
        from jsonl_sessions.testing.faults import FaultInjector
        store = SessionStore({str(tmp_path)!r}, durability="flush")
        with FaultInjector("write", 1, torn=True, action="exit"):
            store.append_many({KEY!r}, [{{"role": "user", "content": "b1"}}, {{"role": "user", "content": "b2"}}])
    """)
    done = subprocess.run([sys.executable, "-c", script], env=child_env(), timeout=60, check=False)
    assert done.returncode != 0  # it died inside the batch's write, its record committed

    store.append(KEY, {"role": "user", "content": "new"})

    assert general.calls == 1
    assert contents(tmp_path) == ["m0", "m1", "m2", "new"]  # the unacknowledged batch rolled back


def test_a_foreign_rename_over_the_transcript_is_noticed(store: SessionStore, general: GeneralPath,
                                                        tmp_path: pathlib.Path) -> None:
    other = SessionStore(str(tmp_path / "other"), durability="flush")
    other.append(KEY, {"role": "user", "content": "theirs"})
    os.replace(transcript(tmp_path / "other"), transcript(tmp_path))
    general.calls = 0

    store.append(KEY, {"role": "user", "content": "new"})

    assert general.calls == 1
    assert contents(tmp_path) == ["theirs", "new"]


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO])
def test_a_failed_warm_write_leaves_nothing_and_the_next_append_works(store: SessionStore, general: GeneralPath,
                                                                      tmp_path: pathlib.Path, err: int) -> None:
    size = os.path.getsize(transcript(tmp_path))
    with FaultInjector("write", 1, err=err, torn=True), pytest.raises(OSError) as raised:
        store.append(KEY, {"role": "user", "content": "lost"})

    assert raised.value.errno == err and general.calls == 0  # it failed on the lean path
    assert os.path.getsize(transcript(tmp_path)) == size and counter(tmp_path) % 2 == 0
    store.append(KEY, {"role": "user", "content": "new"})
    assert contents(tmp_path) == ["m0", "m1", "m2", "new"]
    assert store.get_message_count(KEY) == 4


def test_a_changed_counter_alone_takes_the_general_path(store: SessionStore, general: GeneralPath,
                                                       tmp_path: pathlib.Path) -> None:
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

    store.append(KEY, {"role": "user", "content": "new"})

    assert general.calls == 1
    assert contents(tmp_path) == ["m0", "m1", "mX", "new"]
