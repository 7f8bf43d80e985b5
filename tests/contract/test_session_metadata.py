"""Session metadata and lifecycle on every backend: getters on a missing session, the
owner check of ``delete_session_owned`` under the guard, run state (since, turn, running
and stuck sessions), agent attribution, and search (the alias filter, and a Hypothesis
comparison with a plain casefold match). A fresh store object must read back what
another one wrote. (What the JSONL sidecar adds, atomic replaces, unknown fields, mtimes,
unreadable sidecars, listings that parse no transcript, compact/repair of files, is in
jsonl/test_metadata.py.)"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stores import Backend

from jsonl_sessions import SessionMetadata, SessionNotFoundError, SessionQuery, SessionState, SessionStore

START_MS = 1_750_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = START_MS

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cstore(backend: Backend, clock: Clock) -> Any:
    """A store on a clock the test controls."""
    return backend.open(clock=clock)


@pytest.fixture
def fresh(backend: Backend) -> Any:
    """``fresh(store)``: another store object reading the same data."""
    return backend.fresh


def utc_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def keys_of(results: list[SessionMetadata]) -> list[str]:
    return [m.key for m in results]


texts = st.text(alphabet=st.sampled_from(list('abcABC \n"\\\u00df\u1e9e\u212a\u0130\u00e9e\u0301\U0001f600{}:,')), max_size=30)


# -- setters and getters --------------------------------------------------------------
SETTERS = [
    ("set_session_name", ("chat",)),
    ("set_session_agent_alias", ("bot",)),
    ("set_session_context", ({"a": "b"},)),
    ("set_session_principal", ("alice",)),
    ("set_session_state", ("running", "t1")),
]


@pytest.mark.parametrize(("method", "args"), SETTERS, ids=[m for m, _ in SETTERS])
def test_setters_on_a_missing_session_raise_and_create_nothing(store: SessionStore, backend: Backend, method: str,
                                                               args: tuple[Any, ...]) -> None:
    before = backend.state(store, ("ghost",))
    with pytest.raises(SessionNotFoundError) as info:
        getattr(store, method)("ghost", *args)
    assert isinstance(info.value, KeyError)
    assert not store.session_exists("ghost")
    assert store.list_sessions() == []
    backend.assert_unchanged(store, before, new_lock_ok=True)  # (JSONL: no transcript, no sidecar)


def test_values_round_trip_through_a_fresh_store(cstore: SessionStore, clock: Clock, backend: Backend) -> None:
    storage = backend.damage(cstore)  # the size the backend keeps, where it offers the capability
    cstore.append("k", {"role": "user", "content": "hi"})
    assert cstore.get_session_name("k") is None and cstore.get_session_agent_alias("k") is None
    cstore.set_session_name("k", "My \U0001f99c chat\n")
    cstore.set_session_agent_alias("k", "planner")
    cstore.set_session_context("k", {"cwd": "/tmp", "model": "m\u00e9"})
    cstore.set_session_principal("k", "user:42")
    clock.now += 5
    cstore.set_session_state("k", "running", "turn-1")
    for s in (cstore, backend.fresh(cstore)):
        assert s.get_session_name("k") == "My \U0001f99c chat\n"
        assert s.get_session_agent_alias("k") == "planner"
        assert s.get_session_state("k") == SessionState("running", "turn-1", utc_ms(START_MS + 5))
        md = s.get_session_metadata("k")
        assert md is not None
        assert (md.key, md.name, md.agent_alias, md.principal_id, md.state, md.turn_id) == (
            "k", "My \U0001f99c chat\n", "planner", "user:42", "running", "turn-1")
        assert md.context == {"cwd": "/tmp", "model": "m\u00e9"}
        assert md.created_at == utc_ms(START_MS)
        assert md.message_count == 1 and md.size_bytes > 0
        assert storage is None or md.size_bytes == storage.size("k")
        assert (md.parent, md.fork_point, md.trim_breadcrumb) == (None, None, None)
    # Overwrite, and clear the context.
    cstore.set_session_name("k", "")
    cstore.set_session_context("k", {})
    assert backend.fresh(cstore).get_session_name("k") == ""
    md = backend.fresh(cstore).get_session_metadata("k")
    assert md is not None and md.context == {}
    # Messages are untouched by metadata changes.
    assert [m.content for m in cstore.try_load("k")] == ["hi"]


BAD_VALUES = [
    ("set_session_name", (None,), TypeError),
    ("set_session_name", (b"bytes",), TypeError),
    ("set_session_name", ("\ud800",), ValueError),
    ("set_session_agent_alias", (3,), TypeError),
    ("set_session_context", (["a", "b"],), TypeError),
    ("set_session_context", ({"a": 1},), TypeError),
    ("set_session_context", ({1: "a"},), TypeError),
    ("set_session_context", ({"a": "\udfff"},), ValueError),
    ("set_session_principal", ("",), ValueError),
    ("set_session_principal", (None,), TypeError),
    ("set_session_state", ("paused",), ValueError),
    ("set_session_state", ("RUNNING",), ValueError),
    ("set_session_state", (None,), ValueError),
    ("set_session_state", ("running", 5), TypeError),
]


@pytest.mark.parametrize(("method", "args", "error"), BAD_VALUES, ids=[f"{m}-{a!r}" for m, a, _ in BAD_VALUES])
def test_bad_values_are_rejected_and_nothing_is_written(
    store: SessionStore, backend: Backend, method: str, args: tuple[Any, ...], error: type[Exception]
) -> None:
    store.append("k", {"role": "user"})
    store.set_session_name("k", "before")
    before = backend.state(store)
    with pytest.raises(error):
        getattr(store, method)("k", *args)
    backend.assert_unchanged(store, before)


def test_getters_on_a_missing_session_return_none(store: SessionStore) -> None:
    assert store.get_session_name("ghost") is None
    assert store.get_session_agent_alias("ghost") is None
    assert store.get_session_state("ghost") is None
    assert store.get_session_metadata("ghost") is None
    assert store.list_sessions_with_metadata() == []
    assert store.delete_session_owned("ghost", "alice") is False


def test_delete_session_owned_waits_for_a_writer_holding_the_guard(store: SessionStore) -> None:
    """The owner check happens under the guard: a re-stamp made while the guard was held
    is seen by the deleter that was waiting for it."""
    store.append("k", {"role": "user"})
    store.set_session_principal("k", "alice")
    results: list[bool] = []
    with store.lock("k"):
        worker = threading.Thread(target=lambda: results.append(store.delete_session_owned("k", "alice")))
        worker.start()
        time.sleep(0.05)
        assert worker.is_alive(), "the deleter did not wait for the guard"
        store.set_session_principal("k", "bob")
    worker.join()
    assert results == [False] and store.session_exists("k")


# -- run state ---------------------------------------------------------------------------
def test_state_transitions_since_and_turn(cstore: SessionStore, clock: Clock, fresh: Any) -> None:
    cstore.append("k", {"role": "user"})
    assert cstore.get_session_state("k") is None
    cstore.set_session_state("k", "running", "t1")
    clock.now += 1000
    cstore.set_session_state("k", "running", "t1")  # the same state and turn: since kept
    assert cstore.get_session_state("k") == SessionState("running", "t1", utc_ms(START_MS))
    cstore.set_session_state("k", "running", "t2")  # a new turn: since restarts
    assert cstore.get_session_state("k") == SessionState("running", "t2", utc_ms(START_MS + 1000))
    clock.now += 1000
    cstore.set_session_state("k", "idle", "ignored")  # the turn is cleared on idle
    assert fresh(cstore).get_session_state("k") == SessionState("idle", None, utc_ms(START_MS + 2000))
    cstore.set_session_state("k", "error", "t3")
    md = fresh(cstore).get_session_metadata("k")
    assert md is not None and (md.state, md.turn_id) == ("error", "t3")


def test_running_and_stuck_sessions(cstore: SessionStore, clock: Clock) -> None:
    for key in ("a", "b", "c", "d"):
        cstore.append(key, {"role": "user"})
    cstore.set_session_state("a", "running", "ta")
    clock.now += 10_000
    cstore.set_session_state("b", "running", "tb")
    cstore.set_session_state("c", "error", "tc")
    clock.now += 5_000
    assert [m.key for m in cstore.list_running_sessions()] == ["a", "b"]
    assert [m.key for m in cstore.list_stuck_sessions(10)] == ["a"]  # running 15 s vs 5 s
    assert [m.key for m in cstore.list_stuck_sessions(15)] == []  # "longer than": 15 s is not
    assert [m.key for m in cstore.list_stuck_sessions(4.5)] == ["a", "b"]
    assert all(isinstance(m, SessionMetadata) and m.state == "running" for m in cstore.list_stuck_sessions(0))
    cstore.set_session_state("a", "idle")
    assert [m.key for m in cstore.list_stuck_sessions(0)] == ["b"]
    cstore.delete_session("b")
    assert cstore.list_running_sessions() == []
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            cstore.list_stuck_sessions(bad)
    with pytest.raises(TypeError):
        cstore.list_stuck_sessions("10")  # type: ignore[arg-type]


# -- attribution -----------------------------------------------------------------------
def test_agent_attribution(store: SessionStore, fresh: Any) -> None:
    for i, alias in enumerate(["a", "a", "b", None, "a"]):
        store.append(f"k{i}", {"role": "user", "content": i})
        if alias is not None:
            store.set_session_agent_alias(f"k{i}", alias)
    assert store.count_agent_attribution("a") == 3
    assert store.count_agent_attribution("zzz") == 0
    assert store.rename_agent_attribution("a", "c") == 3
    assert store.rename_agent_attribution("a", "c") == 0
    assert store.rename_agent_attribution("c", "c") == 3  # nothing to change: reports the sessions
    assert [fresh(store).get_session_agent_alias(f"k{i}") for i in range(5)] == ["c", "c", "b", None, "c"]
    assert store.clear_agent_attribution("c") == 3
    assert store.clear_agent_attribution("c") == 0
    assert [store.get_session_agent_alias(f"k{i}") for i in range(5)] == [None, None, "b", None, None]
    assert store.list_sessions() == [f"k{i}" for i in range(5)], "attribution changes never delete"
    assert [m.content for m in store.try_load("k4")] == [4]
    for bad in (None, 1):
        with pytest.raises(TypeError):
            store.count_agent_attribution(bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            store.rename_agent_attribution("b", bad)  # type: ignore[arg-type]


def test_search_filters_by_agent_alias(store: SessionStore) -> None:
    for key, alias in (("a", "bot"), ("b", "other"), ("c", None)):
        store.append(key, {"role": "user", "content": "shared words"})
        if alias:
            store.set_session_agent_alias(key, alias)
    assert keys_of(store.search(SessionQuery("shared", agent_alias="bot"))) == ["a"]
    assert keys_of(store.search(SessionQuery("shared", agent_alias="nobody"))) == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(contents=st.lists(texts | st.lists(texts, max_size=3), min_size=1, max_size=3), data=st.data())
def test_search_agrees_with_a_plain_casefold_match(store: SessionStore, contents: list[Any], data: st.DataObject) -> None:
    """Whatever the characters (quotes, backslashes, newlines, characters whose case folds
    to ASCII or to several characters), search finds exactly what decoding every line and
    casefolding its text finds: the byte prefilter never hides a match."""
    key = "k"
    store.delete_session(key)
    store.append_many(key, [{"role": "user", "content": c} for c in contents])
    pool = [c for c in contents if isinstance(c, str)] + [t for c in contents if isinstance(c, list) for t in c]
    source = data.draw(st.sampled_from(pool or [""]))
    start = data.draw(st.integers(0, len(source)))
    needle = data.draw(st.sampled_from([source[start : start + 4], source[start:].upper(), source[:start].swapcase(),
                                        data.draw(texts)]))
    folded = needle.casefold()
    expected = not folded or any(folded in t.casefold() for t in pool)  # "" matches every session
    assert keys_of(store.search(SessionQuery(needle))) == (["k"] if expected else [])
