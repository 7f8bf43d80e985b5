"""The rules both backends share: what a record says (searchable text, tool-call pairing),
the fast message constructor, and a line written by another tool keeping every field
through a rewrite on either backend."""

from __future__ import annotations

import os
import pathlib
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jsonl_sessions import ChatMessage, InvalidMessageError, SessionStore, arguments, codec, ids, records
from jsonl_sessions.protocol import SessionBackend
from jsonl_sessions.sqlite import SessionSnapshot, SqliteSessionStore
from jsonl_sessions.types import RESERVED_FIELDS, SessionQuery


@pytest.mark.parametrize(("content", "expected"), [
    ("plain", ["plain"]),
    (["a", {"type": "text", "text": "b"}, {"type": "image", "url": "x"}, 3], ["a", "b"]),
    ({"type": "text", "text": "one part"}, ["one part"]),
    ({"text": 5}, []),
    (None, []),
    (42, []),
])
def test_texts_are_strings_and_text_fields_only(content: Any, expected: list[str]) -> None:
    assert list(records.texts(content)) == expected


def _line(content: Any) -> bytes:
    return orjson.dumps({"id": "a", "created_at": 1, "role": "user", "kind": "message", "content": content})


@pytest.mark.parametrize(("content", "needle", "found"), [
    ("Hello World", "world", True),
    ("Hello World", "moon", False),
    ("STRASSE", "straße".casefold(), True),    # casefolding, not lowercasing
    ("caf\u00e9", "café", True),               # an escaped / non-ASCII line is decoded
    (["x", {"text": "needle here"}], "needle", True),
    ({"role": "needle"}, "needle", False),     # only text is searched, not other fields
])
def test_mentions_matches_casefolded_text(content: Any, needle: str, found: bool) -> None:
    ascii_needle = needle.encode("ascii") if needle.isascii() else None
    assert records.mentions(_line(content), needle, ascii_needle) is found


def test_a_corrupt_line_mentions_nothing() -> None:
    assert records.mentions(b'{"id": "a", "content": "needle"', "needle", b"needle") is False
    assert records.mentions(b'["needle"]', "needle", b"needle") is False


def test_tool_call_pairing() -> None:
    call = {"role": "assistant", "tool_calls": [{"id": "c1"}, "junk", {"id": "c2"}]}
    result = {"role": "tool", "tool_call_id": "c2"}
    assert records.tool_call_id_of(result) == "c2"
    assert records.tool_call_id_of(call) is None and records.tool_call_id_of({"tool_call_id": 7}) is None
    assert records.calls(call, "c2") and not records.calls(call, "c3") and not records.calls(result, "c2")
    assert records.decode_or_none(b"{") is None


json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=8)


@given(content=json_values,
       extra=st.dictionaries(st.text().filter(lambda k: k not in RESERVED_FIELDS), json_values, max_size=3))
def test_decode_message_equals_the_checked_constructor(content: Any, extra: dict[str, Any]) -> None:
    message = ChatMessage("user", content, id="x", created_at=5, extra=extra)
    line = codec.encode_record(codec.record_of(message, "x", 5))[:-1]
    fast = codec.decode_message(line)
    assert fast == ChatMessage.from_dict(orjson.loads(line)) == message
    assert fast.to_dict() == message.to_dict() and fast.extra == message.extra


def test_decode_message_refuses_what_is_not_a_record() -> None:
    for bad in (b"[1]", b'{"content": "no role"}', b'{"role": "user", "id": 5}', b"not json"):
        with pytest.raises(ValueError):
            codec.decode_message(bad)


# -- a line another tool wrote (no "kind", an extra field) survives a rewrite --------------
FOREIGN = b'{"id":"zzz","created_at":1,"role":"tool","content":"r","tool_call_id":"c1"}'


def _jsonl_with_foreign_line(tmp_path: pathlib.Path) -> SessionBackend:
    store = SessionStore(tmp_path / "files")
    store.append("k", {"role": "user", "content": "hi"})
    (path,) = [p for p in (tmp_path / "files").iterdir() if p.name.endswith(".jsonl")]
    with open(path, "ab") as f:
        f.write(FOREIGN + b"\n")
    return store


def _sqlite_with_foreign_line(tmp_path: pathlib.Path) -> SessionBackend:
    store = SqliteSessionStore(tmp_path / "s.db")
    store.append("other", {"role": "user", "content": "hi"})
    line = store.export_session("other").lines[0]  # type: ignore[union-attr]
    store.import_session(SessionSnapshot("k", [line, FOREIGN], {"format": 1, "key": "k"}, 0))
    return store


@pytest.mark.parametrize("make", [_jsonl_with_foreign_line, _sqlite_with_foreign_line], ids=["jsonl", "sqlite"])
def test_an_extra_field_of_a_line_without_kind_survives_a_rewrite(tmp_path: pathlib.Path, make: Any) -> None:
    store = make(tmp_path)
    loaded = store.load("k")
    assert loaded[-1].extra == {"tool_call_id": "c1"} and loaded[-1].kind == "message" and loaded[-1].id == "zzz"
    # The other tool's id is read, not taken back: the store's ids are ULIDs, and the
    # refusal says where a foreign id goes.
    with pytest.raises(InvalidMessageError, match="provider_id"):
        store.rewrite_messages("k", loaded)
    assert store.load("k") == loaded
    moved = [m.replace(id="", extra={**m.extra, "provider_id": m.id}) if m.id == "zzz" else m for m in loaded]
    store.rewrite_messages("k", moved)
    again = store.load("k")
    assert again[0] == loaded[0] and ids.is_ulid(again[-1].id) and again[-1].id > loaded[0].id
    assert again[-1].extra == {"tool_call_id": "c1", "provider_id": "zzz"} and again[-1].content == "r"
    assert store.search(SessionQuery("R")) != []
    store.close()


# -- argument rules ----------------------------------------------------------------------
def test_check_state_checks_the_turn_even_when_idle_drops_it() -> None:
    assert arguments.check_state("running", "t1") == ("running", "t1")
    assert arguments.check_state("idle", "t1") == ("idle", None)
    with pytest.raises(TypeError):
        arguments.check_state("idle", 5)
    with pytest.raises(ValueError):
        arguments.check_state("stuck", None)


def test_check_query() -> None:
    assert arguments.check_query(SessionQuery("HeLLo", limit=None, agent_alias="a")) == ("hello", None, "a")
    with pytest.raises(TypeError):
        arguments.check_query("hello")
    for limit in (-1, True, 1.5):
        with pytest.raises(ValueError):
            arguments.check_query(SessionQuery("x", limit=limit))  # type: ignore[arg-type]


def test_the_backends_refuse_bad_arguments_with_the_same_message(tmp_path: pathlib.Path) -> None:
    backends = [SessionStore(tmp_path / "files"), SqliteSessionStore(os.path.join(tmp_path, "s.db"))]
    for store in backends:
        store.append("k", {"role": "user", "content": "x"})
    calls = [lambda s: s.set_session_context("k", {"a": 1}), lambda s: s.list_stuck_sessions(float("nan")),
             lambda s: s.page("k", limit=0), lambda s: s.get_messages("k", offset=-1),
             lambda s: s.set_session_state("k", "idle", turn_id=3), lambda s: s.search(SessionQuery("x", limit=-2))]
    for call in calls:
        errors = []
        for store in backends:
            with pytest.raises((TypeError, ValueError)) as info:
                call(store)
            errors.append((type(info.value), str(info.value)))
        assert errors[0] == errors[1]
    for store in backends:
        store.close()
