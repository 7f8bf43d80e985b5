"""A store written by an earlier version of the library opens unchanged.

``tests/fixtures/legacy_store/`` was written by the library as it was before its
internals were reorganised (``tests/fixtures/make_legacy_store.py`` made it, and is kept
to show how), and ``tests/fixtures/legacy_store.json`` holds what that version returned
for it: every session's messages (lenient and strict), metadata, counts, pages and
windows, after the roll-forward records and the odd counter it contains were recovered.
The tests copy the store to a temporary directory and check that this version returns
exactly the same, and that every kind of mutation works on it afterwards.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import struct
from typing import Any

import pytest

from jsonl_sessions import ChatMessage, CorruptTranscriptError, SessionStore
from jsonl_sessions.errors import SessionStoreError

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
STORE = FIXTURES / "legacy_store"
EXPECTED = FIXTURES / "legacy_store.json"


# -- what a store returns, as JSON (shared with the generator) -------------------------
def _messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    return [m.to_dict() for m in messages]


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """The JSON form of a call's result, or of the store error it raised."""
    try:
        result = fn(*args, **kwargs)
    except SessionStoreError as exc:
        out: dict[str, Any] = {"error": type(exc).__name__}
        for field in ("line", "offset", "message_id"):
            value = getattr(exc, field, None)
            if value is not None:
                out[field] = value
        return out
    if isinstance(result, list):
        return _messages(result)
    if isinstance(result, ChatMessage):
        return result.to_dict()
    if result is None or isinstance(result, (int, str, bool)):
        return result
    if hasattr(result, "messages"):  # a Page
        return {"messages": _messages(result.messages), "has_more": result.has_more,
                "before": result.before, "after": result.after}
    raise TypeError(f"unexpected result {result!r}")


def _metadata(store: SessionStore, key: str) -> dict[str, Any] | None:
    md = store.get_session_metadata(key)
    if md is None:
        return None
    return {
        "key": md.key, "name": md.name, "agent_alias": md.agent_alias, "principal_id": md.principal_id,
        "state": md.state, "turn_id": md.turn_id,
        "created_at": None if md.created_at is None else md.created_at.isoformat(),
        "message_count": md.message_count, "size_bytes": md.size_bytes, "trim_breadcrumb": md.trim_breadcrumb,
        "context": md.context, "parent": md.parent, "fork_point": md.fork_point,
    }


def observe(root: pathlib.Path) -> dict[str, Any]:
    """Everything a user can read from the store at ``root`` (which it may recover)."""
    store = SessionStore(root)
    out: dict[str, Any] = {"sessions": store.list_sessions(), "by_key": {}}
    for key in out["sessions"]:
        loaded = store.load(key)
        ids = [m.id for m in loaded]
        state = store.get_session_state(key)
        one: dict[str, Any] = {
            "load": _messages(loaded),
            "try_load": _call(store.try_load, key),
            "count": _call(store.get_message_count, key),
            "metadata": _metadata(store, key),
            "breadcrumb": store.get_session_trim_breadcrumb(key),
            "state": None if state is None else {"state": state.state, "turn_id": state.turn_id,
                                                 "since": state.since.isoformat()},
            "page_newest": _call(store.page, key, limit=2),
            "page_first": _call(store.page, key, limit=3, after=""),
            "window": _call(store.get_messages, key, offset=1, limit=2),
            "window_all": _call(store.get_messages, key),
        }
        if ids:
            one["page_before_last"] = _call(store.page, key, limit=2, before=ids[-1])
            one["page_after_first"] = _call(store.page, key, limit=2, after=ids[0])
            one["message_first"] = _call(store.get_message, key, ids[0])
            one["message_last"] = _call(store.get_message, key, ids[-1])
        out["by_key"][key] = one
    return out


# -- the tests -------------------------------------------------------------------------
@pytest.fixture
def legacy(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "legacy"
    shutil.copytree(STORE, root)
    return root


def _expected() -> dict[str, Any]:
    return json.loads(EXPECTED.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_a_store_written_by_the_previous_version_reads_the_same(legacy: pathlib.Path) -> None:
    assert observe(legacy) == _expected()


def test_reading_it_again_after_recovery_gives_the_same(legacy: pathlib.Path) -> None:
    observe(legacy)
    assert observe(legacy) == _expected()


def test_a_count_cache_written_by_the_previous_version_is_trusted(legacy: pathlib.Path) -> None:
    # The committed cache names the inode and time of the file the generator wrote; make
    # it name the copy (as if the copy were that file) with a planted line count: a
    # reader that reads the cache at the documented offsets returns the planted count.
    key = "chat"
    transcript = next(p for p in legacy.iterdir() if p.name == "chat.jsonl")
    lock = legacy / "chat.lock"
    raw = bytearray(lock.read_bytes())
    ino, size, _mtime, lines, seq = struct.unpack_from("<QQQQQ", raw, 16)
    assert ino != 0 and seq == struct.unpack_from("<Q", raw, 8)[0]
    st = os.lstat(transcript)
    assert size == st.st_size
    struct.pack_into("<QQQQQ", raw, 16, st.st_ino, st.st_size, st.st_mtime_ns, lines + 1000, seq)
    lock.write_bytes(bytes(raw))
    assert SessionStore(legacy).get_message_count(key) == lines + 1000
    assert lines == _expected()["by_key"][key]["count"]


def test_every_mutation_works_on_it(legacy: pathlib.Path) -> None:
    expected = _expected()["by_key"]
    store = SessionStore(legacy)
    for key, seen in expected.items():
        if isinstance(seen["try_load"], dict):  # a corrupt line: appends still work, nothing else may drop it
            new_id = store.append(key, {"role": "user", "content": "after"})
            assert [m["id"] for m in _messages(store.load(key))] == [m["id"] for m in seen["load"]] + [new_id]
            with pytest.raises(CorruptTranscriptError):
                store.rewrite_messages(key, [])
            assert store.compact(key, repair=True) >= 1
            assert _messages(store.try_load(key)) == seen["load"] + _messages(store.load(key))[-1:]
            continue
        new_id = store.append(key, {"role": "user", "content": "after"})
        loaded = store.try_load(key)
        assert _messages(loaded[:-1]) == seen["load"] and loaded[-1].id == new_id
        assert store.get_message_count(key) == seen["count"] + 1
        assert store.update_last(key, {"role": "assistant", "content": "changed"}, expected_id=new_id)
        assert store.try_load(key)[-1].content == "changed"
        assert store.remove_last(key)
        assert _messages(store.try_load(key)) == seen["load"]
        store.append_many(key, [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
        assert store.get_message_count(key) == seen["count"] + 2
        if seen["load"]:
            assert store.truncate_messages(key, seen["load"][-1]["id"]) == 2
            fork = store.copy_messages(key, key + " fork")
            assert fork == seen["load"][-1]["id"]
            assert _messages(store.load(key + " fork")) == seen["load"]
        store.set_session_name(key, "renamed")
        assert store.get_session_name(key) == "renamed"
        store.replace_conversation_state(key, [{"role": "user", "content": "only"}], True)
        assert [m.content for m in store.load(key)] == ["only"] and store.get_session_trim_breadcrumb(key) is True
        assert store.clear_messages(key) == 1
        assert store.delete_session(key)
        assert not store.session_exists(key)
    corrupt = [k for k, v in expected.items() if isinstance(v["try_load"], dict)]
    forks = [k + " fork" for k, v in expected.items() if v["load"] and not isinstance(v["try_load"], dict)]
    assert corrupt and store.list_sessions() == sorted(corrupt + forks)
