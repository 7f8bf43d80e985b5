"""Messages and keys on every backend: a stored message (every field, a compaction kind,
extra fields) and the largest JSON integers come back unchanged through a fresh store
object; long keys that differ only after the JSONL file name's cut stay two sessions;
the message count follows every kind of mutation. (Refusals of bad keys, messages and
ids with the JSONL root checked byte for byte are in jsonl/test_bad_input.py; the
count's cache and its cost in jsonl/test_count_cache.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from stores import Backend

from jsonl_sessions import ChatMessage, InvalidMessageError, SessionNotFoundError, SessionStore
from jsonl_sessions.keys import key_to_stem


def user(content: Any = "hi", **fields: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, **fields}


def count(store: SessionStore, key: str) -> int | None:
    try:
        return store.get_message_count(key)
    except SessionNotFoundError:
        return None


def test_keys_differing_only_after_the_cut_are_distinct(store: SessionStore, backend: Backend) -> None:
    a, b = "z" * 200 + "a", "z" * 200 + "b"
    store.append(a, user("A"))
    store.append(b, user("B"))
    assert key_to_stem(a) != key_to_stem(b)
    fresh = backend.fresh(store)
    assert [m.content for m in fresh.try_load(a)] == ["A"]
    assert [m.content for m in fresh.try_load(b)] == ["B"]
    fresh.delete_session(a)
    assert fresh.list_sessions() == [b]


def test_largest_json_integers_are_accepted(store: SessionStore, backend: Backend) -> None:
    store.append("k", user([2**64 - 1, -(2**63)]))
    assert backend.fresh(store).try_load("k")[0].content == [2**64 - 1, -(2**63)]


def test_stored_message_round_trips_through_a_fresh_store(store: SessionStore, backend: Backend) -> None:
    m = ChatMessage("tool", {"ok": True, "n": [1, 2.5, None]}, created_at=123, kind="compaction",
                    extra={"tool_call_id": "c1", "name": "fn"})
    new_id = store.append("k", m)
    [loaded] = backend.fresh(store).try_load("k")
    assert loaded == m.replace(id=new_id)


def test_count_follows_every_mutation(store: SessionStore, backend: Backend) -> None:
    key = "k"
    assert count(store, key) is None
    store.append(key, {"role": "user", "content": "a"})
    store.append_many(key, [{"role": "user", "content": str(i)} for i in range(5)])
    assert count(store, key) == 6
    store.remove_last(key)
    assert count(store, key) == 5
    store.update_last(key, {"role": "assistant", "content": "x"})
    assert count(store, key) == 5
    store.rewrite_messages(key, store.try_load(key)[:2])
    assert count(store, key) == 2
    store.replace_conversation_state(key, [{"role": "system", "content": "crumb"}, *store.try_load(key)], True)
    assert count(store, key) == 3
    assert store.clear_messages(key) == 3
    assert count(store, key) == 0
    store.append(key, {"role": "user", "content": "again"})
    assert count(store, key) == 1
    assert store.delete_session(key)
    assert count(store, key) is None
    store.append(key, {"role": "user", "content": "new"})
    assert count(store, key) == 1
    assert count(backend.fresh(store), key) == len(store.try_load(key))


def test_the_id_of_a_removed_last_message_is_not_given_to_the_next_one(backend: Backend) -> None:
    """A compare-and-remove by id (``remove_last(expected_id=...)``) must never take a new
    message for one already removed: with the clock stopped, every new id falls in the
    previous one's millisecond, where a "previous + 1" rule would hand the removed id out
    again (an ABA that lets two callers pop the same message)."""
    store = backend.open(clock=lambda: 1_700_000_000_000)
    store.append("k", user("first"))
    for i in range(200):
        removed = store.append("k", user(f"a{i}"))
        assert store.remove_last("k", expected_id=removed)
        newcomer = store.append("k", user(f"b{i}"))
        assert newcomer != removed
        assert not store.remove_last("k", expected_id=removed)  # the newcomer stays
        assert store.get_messages("k")[-1].content == f"b{i}"


def test_values_longer_than_a_database_index_entry_are_taken(store: SessionStore, backend: Backend) -> None:
    """A session key and an agent alias of 3,000 random hex characters (more than a
    PostgreSQL btree entry holds, ~2.7 KB, and they do not compress) are stored and found
    again like short ones, on every backend; a message id that long is no ULID, so it is
    refused at the call on every backend, nothing written."""
    import secrets

    key, alias = secrets.token_hex(1500), secrets.token_hex(1500)
    store.append(key, user("first"))
    with pytest.raises(InvalidMessageError):
        store.append(key, user("long id", id=secrets.token_hex(1500)))
    mid = store.append(key, user("second"))
    store.append(key, user("after"))
    store.set_session_agent_alias(key, alias)
    fresh = backend.fresh(store)
    assert fresh.list_sessions() == [key] and fresh.session_exists(key)
    assert fresh.get_message(key, mid) is not None
    assert [m.content for m in fresh.page(key, before=mid).messages] == ["first"]
    assert fresh.count_agent_attribution(alias) == 1
    assert fresh.copy_messages(key, "copy", up_to_message_id=mid) == mid
    assert fresh.truncate_messages(key, mid) == 1
    assert fresh.remove_last(key, expected_id=mid)
    assert fresh.rename_agent_attribution(alias, "short") == 1
    assert [m.id for m in fresh.try_load("copy")][-1] == mid
    assert fresh.delete_session(key) and fresh.list_sessions() == ["copy"]


def test_created_at_past_the_signed_64_bit_range_keeps_the_store_healthy(store: SessionStore,
                                                                          backend: Backend) -> None:
    """``created_at`` in [2**63, 2**64) is accepted by every backend; the store's own
    health check (where it has one) finds nothing wrong with it."""
    store.append("k", user("late", created_at=2**63 + 5))
    store.append_many("k", [user("later", created_at=2**64 - 1)])
    store.update_last("k", user("last", created_at=2**63))
    fresh = backend.fresh(store)
    assert [m.created_at for m in fresh.try_load("k")] == [2**63 + 5, 2**63]
    verify = getattr(fresh, "verify", None)
    if verify is not None:
        assert verify().findings == []
