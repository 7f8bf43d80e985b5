"""The syscall probe (tests/helpers/syscalls.py) counts what it claims: seam calls, the system calls
under them, calls that bypass the seam, and restores everything afterwards."""

from __future__ import annotations

import fcntl
import mmap
import os
import pathlib

import pytest
from syscalls import SyscallProbe, probe, seam_functions

from jsonl_sessions import SessionStore, _platform


def test_counts_seam_calls_and_the_system_calls_under_them(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "f")

    def op() -> None:
        fd = _platform.open_file(path, os.O_RDWR | os.O_CREAT)
        _platform.write(fd, b"abc")
        _platform.fsync(fd)
        assert _platform.pread(fd, 10, 0) == b"abc"  # a short read of a regular file is its end
        _platform.close(fd)
        _platform.fsync_dir(str(tmp_path))  # a seam call making three system calls

    p = probe(op)

    assert p.sequence("seam") == ["open_file", "write", "fsync", "pread", "close", "fsync_dir", "fsync"]
    assert p.sequence("os") == ["os.open", "os.write", "os.fsync", "os.pread", "os.close",
                                "os.open", "os.fsync", "os.close"]
    assert p.seam["fsync_dir"] == 1 and p.os["os.open"] == 2


def test_counts_calls_that_bypass_the_seam_and_restores_everything(tmp_path: pathlib.Path) -> None:
    before = {name: getattr(_platform, name) for name in seam_functions()}
    os_before = (os.open, os.lstat, fcntl.flock, mmap.mmap)
    path = tmp_path / "f"
    path.write_bytes(b"x" * 4096)

    with SyscallProbe() as p:
        os.lstat(path)
        fd = os.open(path, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        m = mmap.mmap(fd, 4096)
        assert isinstance(m, mmap.mmap) and m[:1] == b"x"  # still a real mapping
        m.close()
        os.close(fd)

    assert p.sequence("os") == ["os.lstat", "os.open", "fcntl.flock", "mmap.mmap", "os.close"]
    assert p.seam == {}
    assert {name: getattr(_platform, name) for name in seam_functions()} == before
    assert (os.open, os.lstat, fcntl.flock, mmap.mmap) == os_before
    with pytest.raises(RuntimeError), p, p:  # re-entering an active probe is refused
        pass


def test_an_append_is_seen_through_the_store(tmp_path: pathlib.Path) -> None:
    store = SessionStore(str(tmp_path), durability="fsync")
    store.append("k", {"role": "user", "content": "hi"})

    p = probe(lambda: store.append("k", {"role": "user", "content": "again"}))

    # Whatever the engine does, a durable append writes its line and fsyncs it.
    assert p.seam["write"] + p.seam["pwrite"] >= 1 and p.seam["fsync"] >= 1
    assert p.os["os.fsync"] + p.os["os.fdatasync"] >= p.seam["fsync"]
