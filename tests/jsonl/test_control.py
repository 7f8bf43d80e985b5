"""The control file's roll-forward records: typed, validated, and a damaged or unknown
committed record is reported against the control file at the record's own offset."""

from __future__ import annotations

import errno
import pathlib
from typing import Any

import pytest
from syscalls import SyscallProbe

from jsonl_sessions import SessionStore
from jsonl_sessions.errors import CorruptControlError, CorruptTranscriptError
from jsonl_sessions.jsonl.control import RECORD_OFFSET, AppendBatch, Moves, TailRewrite, encode_record, parse_record
from jsonl_sessions.testing.faults import FaultInjector as Injector


def _plant(store: SessionStore, key: str, record: bytes) -> tuple[pathlib.Path, bytes]:
    lock = pathlib.Path(store.root) / f"{key}.lock"
    raw = lock.read_bytes()
    lock.write_bytes(raw[:RECORD_OFFSET].ljust(RECORD_OFFSET, b"\0") + record)
    return lock, (pathlib.Path(store.root) / f"{key}.jsonl").read_bytes()


@pytest.mark.parametrize("record", [
    b'{"op":"bogus"}\n',
    b'{"op":"tail","at":"three","line":"x"}\n',
    b'{"op":"append","at":-1,"end":4}\n',
    b'{"op":"moves","moves":[["../escape","k.jsonl"]]}\n',
])
def test_an_unknown_or_damaged_committed_record_names_the_control_file_and_its_offset(
        tmp_path: pathlib.Path, record: bytes) -> None:
    store = SessionStore(tmp_path / "s", durability="flush")
    store.append_many("k", [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    lock, before = _plant(store, "k", record)
    with pytest.raises(CorruptControlError) as info:
        store.append("k", {"role": "user", "content": "c"})
    assert isinstance(info.value, CorruptTranscriptError)  # what callers caught before
    assert info.value.path == str(lock) and info.value.offset == RECORD_OFFSET and info.value.key == "k"
    assert "control file" in str(info.value)
    assert (tmp_path / "s" / "k.jsonl").read_bytes() == before  # nothing changed
    assert [m.content for m in store.load("k")] == ["a", "b"]  # readers still read


def test_a_torn_record_was_never_committed_and_is_dropped(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "s", durability="flush")
    store.append("k", {"role": "user", "content": "a"})
    lock, _before = _plant(store, "k", b'{"op":"tail","at":0,"li')
    store.append("k", {"role": "user", "content": "b"})
    assert [m.content for m in store.load("k")] == ["a", "b"]
    assert len(lock.read_bytes()) == RECORD_OFFSET  # the record is gone


@pytest.mark.parametrize("record", [
    AppendBatch(10, 250), TailRewrite(7, b'{"id":"x","role":"user"}\n'),
    Moves(((".k.meta.json.tmp", "k.meta.json"), (".k.jsonl.tmp", "k.jsonl"))),
])
def test_records_round_trip_through_their_bytes(record: AppendBatch | TailRewrite | Moves) -> None:
    raw = encode_record(record)
    assert raw.endswith(b"\n") and raw.startswith(b'{"op":"' + record.op.encode() + b'"')
    assert parse_record(raw) == record
    assert parse_record(raw[:-1]) is None  # no final newline: never committed


# -- completing moves ---------------------------------------------------------------------------
@pytest.mark.parametrize("persistent", [False, True], ids=["once", "from-then-on"])
def test_an_io_error_checking_a_moves_temp_file_raises_and_recovery_completes(tmp_path: pathlib.Path,
                                                                             persistent: bool) -> None:
    """``replace_conversation_state`` completing its ``moves`` record: an I/O error on the
    lstat that checks a temp file is not "the temp file is gone" (which would skip its
    rename and leave the new sidecar over the old transcript). The call raises; recovery,
    once the error is gone, renames it: transcript, breadcrumb flag and count all new."""
    root = tmp_path / "s"
    store = SessionStore(root, durability="fsync")
    store.replace_conversation_state("k", [{"role": "user", "content": c} for c in "abcd"], False)
    temp = str(root / ".k.jsonl.tmp")

    def on_temp(kind: str, args: tuple[Any, ...]) -> bool:
        return bool(args[0] == temp)

    new = [{"role": "user", "content": c} for c in "xyz"]
    with Injector("lstat", 1, persistent=persistent, match=on_temp) as injector, \
            pytest.raises(OSError) as info:
        store.replace_conversation_state("k", new, True)
    assert info.value.errno == errno.EIO and injector.injected >= 1
    if persistent:  # recovery checks the same way: under the same error it raises, changing nothing
        assert (root / "k.lock").stat().st_size > RECORD_OFFSET, "the record was dropped"
        with Injector("lstat", 1, persistent=True, match=on_temp), pytest.raises(OSError):
            store.append("k", {"role": "user", "content": "not now"})
        assert (root / "k.lock").stat().st_size > RECORD_OFFSET
    fresh = SessionStore(root)
    assert [m.content for m in fresh.load("k")] == ["x", "y", "z"]
    assert fresh.get_session_metadata("k").trim_breadcrumb is True  # type: ignore[union-attr]
    assert fresh.get_message_count("k") == store.get_message_count("k") == 3
    assert (root / "k.lock").stat().st_size == RECORD_OFFSET
    assert sorted(p.name for p in root.iterdir() if p.name.endswith(".tmp")) == []


def test_a_reader_never_returns_a_half_completed_replace_it_cannot_recover(tmp_path: pathlib.Path) -> None:
    """While an I/O error keeps recovery from completing a ``moves`` record (the new
    breadcrumb flag already in place, the old transcript not yet replaced), lock-free
    readers raise that error instead of returning the mixed state; once it is gone they
    see the whole new state."""
    root = tmp_path / "s"
    store = SessionStore(root, durability="fsync")
    store.replace_conversation_state("k", [{"role": "user", "content": c} for c in "abcd"], False)
    temp = str(root / ".k.jsonl.tmp")

    def on_temp(kind: str, args: tuple[Any, ...]) -> bool:
        return bool(args[0] == temp)

    with Injector("lstat", 1, persistent=True, match=on_temp):
        with pytest.raises(OSError):
            store.replace_conversation_state("k", [{"role": "user", "content": c} for c in "xyz"], True)
        reader = SessionStore(root)
        for read in (reader.load, reader.try_load, reader.get_message_count, reader.get_messages,
                     lambda k: reader.page(k, limit=10), reader.get_session_metadata):
            with pytest.raises(OSError) as info:
                read("k")
            assert info.value.errno == errno.EIO
    assert [m.content for m in reader.load("k")] == ["x", "y", "z"]
    assert reader.get_session_metadata("k").trim_breadcrumb is True  # type: ignore[union-attr]


def test_flush_mode_makes_no_fsync(tmp_path: pathlib.Path) -> None:
    """``"flush"`` skips every fsync, of files and of the directory, in every mutation
    (counted through the platform seam and under it)."""
    store = SessionStore(tmp_path / "s", durability="flush")
    store.append("k", {"role": "user", "content": "a"})
    msgs = [{"role": "user", "content": c} for c in "bc"]
    with SyscallProbe() as probe:
        store.append("k", {"role": "user", "content": "d"})
        store.append_many("k", msgs)
        store.update_last("k", {"role": "user", "content": "e"})
        store.remove_last("k")
        store.replace_conversation_state("k", msgs, True)
        store.replace_conversation_state_if_exists("k", msgs, False)
        store.rewrite_messages("k", msgs)
        store.set_session_name("k", "n")
        store.append("other", {"role": "user", "content": "f"})
        store.delete_session("other")
    assert probe.seam["replace"] >= 4  # the replaces above ran
    assert (probe.seam["fsync"], probe.seam["fsync_dir"], probe.os["os.fsync"]) == (0, 0, 0)
