"""The value types and errors every backend shares, without a store: ``ChatMessage``
(immutable, equality and hash, a readable repr, the dict round trip, reserved fields
refused in ``extra``) and the error hierarchy (each error pickles with its fields and is
also the stdlib type a caller would catch)."""

from __future__ import annotations

import copy
import pickle

import pytest

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
