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

**Model.** A dict ``key -> Session``: the session's messages (``ChatMessage`` values as the
store must return them), its metadata (name, alias, owner, run state / turn / since,
context, trim breadcrumb, parent / fork point, creation time). A session exists iff its
key is in the dict.

**Rules** cover every public method of the store (docs/api.md): ``append`` / ``append_message`` /
``append_many`` (with caller ids, tool exchanges, compaction markers, duplicates, ids
out of order, values JSON cannot hold), ``remove_last`` and ``update_last`` (with
``expected_id``), ``rewrite_messages``, ``replace_conversation_state(_if_exists)``,
``clear_messages``, ``delete_session``, ``copy_messages``, ``truncate_messages``,
``compact``, every metadata setter (on missing sessions too, with invalid values),
``delete_session_owned``, attribution count / rename / clear, ``cleanup_stale``,
``search``, the run-state listings and the reads (``get_message``, ``get_messages``
windows, ``page`` with every option against :func:`reference_page`, whole page walks in
both directions). Errors must be the documented ones, and leave the model unchanged.

**Invariants**, after every step: the store agrees with the model on everything
(``list_sessions``, ``session_exists``, ``load`` / ``try_load`` / ``load_with_timestamps``,
``get_message_count``, ``get_session_metadata`` and ``list_sessions_with_metadata``, every
getter, the newest page); and a *fresh* store built by ``factory`` on the same path
agrees too. The fresh-store check is skipped for backends that say they keep nothing
(``persistent = False`` on the factory or on the store, like
:class:`~jsonl_sessions.testing.MemorySessionStore`).

**Time.** By default the store uses its own clock: a ``created_at`` / ``since`` the
caller did not give is read back and must lie within the wall-clock window of the call
(plus :data:`CLOCK_SLACK_MS`). With ``manual_clock=True`` the factory is called as
``factory(path, clock)`` with a :class:`ManualClock` the machine controls: then every
time is predicted exactly, and the clock is frozen, stepped and stepped backwards (ids
must still strictly increase).

Not covered here (see the contract mixin and the fault tools): corrupt lines and torn
tails (a generic backend cannot be damaged from outside), concurrency, crashes.
"""

from __future__ import annotations

import dataclasses
import itertools
import pathlib
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, precondition, rule

from .. import ids as ulid
from ..errors import (
    DuplicateMessageError,
    InvalidMessageError,
    MessageNotFoundError,
    SerializationError,
    SessionExistsError,
    SessionNotFoundError,
)
from ..types import ChatMessage, SessionMetadata, SessionQuery, SessionState, as_message
from . import strategies
from .reference import page as reference_page
from .reference import texts_of

#: How far (ms) a time the store chose may lie outside the wall-clock window of the call
#: (its clock may be read a little differently from ``time.time_ns``).
CLOCK_SLACK_MS = 1000
START_MS = 1_700_000_000_000
#: Keys in play at once (more would spread the history too thin to meet the reads).
MAX_KEYS = 6
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
UNKNOWN_IDS = ("0" * 26, "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "not-an-id")
ALIASES = ("planner", "coder", "Planner")
OWNERS = ("alice", "bob")
NAMES = ("alpha", "Beta", "stra\u00dfe", 'quote"d', "new\nline", "\U0001f99c", "")
#: Words for message text that search must find in any case.
WORDS = ("alpha", "Beta", "GAMMA", "stra\u00dfe", "\u00c9t\u00e9", "\U0001f99c", 'quote"d', "new\nline")
KEYWORDS = ("", "a", "alpha", "BETA", "gamma", "STRASSE", "\u00e9T\u00c9", "\U0001f99c", "zz", "line", "e")
StoreFactory = Callable[..., Any]


class ManualClock:
    """Milliseconds since the epoch, moved only by the test (``now``, :meth:`step`)."""

    def __init__(self, now: int = START_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def step(self, delta_ms: int) -> None:
        self.now += delta_ms


def expected_message(message: ChatMessage | dict[str, Any], message_id: str, created_at: int) -> ChatMessage:
    """``message`` as a store returns it: with its id and time, after a JSON round trip."""
    m = as_message(message)
    record = {"id": message_id, "created_at": created_at, "role": m.role, "kind": m.kind, "content": m.content,
              **m.extra}
    return ChatMessage.from_dict(orjson.loads(orjson.dumps(record)))


def _pick(data: st.DataObject, values: list[int], label: str) -> int:
    """One of ``values``, drawn so that the draw does not depend on how many there are (the
    number of distinct timestamps depends on the wall clock, and Hypothesis replays draws)."""
    return values[data.draw(st.integers(min_value=0, max_value=2**16), label=label) % len(values)]


def to_ms(when: datetime) -> int:
    return (when - EPOCH) // timedelta(milliseconds=1)


def shifted(message_id: str, delta: int) -> str:
    value = ulid.decode(message_id)
    assert value is not None, message_id
    return ulid.encode(value + delta)


# -- the model ------------------------------------------------------------------------
@dataclass
class Session:
    """What the model knows about one session."""

    created_at: int
    messages: list[ChatMessage] = field(default_factory=list)
    breadcrumb: bool | None = None
    name: str | None = None
    alias: str | None = None
    owner: str | None = None
    state: str | None = None
    turn: str | None = None
    since: int | None = None
    context: dict[str, str] = field(default_factory=dict)
    parent: str | None = None
    fork_point: str | None = None

    def metadata(self, key: str) -> SessionMetadata:
        """The expected metadata; ``updated_at`` and ``size_bytes`` are the store's own."""
        return SessionMetadata(
            key=key, name=self.name, agent_alias=self.alias, principal_id=self.owner, state=self.state,
            turn_id=self.turn if self.state is not None else None,
            created_at=EPOCH + timedelta(milliseconds=self.created_at), updated_at=None, message_count=len(self.messages),
            size_bytes=0, trim_breadcrumb=self.breadcrumb, context=dict(self.context), parent=self.parent,
            fork_point=self.fork_point,
        )

    @property
    def last_id(self) -> str | None:
        return self.messages[-1].id if self.messages else None


@dataclass
class _Window:
    lo: int
    hi: int
    slack: int

    def check(self, value: int | None, what: str) -> int:
        assert isinstance(value, int), f"{what}: expected int milliseconds, got {value!r}"
        assert self.lo - self.slack <= value <= self.hi + self.slack, (
            f"{what}: {value} is outside the call's clock window [{self.lo}, {self.hi}]")
        return value


# Strategies (module level: built once).
_keys = strategies.session_keys()
_words = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)
_messages = strategies.messages(large=False) | st.builds(
    ChatMessage, st.sampled_from(strategies.ROLES),
    _words | st.lists(_words | st.fixed_dictionaries({"type": st.just("text"), "text": _words}), max_size=2))
_rare_large = st.integers(0, 19).flatmap(
    lambda n: strategies.messages(large=True) if n == 0 else _messages)
_batch = st.lists(_rare_large, max_size=4) | strategies.tool_exchanges().map(list)
_unserializable = st.sampled_from([float("nan"), float("inf"), 2**70, {1: "int key"}, b"bytes", {"set"}])


class SessionStoreMachine(RuleBasedStateMachine):
    """The machine; use :func:`make_state_machine` to bind a factory."""

    #: ``factory(path)`` (or ``factory(path, clock)`` with ``manual_clock``).
    factory: StoreFactory
    manual_clock: bool = False
    #: What the machine exercised, summed over all instances of the class.
    stats: Counter[str]

    keys = Bundle("keys")

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="jsonl-harness-")
        self.path = pathlib.Path(self.tmp, "store")
        self.clock = ManualClock()
        self.store = self._open()
        self.persistent = bool(getattr(type(self).factory, "persistent", True)
                               and getattr(self.store, "persistent", True))
        self.model: dict[str, Session] = {}
        self.known: set[str] = set()
        self.stats["examples"] += 1

    def _open(self) -> Any:
        factory = type(self).factory
        return factory(self.path, self.clock) if self.manual_clock else factory(self.path)

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- time -------------------------------------------------------------------------
    @contextmanager
    def _window(self) -> Iterator[_Window]:
        """The range of clock values the store may have used during the block."""
        if self.manual_clock:
            yield _Window(self.clock.now, self.clock.now, 0)
            return
        w = _Window(time.time_ns() // 1_000_000, 0, CLOCK_SLACK_MS)
        yield w
        w.hi = time.time_ns() // 1_000_000

    def _now(self) -> int:
        return self.clock.now if self.manual_clock else time.time_ns() // 1_000_000

    def _learn_created(self, key: str, message_id: str, w: _Window) -> int:
        got = self.store.get_message(key, message_id)
        assert got is not None, f"get_message({key!r}, {message_id!r}) found nothing right after it was written"
        return w.check(got.created_at, f"created_at of {message_id!r} (given none)")

    def _new_session(self, key: str, w: _Window) -> Session:
        md = self.store.get_session_metadata(key)
        assert md is not None and md.created_at is not None, f"new session {key!r} has no created_at: {md!r}"
        session = Session(created_at=w.check(to_ms(md.created_at), f"created_at of session {key!r}"))
        self.model[key] = session
        return session

    def _expect(self, message: ChatMessage | dict[str, Any], key: str, message_id: str, w: _Window) -> ChatMessage:
        given = as_message(message).created_at
        created = given if given is not None else self._learn_created(key, message_id, w)
        return expected_message(message, message_id, created)

    def _check_new_id(self, key: str, message_id: str, previous: str | None) -> None:
        assert isinstance(message_id, str) and len(message_id) == 26 and ulid.decode(message_id) is not None, (
            f"{key!r}: a store-assigned id must be a ULID, got {message_id!r}")
        assert previous is None or message_id > previous, (
            f"{key!r}: id {message_id!r} does not sort after the previous id {previous!r}")

    def _learn_rewrite(self, key: str, planned: list[tuple[ChatMessage | dict[str, Any], str]], w: _Window) -> list[
            ChatMessage]:
        """After a whole-transcript write: the ids the store gave id-less messages (the
        caller's ids kept, all strictly increasing), then the messages as the model has them."""
        loaded = self.store.try_load(key)
        assert len(loaded) == len(planned), f"{key!r}: wrote {len(planned)} messages, loaded {len(loaded)}"
        out = []
        prev: str | None = None
        for m, (message, given) in zip(loaded, planned):
            if given:
                assert m.id == given, f"{key!r}: the caller's id {given!r} was not kept (got {m.id!r})"
                assert prev is None or m.id > prev
            else:
                self._check_new_id(key, m.id, prev)
            prev = m.id
            created = as_message(message).created_at
            out.append(expected_message(message, m.id, created if created is not None else
                                        w.check(m.created_at, f"created_at in {key!r}")))
        return out

    def _pick_id(self, data: st.DataObject, key: str, label: str) -> str:
        """An id of the session (usually) or an unknown one."""
        known = [m.id for m in self.model[key].messages] if key in self.model else []
        if known and data.draw(st.integers(0, 4), label=f"{label} known?") > 0:
            return data.draw(st.sampled_from(known), label=label)
        return data.draw(st.sampled_from(UNKNOWN_IDS), label=label)

    # -- keys, clock, reopening -------------------------------------------------------
    @initialize(target=keys, batch=st.lists(_messages, max_size=6))
    def first_session(self, batch: list[ChatMessage | dict[str, Any]]) -> str:
        """Key "A", holding a few messages from the start (so reads meet history early)."""
        self.known.add("A")
        self.append_many("A", batch)
        return "A"

    @initialize(target=keys, key=_keys, batch=strategies.tool_exchanges())
    def second_session(self, key: str, batch: list[ChatMessage]) -> str:
        self.known.add(key)
        self.append_many(key, batch)
        return key

    @precondition(lambda self: len(self.known) < MAX_KEYS)
    @rule(target=keys, key=_keys)
    def add_key(self, key: str) -> str:
        self.known.add(key)
        return key

    @precondition(lambda self: self.manual_clock)
    @rule(delta=st.sampled_from([0, 0, 1, 7, 1000, 20_000, -3000]))
    def step_clock(self, delta: int) -> None:
        self.clock.step(delta)  # frozen, forward and backward: ids must still increase

    @precondition(lambda self: self.persistent)
    @rule()
    def reopen(self) -> None:
        """Go on with a new instance: everything must come from storage."""
        self.store = self._open()

    # -- appending --------------------------------------------------------------------
    @rule(key=keys, message=_rare_large, method=st.sampled_from(["append", "append_message"]))
    def append(self, key: str, message: ChatMessage | dict[str, Any], method: str) -> None:
        previous = self.model[key].last_id if key in self.model else None
        with self._window() as w:
            new_id = getattr(self.store, method)(key, message)
        self._check_new_id(key, new_id, previous)
        session = self.model.get(key) or self._new_session(key, w)
        session.messages.append(self._expect(message, key, new_id, w))

    @rule(key=keys, message=_messages, gap=st.integers(min_value=1, max_value=2**70))
    def append_with_caller_id(self, key: str, message: ChatMessage | dict[str, Any], gap: int) -> None:
        previous = self.model[key].last_id if key in self.model else None
        given = shifted(previous, gap) if previous else ulid.encode((self._now() << 80) + gap)
        m = as_message(message).replace(id=given)
        with self._window() as w:
            assert self.store.append(key, m) == given, "a caller-supplied id must be kept"
        session = self.model.get(key) or self._new_session(key, w)
        session.messages.append(self._expect(m, key, given, w))

    @rule(key=keys, batch=_batch)
    def append_many(self, key: str, batch: list[ChatMessage | dict[str, Any]]) -> None:
        previous = self.model[key].last_id if key in self.model else None
        with self._window() as w:
            got = self.store.append_many(key, batch)
        assert isinstance(got, list) and len(got) == len(batch), f"append_many returned {got!r}"
        for new_id in got:
            self._check_new_id(key, new_id, previous)
            previous = new_id
        if batch:
            session = self.model.get(key) or self._new_session(key, w)
            session.messages += [self._expect(m, key, i, w) for m, i in zip(batch, got)]

    @precondition(lambda self: any(s.messages for s in self.model.values()))
    @rule(data=st.data(), message=_messages, many=st.booleans())
    def append_bad_id(self, data: st.DataObject, message: ChatMessage | dict[str, Any], many: bool) -> None:
        """A duplicate id -> DuplicateMessageError; a new id sorting before the last one ->
        InvalidMessageError (not a duplicate). Nothing is written."""
        key = data.draw(st.sampled_from(sorted(k for k, s in self.model.items() if s.messages)), label="key")
        msgs = self.model[key].messages
        duplicate = data.draw(st.booleans(), label="duplicate")
        bad = data.draw(st.sampled_from([m.id for m in msgs])) if duplicate else shifted(msgs[0].id, -1)
        batch = [as_message(message).replace(id=bad)]
        if many:
            batch.insert(0, as_message(message))
        with pytest.raises(InvalidMessageError) as info:
            if many:
                self.store.append_many(key, batch)
            else:
                self.store.append(key, batch[0])
        assert isinstance(info.value, DuplicateMessageError) is duplicate, repr(info.value)
        self.stats["errors checked"] += 1

    @rule(key=keys, batch=st.lists(_messages, min_size=2, max_size=4), data=st.data())
    def append_many_with_duplicate(self, key: str, batch: list[ChatMessage | dict[str, Any]],
                                   data: st.DataObject) -> None:
        previous = self.model[key].last_id if key in self.model else None
        dup = shifted(previous, 1) if previous else ulid.encode(self._now() << 80)
        second = data.draw(st.integers(min_value=1, max_value=len(batch) - 1), label="second")
        built = [as_message(m) for m in batch]
        built[0] = built[0].replace(id=dup)
        built[second] = built[second].replace(id=dup)
        with pytest.raises(DuplicateMessageError):
            self.store.append_many(key, built)
        self.stats["errors checked"] += 1

    @rule(key=keys, bad=_unserializable, message=_messages, many=st.booleans())
    def append_unserializable(self, key: str, bad: Any, message: ChatMessage | dict[str, Any], many: bool) -> None:
        """Content JSON cannot hold -> SerializationError (a TypeError); nothing written,
        no session created (also when the bad message comes after a good one)."""
        wrong = as_message(message).replace(content=[bad])
        with pytest.raises(SerializationError):
            if many:
                self.store.append_many(key, [message, wrong])
            else:
                self.store.append(key, wrong)
        self.stats["errors checked"] += 1

    # -- changing the end -------------------------------------------------------------
    @rule(key=keys, data=st.data())
    def remove_last(self, key: str, data: st.DataObject) -> None:
        session = self.model.get(key)
        msgs = session.messages if session else []
        mode = data.draw(st.sampled_from(["plain", "expected", "stale"]), label="mode")
        if mode == "stale":
            stale = data.draw(st.sampled_from([m.id for m in msgs[:-1]] + list(UNKNOWN_IDS)), label="stale")
            assert self.store.remove_last(key, expected_id=stale) is False
            return
        expected_id = msgs[-1].id if (mode == "expected" and msgs) else None
        assert self.store.remove_last(key, expected_id=expected_id) is bool(msgs)
        if msgs:
            msgs.pop()
            self.stats["removals"] += 1

    @rule(key=keys, message=_rare_large, data=st.data())
    def update_last(self, key: str, message: ChatMessage | dict[str, Any], data: st.DataObject) -> None:
        session = self.model.get(key)
        msgs = session.messages if session else []
        m = as_message(message)
        if not msgs:
            assert self.store.update_last(key, m) is False
            assert self.store.update_last(key, m, expected_id=UNKNOWN_IDS[0]) is False
            return
        mode = data.draw(st.sampled_from(["plain", "expected", "stale", "same_id", "new_id", "between",
                                          "duplicate", "out_of_order"]), label="mode")
        old = msgs[-1]
        previous = msgs[-2].id if len(msgs) > 1 else None
        created = old.created_at if m.created_at is None else m.created_at
        assert created is not None
        if mode == "stale":
            stale = previous or shifted(old.id, 1)
            assert self.store.update_last(key, m, expected_id=stale) is False
            return
        if mode in ("duplicate", "out_of_order"):
            assume(previous is not None)
            bad = previous if mode == "duplicate" else shifted(msgs[0].id, -1)
            with pytest.raises(InvalidMessageError) as info:
                self.store.update_last(key, m.replace(id=bad))
            assert isinstance(info.value, DuplicateMessageError) is (mode == "duplicate"), repr(info.value)
            self.stats["errors checked"] += 1
            return
        new_id = old.id
        if mode == "new_id":
            new_id = shifted(old.id, data.draw(st.integers(min_value=1, max_value=2**60), label="gap"))
        elif mode == "between":
            high = ulid.decode(old.id)
            assert high is not None
            low = ulid.decode(previous) if previous else high - 2**40
            assert low is not None
            # The draw must not depend on the ids' values (they come from the clock, and
            # Hypothesis replays draws): without room between them the id stays the same.
            fraction = data.draw(st.integers(min_value=0, max_value=2**16 - 1), label="between")
            if high - low > 1:
                new_id = ulid.encode(low + 1 + (high - low - 2) * fraction // (2**16 - 1))
        sent = m.replace(id=new_id) if mode in ("same_id", "new_id", "between") else m
        expected_id = old.id if mode == "expected" else None
        assert self.store.update_last(key, sent, expected_id=expected_id) is True
        msgs[-1] = expected_message(sent, new_id, created)
        self.stats["updates"] += 1

    # -- replacing everything ---------------------------------------------------------
    def _plan(self, kept: list[ChatMessage], new: list[ChatMessage | dict[str, Any]], with_ids: list[bool],
              gaps: list[int]) -> list[tuple[ChatMessage | dict[str, Any], str]]:
        planned: list[tuple[ChatMessage | dict[str, Any], str]] = [(m, m.id) for m in kept]
        cur = ulid.decode(kept[-1].id) if kept else (self._now() - 60_000) << 80
        assert cur is not None
        for message, give, gap in zip(new, with_ids, gaps):
            if give:
                cur += gap
                mid = ulid.encode(cur)
                planned.append((as_message(message).replace(id=mid), mid))
            else:
                cur += 2**20  # id-less messages take ids between the given ones
                planned.append((message, ""))
        return planned

    @rule(key=keys, keep=st.lists(st.booleans(), max_size=12), new=st.lists(_messages, max_size=4),
          with_ids=st.lists(st.booleans(), min_size=4, max_size=4),
          gaps=st.lists(st.integers(min_value=2**24, max_value=2**79), min_size=4, max_size=4))
    def rewrite_messages(self, key: str, keep: list[bool], new: list[ChatMessage | dict[str, Any]],
                         with_ids: list[bool], gaps: list[int]) -> None:
        old = self.model[key].messages if key in self.model else []
        planned = self._plan([m for m, k in zip(old, keep) if k], new, with_ids, gaps)
        with self._window() as w:
            assert self.store.rewrite_messages(key, [m for m, _ in planned]) is None
        session = self.model.get(key) or self._new_session(key, w)
        session.messages = self._learn_rewrite(key, planned, w)
        self.stats["rewrites"] += 1

    @rule(key=keys, batch=st.lists(_messages, min_size=2, max_size=4), duplicate=st.booleans(),
          method=st.sampled_from(["rewrite", "replace", "replace_if_exists"]))
    def rewrite_out_of_order(self, key: str, batch: list[ChatMessage | dict[str, Any]], duplicate: bool,
                             method: str) -> None:
        """Ids that do not strictly increase: InvalidMessageError (DuplicateMessageError for
        a repeated one) and nothing written, whichever whole-transcript write it is."""
        high = ulid.encode((self._now() << 80) + 1000)
        low = shifted(high, -10)
        built = [as_message(m) for m in batch]
        built[0] = built[0].replace(id=high)
        built[-1] = built[-1].replace(id=high if duplicate else low)
        if method == "replace_if_exists" and key not in self.model:
            assert self.store.replace_conversation_state_if_exists(key, built, True) is False
            return
        with pytest.raises(InvalidMessageError) as info:
            if method == "rewrite":
                self.store.rewrite_messages(key, built)
            elif method == "replace":
                self.store.replace_conversation_state(key, built, True)
            else:
                self.store.replace_conversation_state_if_exists(key, built, True)
        assert isinstance(info.value, DuplicateMessageError) is duplicate, repr(info.value)
        self.stats["errors checked"] += 1

    @rule(key=keys, prefix=st.lists(_messages, max_size=2), keep=st.integers(min_value=0, max_value=4),
          crumb=st.booleans(), if_exists=st.booleans())
    def replace_conversation_state(self, key: str, prefix: list[ChatMessage | dict[str, Any]], keep: int,
                                   crumb: bool, if_exists: bool) -> None:
        """The trimming pattern: id-less messages (a breadcrumb) before a kept suffix."""
        old = self.model[key].messages if key in self.model else []
        kept = old[len(old) - min(keep, len(old)):]
        planned: list[tuple[ChatMessage | dict[str, Any], str]] = [(m, "") for m in prefix] + [(m, m.id) for m in kept]
        with self._window() as w:
            if if_exists:
                done = self.store.replace_conversation_state_if_exists(key, [m for m, _ in planned], crumb)
                assert done is (key in self.model), f"replace_conversation_state_if_exists returned {done!r}"
                if not done:
                    return
            else:
                assert self.store.replace_conversation_state(key, [m for m, _ in planned], crumb) is None
        session = self.model.get(key) or self._new_session(key, w)
        session.messages = self._learn_rewrite(key, planned, w)
        session.breadcrumb = crumb
        self.stats["replaces"] += 1

    @rule(key=keys)
    def clear_messages(self, key: str) -> None:
        session = self.model.get(key)
        assert self.store.clear_messages(key) == (len(session.messages) if session else 0)
        if session:
            session.messages.clear()

    @rule(key=keys)
    def delete_session(self, key: str) -> None:
        assert self.store.delete_session(key) is (key in self.model)
        self.model.pop(key, None)

    # -- fork and revert --------------------------------------------------------------
    @rule(source=keys, dest=keys | _keys, data=st.data())
    def copy_messages(self, source: str, dest: str, data: st.DataObject) -> None:
        target = dest  # ("target" is a reserved rule argument)
        self.known.add(target)
        up_to = None if data.draw(st.booleans(), label="all") else self._pick_id(data, source, "up_to")
        src = self.model.get(source)
        error: type[Exception] | None = None
        if src is None:
            error = SessionNotFoundError
        elif target in self.model:
            error = SessionExistsError
        elif up_to is not None and up_to not in [m.id for m in src.messages]:
            error = MessageNotFoundError
        if error is not None:
            with pytest.raises(error):
                self.store.copy_messages(source, target, up_to_message_id=up_to)
            self.stats["errors checked"] += 1
            return
        assert src is not None
        ids = [m.id for m in src.messages]
        end = len(ids) if up_to is None else ids.index(up_to) + 1
        fork_point = ids[end - 1] if end else None
        with self._window() as w:
            assert self.store.copy_messages(source, target, up_to_message_id=up_to) == fork_point
        fork = self._new_session(target, w)
        fork.messages = list(src.messages[:end])
        fork.breadcrumb = src.breadcrumb
        fork.parent, fork.fork_point = source, fork_point
        self.stats["forks"] += 1

    @rule(key=keys, data=st.data())
    def truncate_messages(self, key: str, data: st.DataObject) -> None:
        up_to = self._pick_id(data, key, "up_to")
        session = self.model.get(key)
        if session is None:
            with pytest.raises(SessionNotFoundError):
                self.store.truncate_messages(key, up_to)
            return
        ids = [m.id for m in session.messages]
        if up_to not in ids:
            with pytest.raises(MessageNotFoundError):
                self.store.truncate_messages(key, up_to)
            self.stats["errors checked"] += 1
            return
        keep = ids.index(up_to) + 1
        assert self.store.truncate_messages(key, up_to) == len(ids) - keep
        del session.messages[keep:]
        self.stats["truncations"] += 1

    @rule(key=keys, repair=st.booleans())
    def compact(self, key: str, repair: bool) -> None:
        """A clean transcript: nothing to drop."""
        if key not in self.model:
            with pytest.raises(SessionNotFoundError):
                self.store.compact(key, repair=repair)
            return
        assert self.store.compact(key, repair=repair) == 0

    # -- metadata ---------------------------------------------------------------------
    @rule(key=keys, data=st.data())
    def set_metadata(self, key: str, data: st.DataObject) -> None:
        """One setter, on an existing or a missing session (SessionNotFoundError, nothing
        created), sometimes with a value it must refuse (TypeError / ValueError)."""
        which = data.draw(st.sampled_from(["name", "alias", "context", "principal", "state", "breadcrumb"]),
                          label="setter")
        session = self.model.get(key)
        invalid = session is not None and data.draw(st.integers(0, 6), label="invalid?") == 0
        if invalid:
            call, error = data.draw(st.sampled_from([
                (lambda: self.store.set_session_name(key, 5), TypeError),
                (lambda: self.store.set_session_name(key, "lone \ud800"), ValueError),
                (lambda: self.store.set_session_agent_alias(key, None), TypeError),
                (lambda: self.store.set_session_context(key, ["not", "a", "mapping"]), TypeError),
                (lambda: self.store.set_session_context(key, {"k": 1}), TypeError),
                (lambda: self.store.set_session_principal(key, ""), ValueError),
                (lambda: self.store.set_session_state(key, "done"), ValueError),
                (lambda: self.store.set_session_state(key, "Running"), ValueError),
            ]), label="invalid call")
            with pytest.raises(error):
                call()
            self.stats["errors checked"] += 1
            return
        if which == "name":
            value: Any = data.draw(st.sampled_from(NAMES) | st.text(max_size=8), label="name")
            call = lambda: self.store.set_session_name(key, value)
        elif which == "alias":
            value = data.draw(st.sampled_from(ALIASES), label="alias")
            call = lambda: self.store.set_session_agent_alias(key, value)
        elif which == "context":
            value = data.draw(st.dictionaries(st.sampled_from(["cwd", "model", "\u00e9"]), st.text(max_size=5),
                                              max_size=2), label="context")
            call = lambda: self.store.set_session_context(key, value)
        elif which == "principal":
            value = data.draw(st.sampled_from(OWNERS), label="owner")
            call = lambda: self.store.set_session_principal(key, value)
        elif which == "breadcrumb":
            value = data.draw(st.booleans(), label="flag")
            call = lambda: self.store.set_session_trim_breadcrumb(key, value)
        else:
            value = (data.draw(st.sampled_from(["idle", "running", "error"]), label="state"),
                     data.draw(st.none() | st.sampled_from(["t1", "t2"]), label="turn"))
            call = lambda: self.store.set_session_state(key, *value)
        if session is None:
            with pytest.raises(SessionNotFoundError):
                call()
            self.stats["errors checked"] += 1
            return
        with self._window() as w:
            assert call() is None
        if which == "name":
            session.name = value
        elif which == "alias":
            session.alias = value
        elif which == "context":
            session.context = dict(value)
        elif which == "principal":
            session.owner = value
        elif which == "breadcrumb":
            session.breadcrumb = value
        else:
            state, turn = value
            turn = None if state == "idle" else turn
            if (session.state, session.turn) != (state, turn) or session.since is None:
                got = self.store.get_session_state(key)
                assert got is not None
                session.since = w.check(to_ms(got.since), f"since of {key!r}")
            session.state, session.turn = state, turn

    @rule(key=keys, owner=st.sampled_from([*OWNERS, ""]))
    def delete_session_owned(self, key: str, owner: str) -> None:
        session = self.model.get(key)
        expected = session is not None and owner != "" and session.owner == owner
        assert self.store.delete_session_owned(key, owner) is expected
        if expected:
            del self.model[key]
            self.stats["owner-checked deletions"] += 1

    @rule(op=st.sampled_from(["count", "rename", "clear"]), old=st.sampled_from(ALIASES),
          new=st.sampled_from(ALIASES))
    def attribution(self, op: str, old: str, new: str) -> None:
        matching = [s for s in self.model.values() if s.alias == old]
        if op == "count":
            assert self.store.count_agent_attribution(old) == len(matching)
        elif op == "rename":
            assert self.store.rename_agent_attribution(old, new) == len(matching)
            for s in matching:
                s.alias = new
        else:
            assert self.store.clear_agent_attribution(old) == len(matching)
            for s in matching:
                s.alias = None

    @rule(ttl=st.sampled_from([10**6] * 7 + [0]))
    def cleanup_stale(self, ttl: int) -> None:
        """A huge TTL deletes nothing; a zero TTL deletes every session not ``running``."""
        doomed = [k for k, s in self.model.items() if s.state != "running"] if ttl == 0 else []
        assert self.store.cleanup_stale(ttl) == len(doomed)
        for k in doomed:
            del self.model[k]
        self.stats["sessions deleted by cleanup_stale"] += len(doomed)

    @rule(threshold=st.sampled_from([0, 1, 30, 3600]))
    def list_running_and_stuck(self, threshold: int) -> None:
        running = sorted(k for k, s in self.model.items() if s.state == "running")
        assert [m.key for m in self.store.list_running_sessions()] == running
        with self._window() as w:
            stuck = [m.key for m in self.store.list_stuck_sessions(threshold)]
        since = {k: self.model[k].since or 0 for k in running}
        sure = sorted(k for k in running if w.lo - w.slack - since[k] > threshold * 1000)
        maybe = sorted(k for k in running if w.hi + w.slack - since[k] > threshold * 1000)
        assert set(sure) <= set(stuck) <= set(maybe) and stuck == sorted(stuck), (stuck, sure, maybe)

    @rule(keyword=st.sampled_from(KEYWORDS), alias=st.none() | st.sampled_from(ALIASES),
          limit=st.none() | st.integers(min_value=0, max_value=3), data=st.data())
    def search(self, keyword: str, alias: str | None, limit: int | None, data: st.DataObject) -> None:
        texts = [t for s in self.model.values() for m in s.messages for t in texts_of(m.content) if t]
        texts += [s.name for s in self.model.values() if s.name]
        if texts and data.draw(st.booleans(), label="from a message or name") is True:
            text = data.draw(st.sampled_from(texts), label="text")
            start = data.draw(st.integers(0, len(text) - 1), label="start")
            keyword = text[start : start + data.draw(st.integers(1, 6), label="length")]
        # Matching ignores case: look for the text in other cases too.
        keyword = data.draw(st.sampled_from([keyword, keyword.upper(), keyword.lower(), keyword.swapcase()]),
                            label="case")
        needle = keyword.casefold()
        expected = {
            k for k, s in self.model.items()
            if (alias is None or s.alias == alias)
            and (not needle or (s.name is not None and needle in s.name.casefold())
                 or any(needle in t.casefold() for m in s.messages for t in texts_of(m.content)))
        }
        got = self.store.search(SessionQuery(keyword, limit=limit, agent_alias=alias))
        keys = [m.key for m in got]
        assert len(keys) == len(set(keys)), keys
        assert set(keys) <= expected, (keyword, keys, expected)
        assert len(keys) == (len(expected) if limit is None else min(limit, len(expected))), (keyword, keys, expected)
        stamps = [m.updated_at or EPOCH for m in got]
        assert all(a >= b for a, b in itertools.pairwise(stamps)), "search: newest activity first"
        for md in got:
            self._check_metadata(md, md.key)
        self.stats["search results checked"] += len(keys)

    # -- reads ------------------------------------------------------------------------
    @rule(key=keys, data=st.data())
    def get_message(self, key: str, data: st.DataObject) -> None:
        mid = self._pick_id(data, key, "id")
        want = next((m for m in self.model[key].messages if m.id == mid), None) if key in self.model else None
        assert self.store.get_message(key, mid) == want

    @rule(key=keys, offset=st.integers(0, 30), limit=st.none() | st.integers(0, 30))
    def get_messages(self, key: str, offset: int, limit: int | None) -> None:
        session = self.model.get(key)
        if session is None:
            with pytest.raises(SessionNotFoundError):
                self.store.get_messages(key, offset=offset, limit=limit)
            return
        msgs = session.messages
        want = msgs[offset:] if limit is None else msgs[offset : offset + limit]
        assert self.store.get_messages(key, offset=offset, limit=limit) == want

    @rule(key=keys, data=st.data(), limit=st.integers(1, 12), breakpoint=st.booleans(), whole_turns=st.booleans(),
          direction=st.sampled_from(["newest", "before", "after", "after-start"]))
    def page(self, key: str, data: st.DataObject, limit: int, breakpoint: bool, whole_turns: bool,
             direction: str) -> None:
        session = self.model.get(key)
        options: dict[str, Any] = {"limit": limit, "breakpoint": breakpoint, "whole_turns": whole_turns}
        stamps = sorted({m.created_at for m in session.messages if m.created_at is not None}) if session else []
        if data.draw(st.booleans(), label="ts_before?"):
            options["ts_before"] = _pick(data, stamps, "ts_before") if stamps else data.draw(st.integers(0, 2**47))
        if direction == "before":
            options["before"] = self._pick_id(data, key, "cursor")
        elif direction == "after":
            options["after"] = self._pick_id(data, key, "cursor")
        elif direction == "after-start":
            options["after"] = ""
        if session is None:
            with pytest.raises(SessionNotFoundError):
                self.store.page(key, **options)
            return
        cursor = options.get("before") or options.get("after")
        if cursor and cursor not in [m.id for m in session.messages]:
            with pytest.raises(MessageNotFoundError):
                self.store.page(key, **options)
            return
        assert self.store.page(key, **options) == reference_page(session.messages, **options)
        self.stats["pages checked"] += 1

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), limit=st.integers(1, 5), filtered=st.booleans())
    def walk_both_ways(self, data: st.DataObject, limit: int, filtered: bool) -> None:
        """Pages walked to the beginning (and from it to the end) concatenate to the
        history (or the part created before ts_before): no gap, no duplicate."""
        key = data.draw(st.sampled_from(sorted(self.model)), label="key")
        msgs = self.model[key].messages
        stamps = sorted({m.created_at for m in msgs if m.created_at is not None})
        ts_before = _pick(data, stamps, "ts_before") if filtered and stamps else None
        want = [m for m in msgs if ts_before is None or (m.created_at is not None and m.created_at < ts_before)]
        for direction in ("older", "newer"):
            got: list[ChatMessage] = []
            cursor: str | None = None if direction == "older" else ""
            for _ in range(len(msgs) + 2):
                if direction == "older":
                    p = self.store.page(key, limit=limit, before=cursor, ts_before=ts_before)
                    got[:0] = p.messages
                    cursor = p.before
                else:
                    p = self.store.page(key, limit=limit, after=cursor, ts_before=ts_before)
                    got.extend(p.messages)
                    cursor = p.after
                assert len(p.messages) <= limit
                if not p.has_more:
                    assert cursor is None
                    break
            assert got == want, f"{key!r}: pages walked {direction} do not make up the history"
        self.stats["page walks"] += 1

    # -- invariants -------------------------------------------------------------------
    def _check_metadata(self, md: SessionMetadata, key: str) -> None:
        session = self.model[key]
        assert isinstance(md, SessionMetadata), md
        assert isinstance(md.updated_at, datetime), f"{key!r}: updated_at {md.updated_at!r}"
        assert isinstance(md.size_bytes, int) and md.size_bytes >= 0, f"{key!r}: size_bytes {md.size_bytes!r}"
        got = dataclasses.replace(md, updated_at=None, size_bytes=0)
        assert got == session.metadata(key), f"{key!r}: metadata\n{got}\n!= model\n{session.metadata(key)}"

    def _agrees(self, store: Any, thorough: bool) -> None:
        assert store.list_sessions() == sorted(self.model), "list_sessions"
        listed = store.list_sessions_with_metadata()
        assert [m.key for m in listed] == sorted(self.model), "list_sessions_with_metadata"
        for md in listed:
            self._check_metadata(md, md.key)
        for key in self.known:
            session = self.model.get(key)
            assert store.session_exists(key) is (session is not None), f"session_exists({key!r})"
            if session is None:
                assert store.load(key) == [] and store.try_load(key) == [], key
                assert store.get_session_metadata(key) is None, key
                assert store.get_session_trim_breadcrumb(key) is None, key
                assert store.get_session_name(key) is None and store.get_session_state(key) is None, key
                continue
            msgs = session.messages
            assert store.try_load(key) == msgs, f"try_load({key!r})"
            assert store.get_message_count(key) == len(msgs), f"get_message_count({key!r})"
            md = store.get_session_metadata(key)
            assert md is not None, key
            self._check_metadata(md, key)
            assert store.get_session_trim_breadcrumb(key) == session.breadcrumb, key
            assert store.get_session_name(key) == session.name, key
            assert store.get_session_agent_alias(key) == session.alias, key
            want_state = None if session.state is None else SessionState(
                session.state, session.turn, EPOCH + timedelta(milliseconds=session.since or 0))
            assert store.get_session_state(key) == want_state, key
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
        self._agrees(self._open(), thorough=True)
        self.stats["fresh-store checks"] += 1


def make_state_machine(factory: StoreFactory, *, manual_clock: bool = False,
                       name: str | None = None) -> type[SessionStoreMachine]:
    """A state machine class checking the stores ``factory`` builds against the model.

    ``factory(path)`` returns a store with the store's public API on ``path`` (a fresh directory per
    example; a second call with the same path must see the same data unless the factory
    or the store has ``persistent = False``). With ``manual_clock=True`` it is called as
    ``factory(path, clock)``, ``clock`` a :class:`ManualClock` to use as the store's clock.
    The class's ``stats`` counter sums what its runs exercised (examples, steps, ...)."""
    attrs = {"factory": staticmethod(factory), "manual_clock": manual_clock, "stats": Counter()}
    return type(name or f"SessionStoreMachine_{getattr(factory, '__name__', 'store')}", (SessionStoreMachine,),
                attrs)


__all__ = ["CLOCK_SLACK_MS", "ManualClock", "SessionStoreMachine", "make_state_machine", "reference_page"]
