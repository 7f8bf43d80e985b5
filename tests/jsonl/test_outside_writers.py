"""Another process appends complete lines to a transcript while the store appends to it.

docs/format.md ("Other writers"): the store never deletes a complete line and never
cuts bytes it has not saved. A large ``write`` becomes visible to other processes page by
page, so a store append can find a line in progress as a "torn tail"; it must wait for it
rather than cut it (which would also delete every line written meanwhile). The writer
here ignores the lock on purpose, with one plain ``write`` per line; the other tests
show the locked ways (``append_lines``, ``jsonl-sessions import - --append``).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from _budget import sized
from _child import child_env

from jsonl_sessions import SessionStore, SessionStoreError, _platform
from jsonl_sessions.jsonl import torn
from jsonl_sessions.jsonl.layout import SessionFiles

KEY = "shared"

#: Appends complete lines (one plain write each, no lock) until the stop file exists; then
#: prints how many lines it wrote (every write returned in full).
WRITER = r"""
import os, sys, json
path, stop, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
n = 0
while not os.path.exists(stop):
    line = json.dumps({"role": "tool", "content": "x" * size, "outside": n}).encode() + b"\n"
    assert os.write(fd, line) == len(line)
    n += 1
print(n, flush=True)
"""


def _lines(path: pathlib.Path) -> list[dict[str, object]]:
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    return [orjson.loads(line) for line in complete.splitlines()]


@pytest.mark.parametrize("size", [3_000, 20_000, 200_000])
def test_outside_lines_and_store_appends_all_survive(tmp_path: pathlib.Path, size: int) -> None:
    store = SessionStore(tmp_path / "store", durability="flush")
    store.append(KEY, {"role": "user", "content": "start"})
    path = pathlib.Path(SessionFiles.of(str(tmp_path / "store"), KEY).transcript)
    stop = tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(stop), str(size)],
                              stdout=subprocess.PIPE, env=child_env())
    acknowledged: list[str] = []
    try:
        deadline = time.monotonic() + sized(1.0, 15.0)
        while time.monotonic() < deadline or not acknowledged:
            acknowledged.append(store.append(KEY, {"role": "assistant", "content": f"store {len(acknowledged)}"}))
    finally:
        stop.touch()
        out, _ = writer.communicate(timeout=60)
    written = int(out)
    assert writer.returncode == 0 and written > 0
    lines = _lines(path)
    outside = sorted(line["outside"] for line in lines if "outside" in line)  # type: ignore[type-var]
    assert outside == list(range(written)), f"{written - len(set(outside))} of {written} outside lines lost"
    ids = [line.get("id") for line in lines if "outside" not in line]
    assert ids[1:] == acknowledged  # every acknowledged append, once, in order
    assert len(lines) == 1 + written + len(acknowledged)
    # The count cache the appends kept never claims a size the file does not have.
    assert store.get_message_count(KEY) == len(lines) == SessionStore(tmp_path / "store").get_message_count(KEY)
    # Nothing was cut, so nothing was saved: no quarantine file piles up.
    assert not [p for p in os.listdir(tmp_path / "store") if ".quarantine-" in p]


#: The same, through the protocol: each line appended with ``append_lines`` (the session's lock).
LOCKED_WRITER = r"""
import os, sys
from jsonl_sessions import SessionStore, SessionStoreError, _platform
from jsonl_sessions.outside import append_lines
root, key, stop, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
store = SessionStore(root, durability="flush")
n = 0
while not os.path.exists(stop):
    append_lines(store, key, ['{"role": "tool", "content": "%s", "outside": %d}' % ("x" * size, n)])
    n += 1
print(n, flush=True)
"""


def test_a_writer_that_takes_the_lock_interleaves_whole_lines(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    store = SessionStore(root, durability="flush")
    store.append(KEY, {"role": "user", "content": "start"})
    stop = tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, "-c", LOCKED_WRITER, str(root), KEY, str(stop), "200000"],
                              stdout=subprocess.PIPE, env=child_env())
    acknowledged: list[str] = []
    try:
        deadline = time.monotonic() + sized(1.0, 10.0)
        while time.monotonic() < deadline or not acknowledged:
            acknowledged.append(store.append(KEY, {"role": "assistant", "content": len(acknowledged)}))
    finally:
        stop.touch()
        out, _ = writer.communicate(timeout=60)
    loaded = store.try_load(KEY)  # strict: ids increase, every line parses
    assert sorted(m.extra["outside"] for m in loaded if "outside" in m.extra) == list(range(int(out)))
    assert [m.id for m in loaded if m.role == "assistant"] == acknowledged


def test_a_change_in_place_refuses_when_a_line_landed_after_its_tail_read(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """remove_last read the tail, then another process (not holding the lock) appended a
    line: cutting at the old last line's start would delete that line too."""
    store = SessionStore(tmp_path / "store", durability="flush")
    ids = store.append_many(KEY, [{"role": "user", "content": i} for i in range(3)])
    path = pathlib.Path(SessionFiles.of(str(tmp_path / "store"), KEY).transcript)
    store.close()  # nothing kept open: remove_last opens the transcript and reads its tail
    outside = b'{"role":"tool","content":"outside"}\n'
    real = _platform.pread
    landed: list[bool] = []

    def pread(fd: int, size: int, offset: int) -> bytes:
        data = real(fd, size, offset)
        if not landed and os.fstat(fd).st_ino == path.stat().st_ino:  # the tail read of the transcript
            landed.append(True)
            with open(path, "ab") as f:
                f.write(outside)
        return data

    monkeypatch.setattr(_platform, "pread", pread)
    before = path.read_bytes()
    with pytest.raises(SessionStoreError, match="grew while it was being changed"):
        store.remove_last(KEY)
    monkeypatch.undo()
    assert landed and path.read_bytes() == before + outside
    assert [m.id for m in store.try_load(KEY)][:3] == ids
    assert store.remove_last(KEY) and store.try_load(KEY)[-1].id == ids[-1]  # the retry removes the outside line


#: How many polls of the store a torn tail must stand still for (the clock below is virtual).
STABLE_POLLS = 5


class _VirtualClock:
    """Time that moves only when the store sleeps: the wait for a torn tail to stand still
    counts polls, never the machine's speed."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    @staticmethod
    def time_ns() -> int:  # the file's age: real (its fragment was just written: never old)
        return time.time_ns()


@st.composite
def _schedules(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, bytes]]]:
    """A fragment of another tool's line, and when (the n-th ``fstat`` / ``pread`` of the
    store) that tool writes what bytes next: the rest of its line, more lines, maybe the
    start of one more. Concatenated, the pieces are always whole lines and one fragment."""
    lines = [orjson.dumps({"role": "tool", "content": "y" * draw(st.integers(0, 300)), "outside": i}) + b"\n"
             for i in range(draw(st.integers(1, 4)))]
    stream = b"".join(lines)
    stream = stream[: draw(st.integers(len(stream) - 1, len(stream)))]  # the last line may stay unfinished
    cuts = sorted(set(draw(st.lists(st.integers(1, len(stream) - 1), min_size=1, max_size=4))))
    # A writer in the middle of a line never pauses as long as the store waits for a torn
    # tail to stand still (STABLE_POLLS polls): its next write comes within 1-3 calls.
    gaps = draw(st.lists(st.integers(1, STABLE_POLLS - 2), min_size=len(cuts), max_size=len(cuts)))
    at = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    pieces = [stream[a:b] for a, b in zip(cuts, [*cuts[1:], len(stream)], strict=True)]
    return stream[: cuts[0]], list(zip(at, pieces, strict=True))


@settings(deadline=None)
@given(schedule=_schedules())
def test_an_append_never_cuts_a_line_in_progress(schedule: tuple[bytes, list[tuple[int, bytes]]]) -> None:
    """Model: the other tool's bytes form whole lines plus at most a final fragment. However
    its writes fall between the store's reads, an append keeps every line the tool
    completed (once, whole) and its own, and glues nothing to a fragment; it cuts and saves
    a fragment only when nothing finished it, and then that fragment is exactly what the
    one quarantine file holds."""
    fragment, writes = schedule
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(torn, "STABLE_SECONDS", STABLE_POLLS * torn._POLL)
        mp.setattr(torn, "time", _VirtualClock())  # each poll of a torn tail is one step of time
        store = SessionStore(pathlib.Path(tmp) / "store", durability="flush")
        store.append(KEY, {"role": "user", "content": "start"})
        path = pathlib.Path(SessionFiles.of(str(store.root), KEY).transcript)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.write(fd, fragment)
        calls = 0
        pending = list(writes)
        written = [fragment]

        def hook(real: Callable[..., Any]) -> Callable[..., Any]:
            def call(*args: Any) -> Any:
                nonlocal calls
                calls += 1
                while pending and pending[0][0] <= calls:
                    written.append(pending.pop(0)[1])
                    os.write(fd, written[-1])
                return real(*args)
            return call

        mp.setattr(_platform, "fstat", hook(_platform.fstat))
        mp.setattr(_platform, "pread", hook(_platform.pread))
        try:
            new = store.append(KEY, {"role": "assistant", "content": "mine"})
        finally:
            mp.undo()
            os.close(fd)
        outside = b"".join(written)
        finished = outside[: outside.rfind(b"\n") + 1].splitlines(keepends=True)
        data = path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1].splitlines(keepends=True)
        assert [line for line in complete if b'"outside"' in line and line in finished] == finished
        assert sum(1 for line in complete if new.encode() in line) == 1
        saved = [p.read_bytes() for p in pathlib.Path(store.root).iterdir() if ".quarantine-" in p.name]
        cut = [line for line in complete if b'"outside"' in line and line not in finished]
        assert not cut  # no line was glued to a fragment
        unfinished = outside[outside.rfind(b"\n") + 1 :]
        assert saved in ([], [unfinished])  # at most one copy: of the fragment nothing ever finished
        store.close()


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_a_line_landing_just_before_the_append_s_write_is_kept_and_counted(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, durability: str) -> None:
    """A writer ignoring the lock appends a whole line after the store's ``lstat`` and
    before its ``write`` (the store's line lands after it, ``O_APPEND``). The append does
    not stat the file after its write, so it records the end it expects; the file is one
    line longer. Nothing may trust that record: the count is right, the next append reads
    the tail again (its id after the store's last one), and every line loads."""
    store = SessionStore(tmp_path, durability=durability)  # type: ignore[arg-type]
    first = [store.append(KEY, {"role": "user", "content": f"m{i}"}) for i in range(3)]
    path = SessionFiles.of(str(tmp_path), KEY).transcript
    real_write = _platform.write
    landed: list[bytes] = []

    def write(fd: int, data: bytes) -> None:
        if not landed and os.fstat(fd).st_ino == os.stat(path).st_ino:
            landed.append(b'{"role": "tool", "content": "outside"}\n')
            with open(path, "ab") as other:
                other.write(landed[0])
        real_write(fd, data)

    monkeypatch.setattr(_platform, "write", write)
    racing = store.append(KEY, {"role": "assistant", "content": "racing"})
    monkeypatch.setattr(_platform, "write", real_write)
    assert landed

    assert store.get_message_count(KEY) == 5 == SessionStore(tmp_path).get_message_count(KEY)
    after = store.append(KEY, {"role": "user", "content": "after"})
    assert after > racing
    messages = store.load(KEY)
    assert [m.content for m in messages] == ["m0", "m1", "m2", "outside", "racing", "after"]
    assert [m.id for m in messages if m.role != "tool"] == [*first, racing, after]
    assert store.get_message_count(KEY) == 6
