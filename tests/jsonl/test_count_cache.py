"""The message count on JSONL files: O(1) while the cache holds, and right after another
tool appended or rewrote the transcript. (Exact after every kind of change, on every
backend: contract/test_message_values.py.)"""

from __future__ import annotations

import os
import pathlib
import struct
import subprocess
import sys
from collections.abc import Iterator

import orjson
import pytest
from _child import child_env

from jsonl_sessions import SessionNotFoundError, SessionStore, _platform
from jsonl_sessions.keys import key_to_stem


def count(store: SessionStore, key: str) -> int | None:
    try:
        return store.get_message_count(key)
    except SessionNotFoundError:
        return None


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """Every pread through the platform seam, as (file name, bytes read)."""
    seen: list[tuple[str, int]] = []
    real = _platform.pread

    def pread(fd: int, size: int, offset: int) -> bytes:
        data = real(fd, size, offset)
        seen.append((os.path.basename(os.readlink(f"/proc/self/fd/{fd}")), len(data)))
        return data

    monkeypatch.setattr(_platform, "pread", pread)
    yield seen


def test_count_is_o1_while_the_cache_holds(store: SessionStore, reads: list[tuple[str, int]]) -> None:
    store.append_many("k", [{"role": "user", "content": "m" * 100} for _ in range(2000)])
    store.append("k", {"role": "user", "content": "one more"})
    store.remove_last("k")
    reads.clear()
    assert count(store, "k") == 2000
    transcript = key_to_stem("k") + ".jsonl"
    assert sum(n for name, n in reads if name == transcript) == 0, reads


def test_count_follows_lines_appended_by_another_tool(store: SessionStore, reads: list[tuple[str, int]]) -> None:
    store.append_many("k", [{"role": "user", "content": "m" * 100} for _ in range(1000)])
    assert count(store, "k") == 1000
    path = pathlib.Path(store.root) / (key_to_stem("k") + ".jsonl")
    extra = b"".join(orjson.dumps({"id": f"7ZZZZZZZZZZZZZZZZZZZZZZZZ{i}", "role": "user", "content": i}) + b"\n"
                     for i in range(3))
    with open(path, "ab") as f:
        f.write(extra + b'{"torn')
    assert count(store, "k") == 1003  # recounted once (the file no longer matches the cache)...
    reads.clear()
    assert count(store, "k") == 1003  # ...and cached again
    transcript = key_to_stem("k") + ".jsonl"
    assert sum(n for name, n in reads if name == transcript) == 0


def test_count_survives_an_in_place_rewrite_by_another_tool(store: SessionStore) -> None:
    store.append_many("k", [{"role": "user", "content": "x" * 50} for _ in range(4)])
    assert count(store, "k") == 4
    path = pathlib.Path(store.root) / (key_to_stem("k") + ".jsonl")
    lines = path.read_bytes().splitlines(keepends=True)
    with open(path, "wb") as f:  # same inode, no lock, no counter change, a longer file
        f.write(lines[0][:-1] + b" " * 400 + b"\n" + lines[1])
    assert count(store, "k") == 2


def test_count_survives_a_rewrite_by_another_tool(store: SessionStore) -> None:
    store.append_many("k", [{"role": "user", "content": str(i)} for i in range(10)])
    assert count(store, "k") == 10
    path = pathlib.Path(store.root) / (key_to_stem("k") + ".jsonl")
    lines = path.read_bytes().splitlines(keepends=True)
    tmp = path.with_name("elsewhere")
    tmp.write_bytes(b"".join(lines[:4]))
    os.replace(tmp, path)  # a new inode, no lock, no counter change
    assert count(store, "k") == 4
    assert count(SessionStore(store.root), "k") == 4


def test_an_append_after_another_process_wrote_keeps_the_cache_current(tmp_path: pathlib.Path) -> None:
    """The guard takes the count cache another process wrote (not the one it kept from its own
    last append), so the append after it keeps the cache current: the next count reads no
    transcript byte."""
    store = SessionStore(str(tmp_path), durability="flush")
    store.append("k", {"role": "user", "content": "here"})
    worker = ("import sys; from jsonl_sessions import SessionStore; s = SessionStore(sys.argv[1], durability='flush')\n"
              "for i in range(3): s.append('k', {'role': 'user', 'content': f'there {i}'})")
    subprocess.run([sys.executable, "-c", worker, str(tmp_path)], check=True, env=child_env(), timeout=60)
    store.append("k", {"role": "user", "content": "here again"})

    lock = tmp_path / (key_to_stem("k") + ".lock")
    transcript = tmp_path / (key_to_stem("k") + ".jsonl")
    _end, seq, ino, size, zero, lines, cached_seq = struct.unpack_from("<7Q", lock.read_bytes())
    st = os.stat(transcript)
    assert (ino, size, zero, lines, cached_seq) == (st.st_ino, st.st_size, 0, 5, seq)


def test_a_cache_an_earlier_version_wrote_is_read_and_one_it_cannot_trust_is_recounted(
        store: SessionStore, reads: list[tuple[str, int]]) -> None:
    """Earlier versions wrote the transcript's mtime in the cache's third word and compared
    it; this one writes zero there and compares inode, size and counter only. A cache with
    an mtime in that word (an earlier version's) is used as it is; one naming another size
    is not, whatever that word holds."""
    store.append_many("k", [{"role": "user", "content": str(i)} for i in range(7)])
    store.append("k", {"role": "user", "content": "seven"})
    lock = pathlib.Path(store.root) / (key_to_stem("k") + ".lock")
    transcript = pathlib.Path(store.root) / (key_to_stem("k") + ".jsonl")
    fixed = bytearray(lock.read_bytes()[:56])
    assert struct.unpack_from("<Q", fixed, 32)[0] == 0  # what this version writes
    struct.pack_into("<Q", fixed, 32, os.stat(transcript).st_mtime_ns)  # as an earlier version
    with open(lock, "r+b") as f:
        f.write(fixed)
    reads.clear()
    assert count(SessionStore(store.root), "k") == 8
    assert sum(n for name, n in reads if name == transcript.name) == 0, reads

    struct.pack_into("<Q", fixed, 24, os.path.getsize(transcript) - 1)  # a size the file does not have
    struct.pack_into("<Q", fixed, 40, 99)
    with open(lock, "r+b") as f:
        f.write(fixed)
    reads.clear()
    assert count(SessionStore(store.root), "k") == 8
    assert sum(n for name, n in reads if name == transcript.name) == os.path.getsize(transcript)
