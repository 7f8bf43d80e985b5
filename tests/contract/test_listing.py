"""``list_sessions_with_metadata`` with its sort, filter and paging arguments, on every
backend: a Hypothesis property (random stores and random arguments give what a plain
sort and filter of the full listing gives, and walking pages by cursor concatenates to
it), keyset paging while sessions are added and written between pages, the order of
sessions without a value, and the refusals of bad arguments."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stores import Backend

from jsonl_sessions import InvalidArgumentError, SessionList, SessionMetadata

START_MS = 1_750_000_000_000
#: An activity time every store can be set to (ns since the epoch), so that ties happen.
BASE_NS = START_MS * 1_000_000
SORTS = ("key", "updated_at", "created_at", "name", "message_count")


class Clock:
    def __init__(self) -> None:
        self.now = START_MS

    def __call__(self) -> int:
        return self.now


def keys_of(listed: list[SessionMetadata]) -> list[str]:
    return [m.key for m in listed]


def model(full: list[SessionMetadata], sort: str, descending: bool, state: str | None = None,
          alias: str | None = None, prefix: str | None = None, since: datetime | None = None) -> list[SessionMetadata]:
    """The listing as the documentation states it, the plain way: filter, then sessions
    with the value by (value, key), those without it by key, after them; all reversed
    within their group with ``descending``."""
    kept = [m for m in full
            if (state is None or m.state == state) and (alias is None or m.agent_alias == alias)
            and (prefix is None or (m.name is not None and m.name.startswith(prefix)))
            and (since is None or (m.updated_at is not None and m.updated_at >= since))]
    value = {"key": lambda m: m.key, "name": lambda m: m.name, "created_at": lambda m: m.created_at,
             "updated_at": lambda m: m.updated_at, "message_count": lambda m: m.message_count}[sort]
    have = sorted((m for m in kept if value(m) is not None), key=lambda m: (value(m), m.key), reverse=descending)
    lack = sorted((m for m in kept if value(m) is None), key=lambda m: m.key, reverse=descending)
    return have + lack


def walk(store: Any, limit: int, **arguments: Any) -> list[SessionMetadata]:
    """Every page by cursor, concatenated; each page but the last is full and has a cursor."""
    out: list[SessionMetadata] = []
    cursor = None
    for _ in range(1000):
        got = store.list_sessions_with_metadata(limit=limit, cursor=cursor, **arguments)
        assert isinstance(got, SessionList)
        assert len(got) <= limit
        out.extend(got)
        if got.cursor is None:
            return out
        assert len(got) == limit
        cursor = got.cursor
    raise AssertionError("the cursor never ended")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cstore(backend: Backend, clock: Clock) -> Any:
    return backend.open(clock=clock)


names = st.none() | st.sampled_from(["", "a", "ab", "abc", "b", "B", "\u00e9t\u00e9", "a\U0001f600"])
sessions = st.lists(
    st.tuples(st.sampled_from(["k1", "k2", "k3", "k4", "K5", "k6\u00e9", "a b", "z"]), names,
              st.none() | st.sampled_from(["bot", "other"]), st.none() | st.sampled_from(["idle", "running", "error"]),
              st.integers(0, 3), st.integers(0, 2), st.integers(0, 2)),
    min_size=2, max_size=8, unique_by=lambda s: s[0])


def sometimes(values: list[Any]) -> st.SearchStrategy[Any]:
    """None three times in four, else one of ``values``."""
    return st.sampled_from([None, None, None]) | st.sampled_from(values)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(population=sessions, data=st.data())
def test_listing_equals_a_sort_and_filter_of_the_full_listing(cstore: Any, clock: Clock, backend: Backend,
                                                              population: list[Any], data: st.DataObject) -> None:
    for key in cstore.list_sessions():
        cstore.delete_session(key)
    storage = backend.damage(cstore)
    for key, name, alias, state, count, created, active in population:
        clock.now = START_MS + created  # few distinct values: ties on created_at
        cstore.append_many(key, [{"role": "user", "content": "x"}] * max(count, 1))
        if count == 0:
            cstore.clear_messages(key)
        if name is not None:
            cstore.set_session_name(key, name)
        if alias is not None:
            cstore.set_session_agent_alias(key, alias)
        if state is not None:
            cstore.set_session_state(key, state, "t")
        if storage is not None:
            storage.age(key, BASE_NS + active * 1000)  # ties on updated_at
    full = cstore.list_sessions_with_metadata()
    assert keys_of(full) == sorted(k for k, *_ in population) and full.cursor is None
    for _ in range(6):
        sort = data.draw(st.sampled_from(SORTS), label="sort")
        descending = data.draw(st.booleans(), label="descending")
        filters = {  # each mostly absent: a walk over many sessions meets ties at page boundaries
            "state": data.draw(sometimes(["idle", "running", "error"]), label="state"),
            "agent_alias": data.draw(sometimes(["bot", "other", "nobody"]), label="alias"),
            "name_prefix": data.draw(sometimes(["", "a", "ab", "B", "\u00e9"]), label="prefix"),
            "updated_since": data.draw(sometimes(
                [m.updated_at for m in full] + [datetime(2000, 1, 1, tzinfo=timezone.utc)]), label="since"),
        }
        expected = model(full, sort, descending, filters["state"], filters["agent_alias"], filters["name_prefix"],
                         filters["updated_since"])
        assert cstore.list_sessions_with_metadata(sort=sort, descending=descending, **filters) == expected
        limit = data.draw(st.integers(0, 3), label="limit")
        offset = data.draw(st.integers(0, 4), label="offset")
        got = cstore.list_sessions_with_metadata(sort=sort, descending=descending, limit=limit, offset=offset,
                                                 **filters)
        assert got == expected[offset:offset + limit]
        assert (got.cursor is None) == (offset + limit >= len(expected) or limit == 0)
        if limit:
            assert walk(cstore, limit, sort=sort, descending=descending, **filters) == expected


def test_plain_call_lists_every_session_in_key_order_without_a_cursor(store: Any) -> None:
    for key in ("b", "a", "c"):
        store.append(key, {"role": "user", "content": "x"})
    got = store.list_sessions_with_metadata()
    assert isinstance(got, SessionList) and isinstance(got, list)
    assert keys_of(got) == ["a", "b", "c"] and got.cursor is None


def test_sessions_without_the_value_come_last_in_both_directions(store: Any) -> None:
    for key in ("a", "b", "c", "d"):
        store.append(key, {"role": "user", "content": "x"})
    store.set_session_name("b", "zz")
    store.set_session_name("d", "aa")
    assert keys_of(store.list_sessions_with_metadata(sort="name")) == ["d", "b", "a", "c"]
    assert keys_of(store.list_sessions_with_metadata(sort="name", descending=True)) == ["b", "d", "c", "a"]
    assert walk(store, 1, sort="name", descending=True) == store.list_sessions_with_metadata(sort="name",
                                                                                            descending=True)


def test_the_sidebar_walk_is_stable_while_sessions_are_added_and_written(store: Any, backend: Backend) -> None:
    """Newest first, two at a time: a session written between pages moves to the top, so
    it is not listed again; one added meanwhile is newer than the cursor (not listed);
    every session left alone is listed exactly once, in order."""
    storage = backend.damage(store)
    keys = [f"s{i}" for i in range(7)]
    for i, key in enumerate(keys):
        store.append(key, {"role": "user", "content": "x"})
        if storage is not None:
            storage.age(key, BASE_NS + i * 1_000_000)
    before = keys_of(store.list_sessions_with_metadata(sort="updated_at", descending=True))
    if storage is not None:
        assert before == keys[::-1]
    first = store.list_sessions_with_metadata(sort="updated_at", descending=True, limit=2)
    assert keys_of(first) == before[:2] and first.cursor is not None
    moved = before[4]  # not listed yet: it moves above the cursor
    store.append(moved, {"role": "user", "content": "newer"})
    store.append("new", {"role": "user", "content": "x"})
    seen = keys_of(first) + keys_of(walk_from(store, first.cursor, 2, sort="updated_at", descending=True))
    assert len(seen) == len(set(seen))
    assert [k for k in seen if k != moved] == [k for k in before if k != moved]
    assert "new" not in seen


def walk_from(store: Any, cursor: str | None, limit: int, **arguments: Any) -> list[SessionMetadata]:
    out: list[SessionMetadata] = []
    while cursor is not None:
        got = store.list_sessions_with_metadata(limit=limit, cursor=cursor, **arguments)
        out.extend(got)
        cursor = got.cursor
    return out


def test_key_order_walk_lists_sessions_added_after_the_cursor(store: Any) -> None:
    for key in ("b", "d", "f"):
        store.append(key, {"role": "user", "content": "x"})
    first = store.list_sessions_with_metadata(limit=2)
    assert keys_of(first) == ["b", "d"]
    for key in ("a", "c", "e"):  # before, at and after the cursor's position
        store.append(key, {"role": "user", "content": "x"})
    store.delete_session("f")
    rest = walk_from(store, first.cursor, 2)
    assert keys_of(rest) == ["e"]


def test_a_cursor_works_with_other_filters_and_limits(store: Any) -> None:
    for i in range(6):
        store.append(f"k{i}", {"role": "user", "content": "x"})
        store.set_session_agent_alias(f"k{i}", "bot" if i % 2 else "other")
    first = store.list_sessions_with_metadata(limit=2)
    rest = store.list_sessions_with_metadata(cursor=first.cursor, agent_alias="bot")
    assert keys_of(rest) == ["k3", "k5"] and rest.cursor is None


def test_updated_since_is_inclusive_and_takes_any_timezone(store: Any) -> None:
    store.append("a", {"role": "user", "content": "x"})
    at = store.get_session_metadata("a").updated_at
    assert keys_of(store.list_sessions_with_metadata(updated_since=at)) == ["a"]
    assert keys_of(store.list_sessions_with_metadata(updated_since=at + timedelta(microseconds=1))) == []
    east = at.astimezone(timezone(timedelta(hours=5)))
    assert keys_of(store.list_sessions_with_metadata(updated_since=east)) == ["a"]


BAD = [
    ({"sort": "size"}, "sort"),
    ({"sort": None}, "sort"),
    ({"limit": -1}, "limit"),
    ({"limit": 1.5}, "limit"),
    ({"limit": True}, "limit"),
    ({"offset": -1}, "offset"),
    ({"offset": 2, "cursor": "WzEsImtleSIsZmFsc2UsImEiLCJhIl0"}, "cursor"),
    ({"cursor": "not a cursor"}, "cursor"),
    ({"cursor": ""}, "cursor"),
    ({"cursor": "WzEsImtleSIsZmFsc2UsMSwiYSJd"}, "cursor"),  # [1,"key",false,1,"a"]: wrong value type
    ({"cursor": "WzEsImtleSIsZmFsc2UsImEiLCJhIl0", "descending": True}, "cursor"),  # another direction
    ({"cursor": "WzEsImtleSIsZmFsc2UsImEiLCJhIl0", "sort": "name"}, "cursor"),  # another sort
    ({"state": "sleeping"}, "state"),
    ({"updated_since": datetime(2025, 1, 1)}, "updated_since"),  # naive
]


@pytest.mark.parametrize(("arguments", "argument"), BAD, ids=[a for _, a in BAD])
def test_bad_arguments_raise_invalid_argument(store: Any, backend: Backend, arguments: dict[str, Any],
                                              argument: str) -> None:
    store.append("a", {"role": "user", "content": "x"})
    before = backend.state(store)
    with pytest.raises(InvalidArgumentError) as caught:
        store.list_sessions_with_metadata(**arguments)
    assert isinstance(caught.value, ValueError) and caught.value.argument == argument
    backend.assert_unchanged(store, before)


def test_a_good_cursor_is_accepted(store: Any) -> None:
    """The cursor of ``BAD`` that only the other arguments make wrong is a real one."""
    store.append("a", {"role": "user", "content": "x"})
    store.append("b", {"role": "user", "content": "x"})
    assert store.list_sessions_with_metadata(limit=1).cursor == "WzEsImtleSIsZmFsc2UsImEiLCJhIl0"


@pytest.mark.parametrize("arguments", [{"descending": 1}, {"agent_alias": 3}, {"name_prefix": b"a"},
                                       {"updated_since": "2025-01-01"}, {"cursor": 5}])
def test_arguments_of_the_wrong_type_raise_type_error(store: Any, arguments: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        store.list_sessions_with_metadata(**arguments)


def test_the_async_facade_takes_the_same_arguments(store: Any) -> None:
    import asyncio

    from jsonl_sessions import AsyncSessionStore

    for key in ("a", "b", "c"):
        store.append(key, {"role": "user", "content": "x"})

    async def listed() -> tuple[list[str], list[str]]:
        facade = AsyncSessionStore.wrapping(store)
        first = await facade.list_sessions_with_metadata(sort="key", descending=True, limit=2)
        rest = await facade.list_sessions_with_metadata(sort="key", descending=True, limit=2, cursor=first.cursor)
        return keys_of(first), keys_of(rest)

    assert asyncio.run(listed()) == (["c", "b"], ["a"])
