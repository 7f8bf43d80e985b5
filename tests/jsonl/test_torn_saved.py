"""A torn tail is never cut unsaved: whatever mutation removes it (an append, a change of
the end, a replace, compact / repair, the command line's repair) first copies its bytes
to a quarantine file and logs a warning naming the file and the byte count.

The torn tails here are made the way an outside tool makes them: the last line's newline
truncated away (a whole message turned into a fragment), or the file truncated in the
middle of its last line. The append path stays O(1): only the tail's bytes are read and
saved, and nothing at all when there is no torn tail.
"""

from __future__ import annotations

import logging
import os
import pathlib
import re
from collections.abc import Callable
from typing import Any

import pytest

from jsonl_sessions import SessionStore, _platform
from jsonl_sessions.cli import main
from jsonl_sessions.keys import key_to_stem

KEY = "chat/1"
CUTS = {"newline removed": 1, "mid-line": 40}


def transcript(store: SessionStore) -> pathlib.Path:
    return pathlib.Path(store.root, key_to_stem(KEY) + ".jsonl")


def quarantined(store: SessionStore) -> list[pathlib.Path]:
    return sorted(p for p in pathlib.Path(store.root).iterdir() if ".quarantine-" in p.name)


def damaged(tmp_path: pathlib.Path, durability: str, cut: int, n: int = 4) -> tuple[SessionStore, bytes]:
    """A session of ``n`` messages whose file an outside tool truncated by ``cut`` bytes in
    place (the last line loses its newline, or more); the bytes now past the last newline."""
    store = SessionStore(tmp_path / "store", durability=durability)  # type: ignore[arg-type]
    store.append_many(KEY, [{"role": "user", "content": f"m{i}", "pad": "p" * 60} for i in range(n)])
    store.append(KEY, {"role": "assistant", "content": "last"})  # the process keeps the file open
    path = transcript(store)
    size = path.stat().st_size
    os.truncate(path, size - cut)
    data = path.read_bytes()
    return store, data[data.rfind(b"\n") + 1 :]


def contents(store: SessionStore) -> list[Any]:
    return [m.content for m in SessionStore(store.root).try_load(KEY)]


BEFORE = ["m0", "m1", "m2", "m3"]
OPS: dict[str, tuple[Callable[[SessionStore], object], list[Any]]] = {
    "append": (lambda s: s.append(KEY, {"role": "user", "content": "new"}), [*BEFORE, "new"]),
    "append_many": (lambda s: s.append_many(KEY, [{"role": "user", "content": c} for c in "ab"]), [*BEFORE, "a", "b"]),
    "remove_last": (lambda s: s.remove_last(KEY), BEFORE[:-1]),
    "update_last": (lambda s: s.update_last(KEY, {"role": "user", "content": "upd"}), [*BEFORE[:-1], "upd"]),
    "truncate_messages": (lambda s: s.truncate_messages(KEY, s.load(KEY)[1].id), BEFORE[:2]),
    "clear_messages": (lambda s: s.clear_messages(KEY), []),
    "rewrite_messages": (lambda s: s.rewrite_messages(KEY, [{"role": "user", "content": "r"}]), ["r"]),
    "replace_state": (lambda s: s.replace_conversation_state(KEY, [{"role": "user", "content": "r"}], True), ["r"]),
    "compact": (lambda s: s.compact(KEY), BEFORE),
    "compact(repair=True)": (lambda s: s.compact(KEY, repair=True), BEFORE),
}


@pytest.mark.parametrize("durability", ["flush", "fsync"])
@pytest.mark.parametrize("cut", list(CUTS))
@pytest.mark.parametrize("op", list(OPS))
def test_a_mutation_saves_the_torn_tail_it_cuts(tmp_path: pathlib.Path, durability: str, cut: str, op: str,
                                               caplog: pytest.LogCaptureFixture) -> None:
    store, torn = damaged(tmp_path, durability, CUTS[cut])
    assert torn.startswith(b'{"id":"') and len(torn) > 1
    assert [m.content for m in store.load(KEY)] == BEFORE  # reads ignore the fragment
    run, expected = OPS[op]
    with caplog.at_level(logging.WARNING, logger="jsonl_sessions"):
        run(store)
    assert contents(store) == expected
    saved = quarantined(store)
    assert len(saved) == 1, saved
    assert saved[0].read_bytes() == torn, "the quarantine file holds exactly the bytes cut"
    assert oct(saved[0].stat().st_mode & 0o777) == "0o600"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(saved[0]) in w and f"{len(torn)} bytes" in w for w in warned), warned
    assert store.list_sessions() == [KEY], "a quarantine file is never a session"


def test_repair_of_corruption_and_a_torn_tail_makes_one_copy(tmp_path: pathlib.Path) -> None:
    """A repair that drops corrupt lines already copies the whole file, torn tail included."""
    store, torn = damaged(tmp_path, "flush", CUTS["mid-line"])
    path = transcript(store)
    lines = path.read_bytes().split(b"\n")
    lines[1] = b"{oops"
    original = b"\n".join(lines)
    path.write_bytes(original)
    report_dropped = store.compact(KEY, repair=True)
    assert report_dropped == 1
    saved = quarantined(store)
    assert [p.read_bytes() for p in saved] == [original]
    assert original.endswith(torn)


def test_cli_repair_saves_the_torn_tail(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    store, torn = damaged(tmp_path, "flush", CUTS["newline removed"])
    assert main(["--root", store.root, "repair", KEY]) == 0
    out, err = capsys.readouterr()
    saved = quarantined(store)
    assert len(saved) == 1 and saved[0].read_bytes() == torn
    assert f"torn tail of {len(torn)} bytes" in out
    assert re.search(rf"saved in {re.escape(str(saved[0]))}", out), out
    assert f"jsonl-sessions: warning: session {KEY!r}: saved the {len(torn)} bytes" in err
    assert contents(store) == BEFORE
    assert main(["--root", store.root, "verify"]) == 0


def test_no_torn_tail_no_copy(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "store", durability="flush")
    for i in range(3):
        store.append(KEY, {"role": "user", "content": i})
    store.remove_last(KEY)
    store.compact(KEY)
    store.rewrite_messages(KEY, [{"role": "user", "content": "x"}])
    assert quarantined(store) == []
    bom_only = SessionStore(tmp_path / "bom", durability="flush")
    bom_only.append("b", {"role": "user", "content": 1})
    path = pathlib.Path(bom_only.root, "b.jsonl")
    path.write_bytes(b"\xef\xbb\xbf")  # a byte-order mark is not a message
    bom_only.append("b", {"role": "user", "content": 2})
    assert quarantined(bom_only) == [] and [m.content for m in bom_only.load("b")] == [2]


def test_a_failed_copy_cuts_nothing(tmp_path: pathlib.Path) -> None:
    """Without its quarantine copy the append fails and the fragment stays where it was."""
    from jsonl_sessions.testing.faults import FaultInjector

    store, torn = damaged(tmp_path, "flush", CUTS["newline removed"])
    before = transcript(store).read_bytes()
    with FaultInjector("write", 1) as inj, pytest.raises(OSError):
        store.append(KEY, {"role": "user", "content": "new"})
    assert inj.injected == 1
    assert transcript(store).read_bytes() == before and quarantined(store) == []
    store.append(KEY, {"role": "user", "content": "new"})
    assert contents(store) == [*BEFORE, "new"]
    assert [p.read_bytes() for p in quarantined(store)] == [torn]


def test_append_after_a_torn_tail_reads_only_the_tail(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """O(1) in the transcript: the bytes read (through the seam) are the last block and
    the fragment, whatever the file's size; no torn tail, no copy and no extra read."""
    store = SessionStore(tmp_path / "store", durability="flush")
    store.append_many(KEY, [{"role": "user", "content": i, "pad": "p" * 100} for i in range(5000)])  # ~750 KB
    path = transcript(store)
    os.truncate(path, path.stat().st_size - 1)
    torn = path.read_bytes()[path.read_bytes().rfind(b"\n") + 1 :]
    read: list[int] = []
    real = _platform.pread

    def counting(fd: int, size: int, offset: int) -> bytes:
        data = real(fd, size, offset)
        read.append(len(data))
        return data

    monkeypatch.setattr(_platform, "pread", counting)
    store.append(KEY, {"role": "user", "content": "new"})
    assert [p.read_bytes() for p in quarantined(store)] == [torn]
    assert sum(read) <= 3 * 4096 + len(torn), read
    read.clear()
    store.append(KEY, {"role": "user", "content": "again"})
    assert sum(read) <= 2 * 4096 and len(quarantined(store)) == 1
