"""Caller ids on every backend: an id the store would not be able to follow is refused at
the call, so no sequence of accepted calls leaves a session where a plain append fails.

A message's ``id`` is the store's ULID. A caller may give one only if it is a canonical
ULID (26 chars, Crockford base32, upper case), sorts after the session's newest id, and
is at most 24 h ahead of the store's clock. A provider's or tool's id (``msg_...``, a
UUID, ``call_...``) belongs in a field of its own, kept unchanged in ``ChatMessage.extra``.
The same rule applies on every write path that takes ids: append, append_many,
update_last, rewrite_messages, replace_conversation_state(_if_exists).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from _budget import sized
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stores import Backend

from jsonl_sessions import ChatMessage, InvalidMessageError, SessionStore, ids

HOUR = 3_600_000


def is_ulid(text: str) -> bool:
    """A canonical ULID: 26 Crockford base32 characters, upper case, at most 2**128 - 1."""
    return re.fullmatch(r"[0-7][0-9A-HJKMNP-TV-Z]{25}", text) is not None


def user(content: Any = "hi", **fields: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, **fields}


def ahead(ms: int, low: int = 0) -> str:
    """A ULID ``ms`` milliseconds after now."""
    return ids.encode(((ids.now_ms() + ms) << 80) + low)


FOREIGN = {
    "uuid": str(uuid.uuid4()),
    "provider": "msg_abc123",
    "tool call": "call_9",
    "lower-case ULID": ids.encode(ids.now_ms() << 80).lower(),
    "too short": "01J000",
    "empty-looking": " ",
}


def _writes(store: SessionStore, key: str, bad: str) -> list[Callable[[], object]]:
    """Every write path that takes a caller's id, given ``bad``."""
    m = user("new", id=bad)
    return [
        lambda: store.append(key, m),
        lambda: store.append_message(key, m),
        lambda: store.append_many(key, [user("first"), m]),
        lambda: store.rewrite_messages(key, [m]),
        lambda: store.replace_conversation_state(key, [user("kept"), m], True),
        lambda: store.replace_conversation_state_if_exists(key, [m], True),
        lambda: store.update_last(key, m),
    ]


@pytest.mark.parametrize("bad", [*FOREIGN.values(), "far future"], ids=[*FOREIGN, "far future"])
def test_an_id_the_store_cannot_follow_is_refused_at_every_write_and_changes_nothing(
        store: SessionStore, backend: Backend, bad: str) -> None:
    if bad == "far future":
        bad = ahead(25 * HOUR)  # a day and an hour ahead: past the 24 h the rule allows
    store.append("k", user("a"))
    before = backend.state(store, ("new",))
    for write in _writes(store, "k", bad) + _writes(store, "new", bad)[:-2]:
        with pytest.raises(InvalidMessageError) as info:
            write()
        assert info.value.message_id == bad
        if bad in FOREIGN.values():  # the error says where a foreign id belongs
            assert "provider_id" in str(info.value) and "extra" in str(info.value)
    # A missing session has no last message to update and is not recreated: False, as always.
    assert not store.update_last("new", user("x", id=bad))
    assert not store.replace_conversation_state_if_exists("new", [user("x", id=bad)], True)
    backend.assert_unchanged(store, before, new_lock_ok=True)
    assert not store.session_exists("new")
    new_id = store.append("k", user("b"))
    assert new_id > store.load("k")[0].id


def test_a_provider_id_is_kept_in_an_extra_field_and_the_store_assigns_the_id(store: SessionStore) -> None:
    got = store.append("k", {"role": "assistant", "content": "x", "provider_id": "msg_abc"})
    [m] = store.load("k")
    assert is_ulid(got) and m.id == got and m.extra == {"provider_id": "msg_abc"}
    assert store.get_message("k", got) == m


def test_a_ulid_up_to_a_day_ahead_is_taken_and_the_next_plain_append_follows_it(store: SessionStore) -> None:
    near = ahead(23 * HOUR)
    assert store.append("k", user("a", id=near)) == near
    follows = store.append("k", user("b"))
    assert follows > near and [m.id for m in store.load("k")] == [near, follows]
    # update_last may keep the newest message's id as it is, or give a later one
    assert store.update_last("k", ChatMessage("user", "b2", id=follows))
    assert store.load("k")[-1].id == follows


# -- after any accepted calls, a plain append works -------------------------------------------
def _candidate_ids() -> st.SearchStrategy[str]:
    def near(offset_ms: int, low: int) -> str:
        return ahead(offset_ms, low)

    return st.one_of(
        st.just(""),
        st.builds(near, st.integers(-HOUR, 23 * HOUR), st.integers(0, 2**80 - 1)),  # takeable, if in order
        st.builds(near, st.integers(25 * HOUR, 2**40), st.integers(0, 2**80 - 1)),  # from the future
        st.just("7ZZZZZZZZZZZZZZZZZZZZZZZZZ"),  # the largest ULID
        st.builds(lambda: str(uuid.uuid4())),
        st.from_regex(r"(msg|call|toolu)_[a-z0-9]{1,8}", fullmatch=True),
        st.builds(lambda: ids.encode(ids.now_ms() << 80).lower()),
    )


_CALLS = st.sampled_from(["append", "append_many", "update_last", "rewrite_messages", "replace_conversation_state"])


@settings(max_examples=sized(30, 300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(st.tuples(_CALLS, st.lists(_candidate_ids(), min_size=1, max_size=3)), min_size=1, max_size=6))
def test_after_any_accepted_calls_a_plain_append_succeeds_after_every_id(store: SessionStore,
                                                                        calls: list[tuple[str, list[str]]]) -> None:
    key = "k"
    store.delete_session(key)
    for method, given_ids in calls:
        msgs = [user(f"{method}{i}", id=i_d) if i_d else user(f"{method}{i}") for i, i_d in enumerate(given_ids)]
        before = store.load(key)
        try:
            if method == "append":
                store.append(key, msgs[0])
            elif method == "update_last":
                store.update_last(key, msgs[0])
            elif method == "replace_conversation_state":
                store.replace_conversation_state(key, msgs, False)
            else:
                getattr(store, method)(key, msgs)
        except InvalidMessageError:
            assert store.load(key) == before, f"a refused {method} changed the session"
            continue
        stored = [m.id for m in store.load(key)]
        assert all(is_ulid(i) for i in stored), f"{method} stored an id that is not a ULID: {stored}"
    others = [m.id for m in store.load(key)]
    new_id = store.append(key, user("plain"))
    assert is_ulid(new_id) and all(new_id > other for other in others), (new_id, others)
