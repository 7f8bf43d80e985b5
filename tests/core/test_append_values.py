"""What the append path builds for each message, checked against plain models: a dict becomes
the same message as ``ChatMessage.from_dict`` makes (or the same error), the record written
is the message's fields in line order with its id and time, and a ULID's text is its 128
bits in Crockford base32, whichever characters were reused from the id before."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from jsonl_sessions import ChatMessage, InvalidMessageError, SerializationError, codec, ids
from jsonl_sessions.testing.strategies import json_values
from jsonl_sessions.types import RESERVED_FIELDS, as_message, from_record

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def crockford(value: int) -> str:
    """The model: 26 characters of 5 bits each, most significant first."""
    return "".join(_ALPHABET[(value >> (5 * (25 - i))) & 31] for i in range(26))


VALUES = st.integers(min_value=0, max_value=(1 << 128) - 1)


@given(st.lists(VALUES | st.tuples(VALUES, st.integers(0, 1 << 41)), min_size=1, max_size=30))
def test_ulid_text_is_the_value_in_crockford_base32(values: list[int | tuple[int, int]]) -> None:
    # A tuple stands for an id and the next one a small step above it (the upper characters
    # reused), the usual pair on the append path.
    for v in values:
        for value in (v,) if isinstance(v, int) else (v[0], min(v[0] + v[1], (1 << 128) - 1)):
            assert ids.encode(value) == crockford(value)
            assert ids.decode(ids.encode(value)) == value


def test_ulid_text_is_right_in_threads_sharing_the_reused_characters() -> None:
    errors: list[int] = []

    def run(seed: int) -> None:
        value = (seed << 100) | (seed << 60)
        for step in range(2000):
            v = value + step * 7919 + (step % 3) * (1 << 40)
            if ids.encode(v) != crockford(v):
                errors.append(v)

    threads = [threading.Thread(target=run, args=(s,)) for s in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_next_ids_in_one_millisecond_increase_and_read_back() -> None:
    chain = [ids.next_id(None, 1_764_000_000_000)]
    for _ in range(500):
        chain.append(ids.next_id(chain[-1], 1_764_000_000_000))
    assert all(a is not None and b is not None and a < b for a, b in itertools.pairwise(chain))
    assert all(ids.encode(ids.decode(c)) == c for c in chain if c is not None)


NAMES = st.sampled_from([*RESERVED_FIELDS, "tool_calls", "name", "tool_call_id"]) | st.text(max_size=6)
FIELD_VALUES = st.none() | st.sampled_from(["", "user", "message", "01ARZ3NDEKTSV4RRFFQ69G5FAV"]) | json_values() \
    | st.integers(-3, 1 << 45) | st.booleans()
DICTS = st.dictionaries(NAMES | st.integers(0, 3), FIELD_VALUES, max_size=8)


def outcome(build: Any, data: Any) -> tuple[str, Any]:
    try:
        message = build(data)
    except InvalidMessageError as exc:
        # The reason may be worded apart ({"role": None}: "needs a 'role'" / "role must be a
        # string"); the refusal is the same.
        return "error", type(exc)
    return "message", list(message._data.items())


@given(DICTS | DICTS.map(lambda d: {"role": "user", **d}))
@example({"role": "user", "id": None, "name": "n"})  # a missing id or kind is normalised, extras or not
@example({"role": "user", "kind": "", "x": 1, "content": None})
@example({"x": 1, "role": "tool", "kind": None, "id": ""})
def test_a_dict_becomes_the_message_from_dict_makes(data: dict[Any, Any]) -> None:
    assert outcome(as_message, data) == outcome(ChatMessage.from_dict, data)


def record_model(message: ChatMessage, message_id: str, created_at: int) -> dict[str, Any]:
    data = message._data
    record = {"id": message_id, "created_at": created_at, "role": data["role"],
              "kind": data.get("kind") or "message", "content": data.get("content")}
    record.update((k, v) for k, v in data.items() if k not in RESERVED_FIELDS)
    return record


MESSAGES = st.one_of(
    DICTS.map(lambda d: {"role": "user", **d}).flatmap(
        lambda d: st.just(d) if outcome(as_message, d)[0] == "message" else st.nothing()).map(as_message),
    st.builds(lambda content, mid, created: ChatMessage("assistant", content, id=mid, created_at=created),
              json_values(), st.sampled_from(["", "01ARZ3NDEKTSV4RRFFQ69G5FAV"]), st.none() | st.integers(0, 9)),
    # Records read from lines another tool wrote: fields missing or in another order.
    st.permutations([("role", "tool"), ("content", "x"), ("name", "n"), ("kind", "message")]).map(
        lambda items: from_record(dict(items))),
)


@given(MESSAGES, st.sampled_from(["01ARZ3NDEKTSV4RRFFQ69G5FAV", "01ARZ3NDEKTSV4RRFFQ69G5FAW"]), st.integers(0, 9))
def test_the_record_of_a_message_is_its_fields_in_line_order(message: ChatMessage, message_id: str,
                                                            created_at: int) -> None:
    before = list(message._data.items())
    record = codec.record_of(message, message_id, created_at)

    assert list(record.items()) == list(record_model(message, message_id, created_at).items())
    assert list(message._data.items()) == before  # the message is never changed
    if record is message._data:  # returned as it is only when it already is the record
        assert (message.id, message.created_at) == (message_id, created_at)


@pytest.mark.parametrize("bad", [{"role": "user", 1: "x"}, {"role": 3}, {"role": "user", "id": 5},
                                 {"role": "user", "created_at": 1.5}, {"content": "no role", "x": 1}])
def test_a_bad_dict_is_refused_with_the_reason(bad: dict[Any, Any]) -> None:
    with pytest.raises(InvalidMessageError) as got:
        as_message(bad)
    with pytest.raises(InvalidMessageError) as expected:
        ChatMessage.from_dict(bad)
    assert str(got.value) == str(expected.value)


_NOT_JSON = st.sampled_from([float("nan"), float("inf"), -float("inf"), {1, 2}, b"bytes", object(), {1: "int key"}])


def _outcome(encode: Any) -> tuple[str, Any]:
    """What an encoder gives: its bytes, or its error's type and fields."""
    try:
        return "line", encode()
    except (SerializationError, InvalidMessageError) as exc:
        return type(exc).__name__, (exc.key, getattr(exc, "reason", None))


@given(content=json_values() | _NOT_JSON | st.lists(json_values() | _NOT_JSON, max_size=3),
       extra=st.dictionaries(st.sampled_from(["tool_call_id", "meta", "n"]), json_values() | _NOT_JSON, max_size=2),
       slack=st.integers(-1, 1), kind=st.sampled_from(["message", "compaction"]))
def test_the_three_encoders_write_and_refuse_alike(content: Any, extra: dict[str, Any], slack: int, kind: str) -> None:
    # encode_record (one line), encode_line (the append's, written out for speed) and
    # encode_records (a rewrite's, the same) hold the same checks in three places: they must
    # give the same bytes, or refuse with the same error, for any message and size limit.
    message = ChatMessage("user", content, kind=kind, extra=extra)
    message_id, created_at = "01J0000000000000000000000A", 1_700_000_000_000
    try:  # the limit at, just under or just over the line's length
        limit = len(codec.encode_record(codec.record_of(message, message_id, created_at))) + slack
    except SerializationError:
        limit = 100

    def model() -> bytes:
        line = codec.encode_record(codec.record_of(message, message_id, created_at), "k")
        if len(line) > limit:
            raise InvalidMessageError(key="k", message_id=message_id,
                                      reason=f"message is {len(line)} bytes, over max_message_bytes={limit}")
        return line

    want = _outcome(model)
    assert _outcome(lambda: codec.encode_line(message, message_id, created_at, "k", limit)) == want
    record = codec.record_of(message, message_id, created_at)
    assert _outcome(lambda: codec.encode_records([record], "k", limit)[0]) == want
