"""The value types and errors every backend shares, without a store: ``ChatMessage``
(immutable, equality and hash, a readable repr, the dict round trip, reserved fields
refused in ``extra``, a dict taken as ``from_dict`` takes it) and the error hierarchy (each error pickles with its fields and is
also the stdlib type a caller would catch)."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsonl_sessions import (
    ChatMessage,
    CorruptMetadataError,
    CorruptTranscriptError,
    DuplicateMessageError,
    InvalidMessageError,
    InvalidSessionKeyError,
    LockTimeoutError,
    MessageNotFoundError,
    SerializationError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
    UnsafePathError,
)
from jsonl_sessions.types import as_message


@pytest.mark.parametrize("reserved", ["id", "created_at", "role", "kind", "content"])
def test_reserved_field_in_extra_is_refused(reserved: str) -> None:
    with pytest.raises(InvalidMessageError):
        ChatMessage("user", "x", extra={reserved: "sneaky"})
    with pytest.raises(InvalidMessageError):
        ChatMessage("user", "x").replace(extra={reserved: "sneaky"})


# -- errors -------------------------------------------------------------------------------

ERRORS: list[SessionStoreError] = [
    CorruptTranscriptError(key="k", path="/r/k.jsonl", line=3, offset=120, reason="bad json"),
    CorruptMetadataError(key="k", path="/r/k.meta.json", reason="not JSON"),
    UnsafePathError(key="k", path="/r/k.jsonl"),
    InvalidSessionKeyError("session key must not be empty", key=""),
    SessionNotFoundError(key="k"),
    SessionExistsError(key="k"),
    InvalidMessageError(key="k", message_id="01H", reason="too big"),
    DuplicateMessageError(key="k", message_id="01H"),
    MessageNotFoundError(key="k", message_id="01H"),
    SerializationError(key="k", reason="set"),
    LockTimeoutError(key="k", path="/r/k.lock", timeout=0.5, holder_pid=1234),
]


@pytest.mark.parametrize("err", ERRORS, ids=lambda e: type(e).__name__)
def test_errors_pickle_with_their_fields(err: SessionStoreError) -> None:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err)
    assert back._fields == err._fields and err._fields
    for name in err._fields:
        assert getattr(back, name) == getattr(err, name), name
    assert "'k'" in str(err) or "empty" in str(err)


def test_errors_are_also_stdlib_types() -> None:
    assert issubclass(InvalidSessionKeyError, ValueError)
    assert issubclass(SessionNotFoundError, KeyError)
    assert issubclass(MessageNotFoundError, ValueError)
    assert issubclass(DuplicateMessageError, InvalidMessageError) and issubclass(DuplicateMessageError, ValueError)
    assert issubclass(SerializationError, TypeError)
    assert issubclass(LockTimeoutError, TimeoutError)
    assert str(SessionNotFoundError(key="k")) == "session 'k' does not exist"  # no KeyError repr quoting


def test_chat_message_is_immutable() -> None:
    m = ChatMessage("assistant", ["part"], extra={"name": "bot"})
    for name in ("role", "content", "id", "created_at", "kind", "extra", "anything_new"):
        with pytest.raises(AttributeError):
            setattr(m, name, "x")
    with pytest.raises(AttributeError):
        del m.role
    m.extra["name"] = "changed"  # extra is a copy
    assert m.extra == {"name": "bot"}
    assert copy.copy(m) == m and copy.deepcopy(m) == m
    assert pickle.loads(pickle.dumps(m)) == m


def test_chat_message_equality_and_hash() -> None:
    a = ChatMessage("user", {"text": "hi"}, id="01H", created_at=5, extra={"name": "n"})
    b = ChatMessage.from_dict({"role": "user", "content": {"text": "hi"}, "id": "01H", "created_at": 5, "name": "n"})
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert ChatMessage("user") == ChatMessage.from_dict({"role": "user"})
    for changed in (a.replace(role="assistant"), a.replace(content={"text": "ho"}), a.replace(id="01J"),
                    a.replace(created_at=6), a.replace(kind="compaction"), a.replace(extra={})):
        assert changed != a
    assert a != a.to_dict()


def test_chat_message_repr_is_readable() -> None:
    m = ChatMessage("tool", "result", id="01H", created_at=7, kind="compaction", extra={"tool_call_id": "c1"})
    text = repr(m)
    assert text.startswith("ChatMessage(") and text.endswith(")")
    for part in ("role='tool'", "content='result'", "id='01H'", "created_at=7", "kind='compaction'", "'c1'"):
        assert part in text
    long = repr(ChatMessage("user", "x" * 10_000))
    assert len(long) < 200 and "..." in long
    assert "id=" not in repr(ChatMessage("user", "plain"))


def test_chat_message_dict_round_trip_and_replace() -> None:
    d = {
        "id": "01HZZZZZZZZZZZZZZZZZZZZZZZ",
        "created_at": 1_700_000_000_000,
        "role": "assistant",
        "kind": "message",
        "content": [{"type": "text", "text": "a\nb \"q\" \u200f\U0001f99c"}],
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        "name": "bot",
    }
    m = ChatMessage.from_dict(d)
    assert m.to_dict() == d and list(m.to_dict()) == list(d)
    assert ChatMessage.from_dict(m.to_dict()) == m
    assert m.extra == {"tool_calls": d["tool_calls"], "name": "bot"}
    assert ChatMessage.from_dict({"role": "user"}).to_dict() == {
        "id": "", "created_at": None, "role": "user", "kind": "message", "content": None}

    r = m.replace(content="new", kind="compaction")
    assert (r.content, r.kind, r.id, r.created_at, r.extra) == ("new", "compaction", m.id, m.created_at, m.extra)
    assert m.content == d["content"] and m.kind == "message"  # the original is untouched
    assert r.is_compaction and not m.is_compaction
    with pytest.raises(TypeError):
        m.replace(colour="red")
    with pytest.raises(InvalidMessageError):
        m.replace(created_at="yesterday")


class _Name(str):
    """A str subclass: accepted as a field name or value wherever a str is."""


_FIELD_NAMES = st.sampled_from(["role", "id", "created_at", "kind", "content", "tool_calls", "name", _Name("extra"),
                                _Name("role"), 1, None])
_FIELD_VALUES = st.one_of(
    st.none(), st.sampled_from(["", "user", "message", "compaction", _Name("user"), _Name("")]), st.text(max_size=5),
    st.integers(-2, 2**70), st.booleans(), st.floats(allow_nan=False), st.lists(st.integers(), max_size=2),
)


@st.composite
def _message_dicts(draw: st.DrawFn) -> dict[Any, Any]:
    """A dict as a caller may pass it: each field present or not, of the usual type or
    not (None, a falsy value, a str subclass, a bool, a float), extras (some with a name
    that is not a str), in any order."""
    fields = draw(st.fixed_dictionaries({}, optional={
        "role": st.sampled_from(["user", "assistant", "", _Name("tool"), None, 3]),
        "id": st.sampled_from(["", None, 0, "01JABCDEFGHJKMNPQRSTVWXYZ0", _Name("x"), 7]),
        "created_at": st.sampled_from([None, 5, 1733300000000, True, 1.0, "5"]),
        "kind": st.sampled_from(["", None, 0, "message", "compaction", _Name("compaction"), 1]),
        "content": _FIELD_VALUES,
    }))
    fields.update(draw(st.dictionaries(_FIELD_NAMES, _FIELD_VALUES, max_size=3)))
    order = draw(st.permutations(list(fields)))
    return {name: fields[name] for name in order}


@settings(max_examples=400)
@given(_message_dicts())
def test_as_message_of_a_dict_is_from_dict(raw: dict[Any, Any]) -> None:
    """The model: as_message takes a dict as ChatMessage.from_dict does (the same fields in
    the same order, or the same error), whichever way it takes it."""
    try:
        expected = ChatMessage.from_dict(raw)
    except InvalidMessageError:
        with pytest.raises(InvalidMessageError):
            as_message(raw)
        return
    got = as_message(raw)
    assert list(got._data.items()) == list(expected._data.items())
    assert type(got.kind) is type(expected.kind) and type(got.id) is type(expected.id)
