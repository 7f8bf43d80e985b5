"""Bad input on every backend: every refusal is a typed error and changes nothing.

Invalid keys (every keyed method), content with no JSON form, structurally invalid
messages, messages over ``max_message_bytes``, duplicate and out-of-order ids (in the
session and inside one batch). "Nothing changed" is what the public API shows (every
session's messages, metadata, run state, breadcrumb, and no new session), and for the
JSONL store also every file of the root byte for byte (``Backend.state``); the one
allowed difference there is an empty ``<stem>.lock`` for a session that was not created:
the guard (and so its lock file) is taken before a message can be given its id and
encoded; a lock file is never a session (docs/format.md). (Hostile files planted by
hand, corrupt lines, torn tails, symlinks, permissions: jsonl/test_bad_input.py.)
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from stores import Backend

from jsonl_sessions import (
    ChatMessage,
    DuplicateMessageError,
    InvalidMessageError,
    InvalidSessionKeyError,
    SerializationError,
    SessionStore,
    ids,
)


def user(content: Any = "hi", **fields: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, **fields}


# -- session keys ---------------------------------------------------------------------

INVALID_KEYS: list[object] = ["", "\x00", "a\x00b", "\ud800", "ok\udfffok", 123, None, b"bytes", ["k"], {"k": 1}]

def _key_calls(store: SessionStore, key: Any) -> list[Callable[[], object]]:
    m = user()
    return [
        lambda: store.append(key, m),
        lambda: store.append_many(key, [m]),
        lambda: store.load(key),
        lambda: store.try_load(key),
        lambda: store.load_with_timestamps(key),
        lambda: store.session_exists(key),
        lambda: store.remove_last(key),
        lambda: store.update_last(key, m),
        lambda: store.rewrite_messages(key, [m]),
        lambda: store.clear_messages(key),
        lambda: store.delete_session(key),
        lambda: store.replace_conversation_state(key, [m], True),
        lambda: store.replace_conversation_state_if_exists(key, [m], True),
        lambda: store.set_session_trim_breadcrumb(key, True),
        lambda: store.get_session_trim_breadcrumb(key),
        lambda: store.lock(key),  # refused when called, before any ``with`` takes it
    ]


@pytest.mark.parametrize("key", INVALID_KEYS, ids=repr)
def test_invalid_keys_raise_invalid_session_key_error_everywhere(store: SessionStore, backend: Backend, key: object) -> None:
    store.append("other", user())
    before = backend.state(store, ("new",))
    for call in _key_calls(store, key):
        with pytest.raises(InvalidSessionKeyError) as info:
            call()
        assert isinstance(info.value, ValueError)
    backend.assert_unchanged(store, before)
    assert store.list_sessions() == ["other"]


# -- content that is not JSON ---------------------------------------------------------

NOT_JSON: list[object] = [
    {1, 2},
    frozenset({"a"}),
    b"bytes",
    bytearray(b"x"),
    object(),
    dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
    dt.date(2024, 1, 1),
    complex(1, 2),
    float("nan"),
    float("inf"),
    float("-inf"),
    2**64,
    2**70,
    -(2**63) - 1,
    {1: "int key"},
    {("tuple",): "key"},
    {"nested": [1, {"deep": float("nan")}]},
    [["x", {"s": {1}}]],
    "lone surrogate \ud800",
]


@pytest.mark.parametrize("bad", NOT_JSON, ids=lambda v: type(v).__name__ + ":" + repr(v)[:24])
def test_non_json_content_raises_serialization_error_and_writes_nothing(store: SessionStore, backend: Backend, bad: object) -> None:
    store.append("old", user("keep"))
    before = backend.state(store, ("new",))
    attempts: list[Callable[[], object]] = [
        lambda: store.append("old", user(bad)),
        lambda: store.append("old", ChatMessage("assistant", "x", extra={"tool_calls": [bad]})),
        lambda: store.append_many("old", [user("fine"), user(bad), user("fine too")]),
        lambda: store.update_last("old", user(bad)),
        lambda: store.rewrite_messages("old", [user("fine"), user(bad)]),
        lambda: store.replace_conversation_state("old", [user(bad)], True),
        lambda: store.replace_conversation_state_if_exists("old", [user(bad)], True),
    ]
    for attempt in attempts:
        with pytest.raises(SerializationError) as info:
            attempt()
        assert isinstance(info.value, TypeError)
        assert info.value.key == "old"
    backend.assert_unchanged(store, before)
    assert [m.content for m in store.try_load("old")] == ["keep"]

    # A brand-new session must not be created by a refused write.
    for attempt in (
        lambda: store.append("new", user(bad)),
        lambda: store.append_many("new", [user("fine"), user(bad)]),
        lambda: store.rewrite_messages("new", [user(bad)]),
        lambda: store.replace_conversation_state("new", [user(bad)], False),
    ):
        with pytest.raises(SerializationError):
            attempt()
    backend.assert_unchanged(store, before, new_lock_ok=True)
    assert not store.session_exists("new")
    assert store.list_sessions() == ["old"]


# -- structurally invalid messages ----------------------------------------------------

INVALID_MESSAGES: list[object] = [
    {"content": "no role"},
    {"role": None, "content": "x"},
    {"role": 5, "content": "x"},
    {"role": "user", "id": 7},
    {"role": "user", "created_at": "yesterday"},
    {"role": "user", "created_at": 1.5},
    {"role": "user", "created_at": True},
    {"role": "user", "kind": 1},
    {"role": "user", 3: "non-str extra key"},
    "just a string",
    ["role", "user"],
    None,
]


@pytest.mark.parametrize("bad", INVALID_MESSAGES, ids=repr)
def test_invalid_message_raises_invalid_message_error_and_writes_nothing(store: SessionStore, backend: Backend, bad: object) -> None:
    store.append("old", user("keep"))
    before = backend.state(store, ("new",))
    for attempt in (
        lambda: store.append("old", bad),  # type: ignore[arg-type]
        lambda: store.append_many("old", [user(), bad]),  # type: ignore[list-item]
        lambda: store.update_last("old", bad),  # type: ignore[arg-type]
        lambda: store.rewrite_messages("old", [bad]),  # type: ignore[list-item]
        lambda: store.replace_conversation_state("old", [bad], True),  # type: ignore[list-item]
        lambda: store.append("new", bad),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidMessageError) as info:
            attempt()
        assert isinstance(info.value, ValueError)
    backend.assert_unchanged(store, before)
    assert not store.session_exists("new")


def test_message_over_max_message_bytes_is_refused(backend: Backend) -> None:
    store = backend.open(max_message_bytes=1000)
    store.append("k", user("x" * 500))
    before = backend.state(store, ("new",))
    too_big: list[ChatMessage | dict[str, Any]] = [
        user("x" * 2000),
        user("\u00e9" * 600),  # 600 characters, 1200 bytes: the limit is on bytes
        ChatMessage("tool", "ok", extra={"blob": ["y" * 300] * 4}),
    ]

    def writes(big: ChatMessage | dict[str, Any]) -> list[Callable[[], object]]:
        return [
            lambda: store.append("k", big),
            lambda: store.append_many("k", [user("small"), big]),
            lambda: store.update_last("k", big),
            lambda: store.rewrite_messages("k", [big]),
            lambda: store.replace_conversation_state("k", [user(), big], True),
            lambda: store.append("new", big),
        ]

    for big in too_big:
        for attempt in writes(big):
            with pytest.raises(InvalidMessageError) as info:
                attempt()
            assert "max_message_bytes" in str(info.value)
    backend.assert_unchanged(store, before, new_lock_ok=True)
    assert not store.session_exists("new")
    assert len(store.try_load("k")) == 1


def test_duplicate_and_out_of_order_ids(store: SessionStore, backend: Backend) -> None:
    a = store.append("k", user("a"))
    b = store.append("k", user("b"))
    c = store.append("k", user("c"))
    before = backend.state(store, ("new",))
    for existing in (a, b, c):  # the newest, and ones deep in the file
        with pytest.raises(DuplicateMessageError) as dup:
            store.append("k", user(id=existing))
        assert dup.value.message_id == existing and dup.value.key == "k"
        with pytest.raises(DuplicateMessageError):  # after id-less messages in the batch, too
            store.append_many("k", [user(), user(), user(id=existing)])
    first = ids.decode(a)
    assert first is not None
    lower = ids.encode(first - 1)  # new (nothing sorts before the first id), but before the last id
    assert lower not in (a, b, c) and lower < c
    for attempt in (
        lambda: store.append("k", user(id=lower)),
        lambda: store.append_many("k", [user(), user(id=lower)]),
        lambda: store.update_last("k", user(id=lower)),
    ):
        with pytest.raises(InvalidMessageError) as info:
            attempt()
        assert not isinstance(info.value, DuplicateMessageError)
    backend.assert_unchanged(store, before)


def test_duplicates_inside_one_append_many_batch(store: SessionStore, backend: Backend) -> None:
    store.append("k", user("a"))
    before = backend.state(store, ("new",))
    ahead = ids.now_ms() + 3_600_000  # an hour ahead: after every id made meanwhile
    x = ids.encode((ahead << 80) + 1)
    y = ids.encode(ahead << 80)  # one clock reading for both: y sorts just before x
    for batch in (
        [user(id=x), user(id=x)],
        [user(id=x), user(), user(id=x)],
        [user(), user(id=x), user("middle"), user(id=x), user()],
    ):
        with pytest.raises(DuplicateMessageError) as info:
            store.append_many("k", batch)
        assert info.value.message_id == x
        with pytest.raises(DuplicateMessageError):
            store.append_many("new", batch)
        with pytest.raises(DuplicateMessageError):
            store.rewrite_messages("k", batch)
    with pytest.raises(InvalidMessageError) as order:
        store.append_many("k", [user(id=x), user(id=y)])
    assert not isinstance(order.value, DuplicateMessageError)
    backend.assert_unchanged(store, before, new_lock_ok=True)
    assert not store.session_exists("new")
