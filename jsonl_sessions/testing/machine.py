"""A Hypothesis state machine that checks a session store against a plain model.

``make_state_machine(factory)`` returns a ``RuleBasedStateMachine`` subclass;
``factory(path: pathlib.Path)`` builds the store under test on a fresh directory (or
ignores it). Run it like any Hypothesis machine::

    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test
    from jsonl_sessions import SessionStore
    from jsonl_sessions.testing import make_state_machine

    Machine = make_state_machine(lambda path: SessionStore(path, durability="fsync"))
    run_state_machine_as_test(Machine, settings=settings(max_examples=100, deadline=None))

**Model.** The reference model (:class:`~jsonl_sessions.testing.reference.ReferenceStore`):
a dict ``key -> SessionModel``, the session's messages (``ChatMessage`` values as the
store must return them) and its metadata (name, alias, owner, run state / turn / since,
context, trim breadcrumb, parent / fork point, creation time). A session exists iff its
key is in the dict. Each rule asks the model what the call must return (or raise) and
how the session changes; the machine only learns what the store chose itself (ids,
times).

**Rules** cover every public method of the store (docs/api.md): ``append`` / ``append_message`` /
``append_many`` (with caller ids, tool exchanges, compaction markers, duplicates, ids
out of order, values JSON cannot hold), ``remove_last`` and ``update_last`` (with
``expected_id``), ``rewrite_messages``, ``replace_conversation_state(_if_exists)``,
``clear_messages``, ``delete_session``, ``copy_messages``, ``truncate_messages``,
``compact``, every metadata setter (on missing sessions too, with invalid values),
``delete_session_owned``, attribution count / rename / clear, ``cleanup_stale``,
``search``, the run-state listings and the reads (``get_message``, ``get_messages``
windows, ``page`` with every option against the model's page, whole page walks in
both directions). Errors must be the documented ones, and leave the model unchanged.

**Invariants**, after every step: the store agrees with the model on everything
(``list_sessions``, ``session_exists``, ``load`` / ``try_load`` / ``load_with_timestamps``,
``get_message_count``, ``get_session_metadata`` and ``list_sessions_with_metadata``, every
getter, the newest page, the run-state listings and attribution counts); and a *fresh*
store built by ``factory`` on the same path agrees too. The fresh-store check is skipped for backends that say they keep nothing
(``persistent = False`` on the factory or on the store, like
:class:`~jsonl_sessions.testing.MemorySessionStore`).

**Time.** By default the store uses its own clock: a ``created_at`` / ``since`` the
caller did not give is read back and must lie within the wall-clock window of the call
(plus :data:`CLOCK_SLACK_MS`). With ``manual_clock=True`` the factory is called as
``factory(path, clock)`` with a :class:`ManualClock` the machine controls: then every
time is predicted exactly, and the clock is stepped forwards and backwards (ids must
still strictly increase); ``frozen_clock=True`` never moves it (every id of a run is made
in one millisecond).

**Storage** (optional): ``storage=probe_factory`` gives the machine a
:class:`~jsonl_sessions.testing.machine_base.StorageProbe` for the store (for the JSONL
layout: :class:`~jsonl_sessions.testing.JsonlFileDamage`). Then rules also damage
transcripts as another tool would (a line written twice, a corrupt line, a torn tail),
age a session's storage past a TTL, and check ``compact`` / ``compact(repair=True)``
(what they drop, the quarantine files), ``cleanup_stale`` of aged sessions, lenient
``load`` and counts of damaged transcripts, ``size_bytes`` and ``updated_at`` against
storage, and that storage holds nothing but the store's files. A damaged session takes
appends, metadata and deletion until compacted; the other transcript rules leave it alone.

Not covered here (see the contract mixin and the fault tools): concurrency, crashes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from ..errors import CorruptTranscriptError
from ..protocol import SessionBackend
from . import strategies
from .machine_base import (
    ALIASES,
    CLOCK_SLACK_MS,
    KEYS,
    MAX_KEYS,
    ManualClock,
    StorageProbe,
    StoreFactory,
    messages,
    new_keys,
)
from .machine_reads import ReadRules
from .machine_storage import StorageRules
from .machine_writes import WriteRules
from .reference import page as reference_page


class SessionStoreMachine(WriteRules, ReadRules, StorageRules):
    """The machine; use :func:`make_state_machine` to bind a factory."""

    # -- keys, clock, reopening -------------------------------------------------------
    @initialize(target=KEYS, batch=st.lists(messages, max_size=6))
    def first_session(self, batch: list[Any]) -> str:
        """Key "A", holding a few messages from the start (so reads meet history early)."""
        self.known.add("A")
        self.append_many("A", batch)
        return "A"

    @initialize(target=KEYS, key=new_keys, batch=strategies.tool_exchanges())
    def second_session(self, key: str, batch: list[Any]) -> str:
        self.known.add(key)
        self.append_many(key, batch)
        return key

    @precondition(lambda self: len(self.known) < MAX_KEYS)
    @rule(target=KEYS, key=new_keys)
    def add_key(self, key: str) -> str:
        self.known.add(key)
        return key

    @precondition(lambda self: self.manual_clock and not self.frozen_clock)
    @rule(delta=st.sampled_from([0, 0, 1, 7, 1000, 20_000, -3000]) | st.integers(-5000, 5000))
    def step_clock(self, delta: int) -> None:
        self.clock.step(delta)  # forward and backward: ids must still increase

    @precondition(lambda self: self.persistent)
    @rule()
    def reopen(self) -> None:
        """Go on with a new instance: everything must come from storage."""
        self._close(self.store)
        self.store = self._open()

    # -- invariants -------------------------------------------------------------------
    def _agrees(self, store: SessionBackend, thorough: bool) -> None:
        assert store.list_sessions() == self.ref.list_sessions(), "list_sessions"
        listed = store.list_sessions_with_metadata()
        assert [m.key for m in listed] == self.ref.list_sessions(), "list_sessions_with_metadata"
        for md in listed:
            self.check_metadata(store, md, md.key)
        for key in self.known:
            self._agrees_on(store, key, thorough)
        if thorough:
            assert [m.key for m in store.list_running_sessions()] == self.ref.list_running_sessions()
            for alias in ALIASES:
                assert store.count_agent_attribution(alias) == self.ref.count_agent_attribution(alias), alias
            if self.manual_clock:
                stuck = [m.key for m in store.list_stuck_sessions(1)]
                assert stuck == self.ref.list_stuck_sessions(1, self.clock.now), "list_stuck_sessions"

    def _agrees_on(self, store: SessionBackend, key: str, thorough: bool) -> None:
        session = self.model.get(key)
        assert store.session_exists(key) is (session is not None), f"session_exists({key!r})"
        if session is None:
            assert store.load(key) == [] and store.try_load(key) == [], key
            assert store.get_session_metadata(key) is None, key
            assert store.get_session_trim_breadcrumb(key) is None, key
            assert store.get_session_name(key) is None and store.get_session_state(key) is None, key
            return
        md = store.get_session_metadata(key)
        assert md is not None, key
        self.check_metadata(store, md, key)
        assert store.get_session_trim_breadcrumb(key) == session.breadcrumb, key
        assert store.get_session_name(key) == session.name, key
        assert store.get_session_agent_alias(key) == session.alias, key
        assert store.get_session_state(key) == session.run_state(), key
        msgs = session.messages
        ids = [m.id for m in msgs]
        assert ids == sorted(set(ids)), f"{key!r}: the model's ids do not strictly increase"
        lines = self.damaged.get(key)
        if lines is not None:
            assert store.load(key) == [m for _, m in lines if m is not None], f"lenient load({key!r})"
            assert store.get_message_count(key) == len(lines), f"get_message_count({key!r}) counts every line"
            if any(kind == "bad" for kind, _ in lines):
                with pytest.raises(CorruptTranscriptError):
                    store.try_load(key)
            return
        assert store.try_load(key) == msgs, f"try_load({key!r})"
        assert store.get_message_count(key) == len(msgs), f"get_message_count({key!r})"
        if thorough:
            assert store.load(key) == msgs, f"load({key!r})"
            stamped = store.load_with_timestamps(key)
            assert [t.message for t in stamped] == msgs, key
            assert [t.created_at for t in stamped] == [
                None if m.created_at is None else datetime.fromtimestamp(m.created_at / 1000, tz=timezone.utc)
                for m in msgs], key
            assert store.page(key, limit=3) == reference_page(msgs, limit=3), key

    @invariant()
    def store_agrees_with_model(self) -> None:
        self.stats["steps"] += 1
        self._agrees(self.store, thorough=not self.persistent)

    @precondition(lambda self: self.persistent)
    @invariant()
    def fresh_store_agrees_with_model(self) -> None:
        fresh = self._open()
        try:
            self._agrees(fresh, thorough=True)
        finally:
            self._close(fresh)
        self.stats["fresh-store checks"] += 1


def make_state_machine(factory: StoreFactory, *, manual_clock: bool = False, frozen_clock: bool = False,
                       storage: Callable[[SessionBackend], StorageProbe] | None = None,
                       name: str | None = None) -> type[SessionStoreMachine]:
    """A state machine class checking the stores ``factory`` builds against the model.

    ``factory(path)`` returns a store with the backend API on ``path`` (a fresh directory
    per example; a second call with the same path must see the same data unless the
    factory or the store has ``persistent = False``; a store with ``close()`` is closed
    when the machine is done with it). With ``manual_clock=True`` it is called as
    ``factory(path, clock)``, ``clock`` a :class:`ManualClock` to use as the store's
    clock; ``frozen_clock=True`` (implies ``manual_clock``) never moves that clock.
    ``storage(store)``: the backend's storage capability
    (:class:`~jsonl_sessions.testing.machine_base.StorageProbe`), or None.
    The class's ``stats`` counter sums what its runs exercised (examples, steps, ...)."""
    attrs = {"factory": staticmethod(factory), "manual_clock": manual_clock or frozen_clock,
             "frozen_clock": frozen_clock, "storage": None if storage is None else staticmethod(storage),
             "stats": Counter()}
    return type(name or f"SessionStoreMachine_{getattr(factory, '__name__', 'store')}", (SessionStoreMachine,),
                attrs)


__all__ = ["CLOCK_SLACK_MS", "ManualClock", "SessionStoreMachine", "StorageProbe", "make_state_machine",
           "reference_page"]
