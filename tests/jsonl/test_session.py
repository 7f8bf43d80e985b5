"""The JSONL engine's parts that stand for one idea each: a Session object (one session's
operations), the control module (the whole concurrency protocol), FileState (is this
still the same file, unchanged?) and BadLine (a corrupt line), on real files."""

from __future__ import annotations

import os
import pathlib

import pytest

from jsonl_sessions import SessionStore
from jsonl_sessions.compaction import plan_compaction
from jsonl_sessions.errors import CorruptTranscriptError
from jsonl_sessions.jsonl import control
from jsonl_sessions.jsonl.control import RECORD_OFFSET, TailRewrite, encode_record
from jsonl_sessions.jsonl.layout import FileState
from jsonl_sessions.jsonl.session import Session
from jsonl_sessions.jsonl.transcript import BadLine, parse


def _msgs(*texts: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": t} for t in texts]


# -- FileState ------------------------------------------------------------------------------
def test_file_state_tells_an_append_and_a_replace_apart(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a\n")
    seen = FileState.of(os.lstat(path))
    assert seen.same_file(os.lstat(path)) and seen.unchanged(os.lstat(path))
    with open(path, "ab") as f:
        f.write(b"b\n")
    now = os.lstat(path)
    assert seen.same_file(now) and not seen.unchanged(now)  # appended: same file, changed
    other = tmp_path / "g"
    other.write_bytes(b"a\n")
    os.replace(other, path)
    assert not FileState.of(now).same_file(os.lstat(path))  # renamed over: another file


# -- Session --------------------------------------------------------------------------------
@pytest.mark.parametrize("durability", ["fsync", "flush"])
def test_a_session_object_does_what_the_store_does(tmp_path: pathlib.Path, durability: str) -> None:
    store = SessionStore(tmp_path / "s", durability=durability)  # type: ignore[arg-type]
    ids = store.append_many("k", _msgs("a", "b", "c", "d"))
    session = store._session("k")
    assert isinstance(session, Session) and session.key == "k"
    assert [m.content for m in session.load()] == ["a", "b", "c", "d"]
    assert session.count() == 4
    assert [m.content for m in session.window(2, 1)] == ["b", "c"]
    assert [m.content for m in session.page(limit=2).messages] == ["c", "d"]
    assert session.truncate(ids[2]) == 1
    target = store._session("fork")
    assert session.fork(target, ids[1]) == ids[1]
    assert [m.content for m in store.load("fork")] == ["a", "b"]
    assert store.get_session_metadata("fork").parent == "k"  # type: ignore[union-attr]
    assert target.delete() and not store.session_exists("fork")


# -- control: readers complete what a dead writer committed -----------------------------------
def test_a_lock_free_read_completes_a_committed_record_first(tmp_path: pathlib.Path) -> None:
    """A tail rewrite whose writer died after committing its record: the reader, through
    the control module alone, takes the free guard (recovery completes the rewrite) and
    returns the new state, never the one the record replaces."""
    store = SessionStore(tmp_path / "s", durability="flush")
    store.append_many("k", _msgs("a", "b"))
    transcript = tmp_path / "s" / "k.jsonl"
    data = transcript.read_bytes()
    last = data.rindex(b"\n", 0, len(data) - 1) + 1
    line = data[last:].replace(b'"b"', b'"B"')
    lock = tmp_path / "s" / "k.lock"
    lock.write_bytes(lock.read_bytes()[:RECORD_OFFSET].ljust(RECORD_OFFSET, b"\0")
                     + encode_record(TailRewrite(last, line)))
    files = store._session("k").files
    read = control.read_transcript(store._session("k").root, files)
    assert read is not None and read.endswith(line)
    assert len(lock.read_bytes()) == RECORD_OFFSET  # recovery cleared the record
    assert transcript.read_bytes() == data[:last] + line


# -- BadLine: one model of a corrupt line -----------------------------------------------------
def test_every_reader_of_a_corrupt_line_describes_it_alike(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "s", durability="flush")
    store.append_many("k", _msgs("a", "b"))
    transcript = tmp_path / "s" / "k.jsonl"
    with open(transcript, "ab") as f:
        f.write(b"{not json\n")
    data = transcript.read_bytes()
    (bad,) = parse(data, strict=False).bad
    assert isinstance(bad, BadLine) and (bad.line, bad.offset) == (3, data.index(b"{not"))
    with pytest.raises(CorruptTranscriptError) as strict:
        store.try_load("k")
    expected = bad.error("k", str(transcript))
    assert (strict.value.line, strict.value.offset, strict.value.reason) == (bad.line, bad.offset, bad.reason)
    assert str(strict.value) == str(expected)
    problem = plan_compaction(data).problem
    assert problem is not None and problem.corrupt
    assert (problem.line, problem.offset, problem.reason) == (bad.line, bad.offset, bad.reason)
