"""A repeated or out-of-order line (two files concatenated, a tool that re-appends, an id
written by an earlier version) hides no history.

- strict reads refuse a repeated id and a ULID not greater than the ULID before it, with
  path, 1-based line and byte offset (fail closed); lenient reads keep every line;
- paging back with ``before`` and forward with ``after`` reaches every committed line
  exactly once, in the order ``load()`` gives, whatever its id (page cursors name a line,
  adding its offset where its id alone does not);
- ``jsonl-sessions show --limit N`` then ``show --before <cursor>`` prints the rest;
- ``compact(repair=True)`` restores an order strict reads take, losing nothing: exact
  copies dropped, other lines renumbered in place (old id in ``original_id``);
- a session holding ids an earlier version took from callers keeps taking plain appends.
"""

from __future__ import annotations

import pathlib
import re
import uuid
from typing import Any

import orjson
import pytest
from _budget import sized
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonl_sessions import ChatMessage, CorruptTranscriptError, SessionStore
from jsonl_sessions.cli import main
from jsonl_sessions.keys import key_to_stem

KEY = "k"


def is_ulid(text: str) -> bool:
    """A canonical ULID: 26 Crockford base32 characters, upper case, at most 2**128 - 1."""
    return re.fullmatch(r"[0-7][0-9A-HJKMNP-TV-Z]{25}", text) is not None


def transcript(root: pathlib.Path, key: str = KEY) -> pathlib.Path:
    return root / (key_to_stem(key) + ".jsonl")


def six(root: pathlib.Path) -> tuple[SessionStore, list[bytes]]:
    """A store with a 6-message session, and its lines (each with its newline)."""
    store = SessionStore(root, durability="flush")
    store.append_many(KEY, [{"role": "user", "content": f"m{i}"} for i in range(6)])
    return store, transcript(root).read_bytes().splitlines(keepends=True)


def walk_back(store: SessionStore, limit: int) -> list[ChatMessage]:
    """Every message, paging back from the end with ``before`` cursors."""
    page = store.page(KEY, limit=limit)
    got = list(page.messages)
    for _ in range(10_000):
        if not page.has_more:
            return got
        assert page.before is not None
        page = store.page(KEY, limit=limit, before=page.before)
        assert page.messages, "a page with has_more=True led to an empty page"
        got[:0] = page.messages
    raise AssertionError("paging back did not end")


def walk_forward(store: SessionStore, limit: int) -> list[ChatMessage]:
    """Every message, paging forward from the start with ``after`` cursors."""
    page = store.page(KEY, limit=limit, after="")
    got = list(page.messages)
    for _ in range(10_000):
        if not page.has_more:
            return got
        assert page.after is not None
        page = store.page(KEY, limit=limit, after=page.after)
        assert page.messages, "a page with has_more=True led to an empty page"
        got.extend(page.messages)
    raise AssertionError("paging forward did not end")


def test_a_copied_first_line_is_refused_by_strict_reads_and_paging_reaches_every_line(tmp_path: pathlib.Path) -> None:
    store, lines = six(tmp_path)
    damaged = lines[:4] + [lines[0]] + lines[4:]
    transcript(tmp_path).write_bytes(b"".join(damaged))
    with pytest.raises(CorruptTranscriptError) as info:
        store.try_load(KEY)
    err = info.value
    assert (err.line, err.offset, err.path) == (5, sum(map(len, lines[:4])), str(transcript(tmp_path)))
    assert "repeats" in (err.reason or "")
    found = [(f.kind, f.line, f.offset) for f in store.verify([KEY]).findings]
    assert ("id-order", 5, err.offset) in found  # the health check says the same
    loaded = store.load(KEY)
    assert [m.content for m in loaded] == ["m0", "m1", "m2", "m3", "m0", "m4", "m5"]
    for limit in (1, 2, 3, 4, 7, 100):
        assert walk_back(store, limit) == loaded, limit
        assert walk_forward(store, limit) == loaded, limit
    # The page that used to lead nowhere: its cursor names the copy, not the first line.
    first = store.page(KEY, limit=3)
    assert [m.content for m in first.messages] == ["m0", "m4", "m5"] and first.has_more
    rest = store.page(KEY, limit=3, before=first.before)
    assert [m.content for m in rest.messages] == ["m1", "m2", "m3"] and rest.has_more
    # The writes that would destroy the copy refuse too, and change nothing.
    before = transcript(tmp_path).read_bytes()
    for write in (lambda: store.rewrite_messages(KEY, [{"role": "user", "content": "x"}]),
                  lambda: store.clear_messages(KEY)):
        with pytest.raises(CorruptTranscriptError):
            write()
    assert transcript(tmp_path).read_bytes() == before


def test_a_line_out_of_order_is_refused_by_strict_reads_with_its_line_and_offset(tmp_path: pathlib.Path) -> None:
    store, lines = six(tmp_path)
    moved = lines[:2] + lines[3:5] + [lines[2]] + lines[5:]  # the third message moved after the fifth
    transcript(tmp_path).write_bytes(b"".join(moved))
    with pytest.raises(CorruptTranscriptError) as info:
        store.try_load(KEY)
    assert (info.value.line, info.value.offset) == (5, sum(map(len, moved[:4])))
    assert "does not sort after" in (info.value.reason or "")
    loaded = store.load(KEY)
    assert [m.content for m in loaded] == ["m0", "m1", "m3", "m4", "m2", "m5"]
    for limit in (1, 2, 3, 5):
        assert walk_back(store, limit) == loaded
        assert walk_forward(store, limit) == loaded


def test_a_session_with_ids_an_earlier_version_took_from_callers_takes_plain_appends(tmp_path: pathlib.Path) -> None:
    """Lines an earlier version wrote with a provider's id, a UUID, an id above every ULID:
    read, found, paged; a plain append gets an id after the newest ULID."""
    store, lines = six(tmp_path)
    newest = orjson.loads(lines[-1])["id"]
    legacy = [{"id": "msg_abc", "created_at": 1, "role": "assistant", "kind": "message", "content": "p"},
              {"id": str(uuid.uuid4()), "created_at": 2, "role": "user", "kind": "message", "content": "u"}]
    with open(transcript(tmp_path), "ab") as f:
        f.write(b"".join(orjson.dumps(r) + b"\n" for r in legacy))
    assert [m.id for m in store.try_load(KEY)][-2:] == [r["id"] for r in legacy]  # strict reads take them
    assert store.verify([KEY]).ok
    new_id = store.append(KEY, {"role": "user", "content": "after"})
    assert is_ulid(new_id) and new_id > newest
    assert store.append_many(KEY, [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}])[0] > new_id
    assert store.get_message(KEY, "msg_abc") == ChatMessage.from_dict(legacy[0])
    assert store.get_message(KEY, new_id) is not None and store.get_message(KEY, newest) is not None
    assert store.update_last(KEY, {"role": "user", "content": "y2"})
    loaded = store.try_load(KEY)
    assert len(loaded) == 11 and loaded[-1].content == "y2" and store.verify([KEY]).ok
    for limit in (1, 3, 4):
        assert walk_back(store, limit) == loaded
        assert walk_forward(store, limit) == loaded


def test_show_pages_back_through_a_repeated_line(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    _store, lines = six(tmp_path)
    transcript(tmp_path).write_bytes(b"".join(lines[:4] + [lines[0]] + lines[4:]))
    assert main(["--root", str(tmp_path), "show", KEY, "--limit", "3", "--jsonl"]) == 0
    out, err = capsys.readouterr()
    assert [orjson.loads(x)["content"] for x in out.splitlines()] == ["m0", "m4", "m5"]
    cursor = err.split("--before ", 1)[1].split()[0]
    assert main(["--root", str(tmp_path), "show", KEY, "--limit", "3", "--before", cursor, "--jsonl"]) == 0
    out, err = capsys.readouterr()
    assert [orjson.loads(x)["content"] for x in out.splitlines()] == ["m1", "m2", "m3"]
    cursor = err.split("--before ", 1)[1].split()[0]
    assert main(["--root", str(tmp_path), "show", KEY, "--before", cursor, "--jsonl"]) == 0
    out, _ = capsys.readouterr()
    assert [orjson.loads(x)["content"] for x in out.splitlines()] == ["m0"]
    assert main(["--root", str(tmp_path), "show", KEY, "--jsonl"]) == 0
    out, _ = capsys.readouterr()
    assert [orjson.loads(x)["content"] for x in out.splitlines()] == ["m0", "m1", "m2", "m3", "m0", "m4", "m5"]


def test_repair_drops_an_exact_copy_and_renumbers_a_line_out_of_order_in_place(tmp_path: pathlib.Path) -> None:
    store, lines = six(tmp_path)
    moved = orjson.loads(lines[1])
    moved["content"] = "late"
    damaged = lines[:4] + [lines[0], orjson.dumps(moved) + b"\n"] + lines[4:]  # a copy, and a changed old id
    transcript(tmp_path).write_bytes(b"".join(damaged))
    with pytest.raises(CorruptTranscriptError):
        store.compact(KEY)  # a plain compaction refuses: the changed line is not a copy
    assert store.compact(KEY, repair=True) == 1  # the exact copy
    got = store.try_load(KEY)
    assert [m.content for m in got] == ["m0", "m1", "m2", "m3", "late", "m4", "m5"]
    assert got[4].extra == {"original_id": moved["id"]} and got[3].id < got[4].id < got[5].id
    # Every line keeps its old id, as its id or (where no new id fitted before the next
    # line, which was renumbered too) in original_id.
    assert [m.id for m in got[:4]] == [orjson.loads(x)["id"] for x in lines[:4]]
    assert [m.extra.get("original_id", m.id) for m in got[5:]] == [orjson.loads(x)["id"] for x in lines[4:]]
    (saved,) = [p for p in tmp_path.iterdir() if "quarantine" in p.name]
    assert saved.read_bytes() == b"".join(damaged)  # every original byte kept first


# -- the property: paging reaches exactly what load() reads ------------------------------------
def _damage(lines: list[bytes], data: st.DataObject) -> list[bytes]:
    """``lines`` with copies, moves and lines with foreign ids (or none) put in."""
    out = list(lines)
    for _ in range(data.draw(st.integers(1, 5), label="changes")):
        kind = data.draw(st.sampled_from(["copy", "move", "foreign", "no id", "copy changed"]), label="kind")
        at = data.draw(st.integers(0, len(out)), label="at")
        if kind in ("copy", "move", "copy changed") and out:
            src = data.draw(st.integers(0, len(out) - 1), label="source")
            line = out.pop(src) if kind == "move" else out[src]
            if kind == "copy changed":
                record = orjson.loads(line)
                record["content"] = "changed"
                line = orjson.dumps(record) + b"\n"
            out.insert(min(at, len(out)), line)
        elif kind == "foreign":
            fid = data.draw(st.sampled_from(["msg_x", "call_1", str(uuid.UUID(int=at)), "zzz", "a@3"]), label="id")
            out.insert(at, orjson.dumps({"id": fid, "role": "tool", "content": f"f{at}"}) + b"\n")
        elif kind == "no id":
            out.insert(at, orjson.dumps({"role": "user", "content": f"n{at}"}) + b"\n")
    return out


@settings(max_examples=sized(50, 500), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 40), data=st.data())
def test_paging_both_ways_yields_exactly_the_lenient_load(tmp_path: pathlib.Path, n: int, data: st.DataObject) -> None:
    root = tmp_path / "s"
    store = SessionStore(root, durability="flush")
    store.delete_session(KEY)
    store.append_many(KEY, [{"role": "user", "content": f"m{i}"} for i in range(n)])
    lines = _damage(transcript(root).read_bytes().splitlines(keepends=True), data)
    transcript(root).write_bytes(b"".join(lines))
    loaded = store.load(KEY)
    assert len(loaded) == len(lines)
    limit = data.draw(st.integers(1, 8), label="limit")
    assert walk_back(store, limit) == loaded
    assert walk_forward(store, limit) == loaded
    fresh: Any = SessionStore(root, durability="flush")
    new_id = fresh.append(KEY, {"role": "user", "content": "plain"})  # the damage never blocks an append
    assert is_ulid(new_id) and all(new_id > m.id for m in loaded if is_ulid(m.id))
    # A repair keeps every line but exact copies, in place, and strict reads then take it.
    seen: set[tuple[str, bytes]] = set()
    expected = []
    for line, m in zip(lines, loaded):
        if m.id and (m.id, line) in seen:
            continue
        seen.add((m.id, line))
        expected.append(m)
    fresh.compact(KEY, repair=True)
    repaired = fresh.try_load(KEY)[:-1]
    assert [(m.role, m.content) for m in repaired] == [(m.role, m.content) for m in expected]
    for before, after in zip(expected, repaired):
        assert after.id == before.id or after.extra.get("original_id") == before.id
