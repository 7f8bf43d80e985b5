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
:class:`StorageProbe` for the store (for the JSONL
layout: :class:`~jsonl_sessions.testing.JsonlFileDamage`). Then rules also damage
transcripts as another tool would (a line written twice, a corrupt line, a torn tail),
age a session's storage past a TTL, and check ``compact`` / ``compact(repair=True)``
(what they drop, the quarantine files), ``cleanup_stale`` of aged sessions, lenient
``load`` and counts of damaged transcripts, ``size_bytes`` and ``updated_at`` against
storage, and that storage holds nothing but the store's files. A damaged session takes
appends, metadata and deletion until compacted; the other transcript rules leave it alone.

Not covered here (see the contract mixin and the fault tools): concurrency, crashes.

**Layout.** :class:`MachineBase` holds the state (store under test, reference model,
what storage damage and aging it applied), the clock and the helpers the rule sets
share; :class:`WriteRules` the rules for the transcript writes, :class:`ReadRules` for
metadata and the history reads, :class:`StorageRules` for the storage capability;
:class:`SessionStoreMachine` combines them with the keys, clock and reopening rules and
the invariants.
"""

from __future__ import annotations

import itertools
import pathlib
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

import orjson
import pytest
from hypothesis import assume, note
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, precondition, rule

from .. import ids as ulid
from ..errors import (
    CorruptTranscriptError,
    DuplicateMessageError,
    InvalidMessageError,
    SerializationError,
    SessionStoreError,
)
from ..protocol import SessionBackend
from ..types import ChatMessage, SessionMetadata, SessionQuery, as_message
from . import strategies
from .reference import EPOCH, ReferenceStore, texts_of
from .reference import page as reference_page
from .report import Mismatch, Program, RecordingStore, touched_keys

# == state, clock and shared helpers ========================================================
#: How far (ms) a time the store chose may lie outside the wall-clock window of the call
#: (its clock may be read a little differently from ``time.time_ns``).
CLOCK_SLACK_MS = 1000
START_MS = 1_700_000_000_000
#: Keys in play at once (more would spread the history too thin to meet the reads).
MAX_KEYS = 6
UNKNOWN_IDS = ("0" * 26, "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "not-an-id")
ALIASES = ("planner", "coder", "Planner")
OWNERS = ("alice", "bob")
NAMES = ("alpha", "Beta", "stra\u00dfe", 'quote"d', "new\nline", "back\\slash", "\U0001f99c", "")
#: Words for message text that search must find in any case.
WORDS = ("alpha", "Beta", "GAMMA", "stra\u00dfe", "\u00c9t\u00e9", "\U0001f99c", 'quote"d', "new\nline",
         "back\\slash")
KEYWORDS = ("", "a", "alpha", "BETA", "gamma", "STRASSE", "\u00e9T\u00c9", "\U0001f99c", "zz", "line", "e",
            "\\sla")
#: Tool call ids the turn-shaped messages draw from (few, so calls and results meet).
TOOL_IDS = ("t1", "t2", "t3", "")
#: How far back the ``age`` rule sets a session's storage time (stale for a 2-hour TTL).
AGED_NS = 3 * 3600 * 10**9
StoreFactory = Callable[..., SessionBackend]
#: A damaged transcript, line by line: ("msg", message), ("dup", copy of the line
#: before it), ("bad", None) for a line that does not parse.
Lines = list[tuple[str, ChatMessage | None]]


class ManualClock:
    """Milliseconds since the epoch, moved only by the test (``now``, :meth:`step`)."""

    def __init__(self, now: int = START_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def step(self, delta_ms: int) -> None:
        self.now += delta_ms


class StorageProbe(Protocol):
    """The storage capability of a backend (see ``make_state_machine(storage=...)``):
    reach under the API to damage, age and inspect one store's stored data."""

    def raw(self, key: str) -> bytes:
        """The session's stored transcript bytes (JSONL lines)."""
        ...

    def append_raw(self, key: str, data: bytes) -> None:
        """Append bytes to the stored transcript, under the session's guard."""
        ...

    def age(self, key: str, ns: int) -> None:
        """Make the session look last changed at ``ns`` (wall clock, ns)."""
        ...

    def changed_at(self, key: str) -> int:
        """When the session last changed, as storage shows it (ns): ``updated_at``."""
        ...

    def size(self, key: str) -> int:
        """The bytes the session's transcript takes: ``size_bytes``."""
        ...

    def check_layout(self) -> int:
        """Assert that storage holds only the store's own files (no temp files, no
        orphans, nothing beside it); the number of quarantine files."""
        ...


def _final_run() -> bool:
    """Whether Hypothesis is replaying the failing example it will report."""
    try:
        return bool(current_build_context().is_final)
    except Exception:  # noqa: BLE001 - outside a Hypothesis test: treat as final
        return True


def expected_message(message: ChatMessage | dict[str, Any], message_id: str, created_at: int) -> ChatMessage:
    """``message`` as a store returns it: with its id and time, after a JSON round trip."""
    m = as_message(message)
    record = {"id": message_id, "created_at": created_at, "role": m.role, "kind": m.kind, "content": m.content,
              **m.extra}
    return ChatMessage.from_dict(orjson.loads(orjson.dumps(record)))


def pick(data: st.DataObject, values: list[int], label: str) -> int:
    """One of ``values``, drawn so that the draw does not depend on how many there are (the
    number of distinct timestamps depends on the wall clock, and Hypothesis replays draws)."""
    return values[data.draw(st.integers(min_value=0, max_value=2**16), label=label) % len(values)]


def to_ms(when: datetime) -> int:
    return (when - EPOCH) // timedelta(milliseconds=1)


def from_ns(ns: int) -> datetime:
    """A storage time (ns) as ``updated_at`` shows it (microsecond precision)."""
    return EPOCH + timedelta(microseconds=ns // 1000)


def shifted(message_id: str, delta: int) -> str:
    value = ulid.decode(message_id)
    assert value is not None, message_id
    return ulid.encode(value + delta)


@dataclass
class Window:
    """The clock values a store may have used during a call: ``[lo, hi]`` +- ``slack``."""

    lo: int
    hi: int
    slack: int

    def check(self, value: int | None, what: str) -> int:
        assert isinstance(value, int), f"{what}: expected int milliseconds, got {value!r}"
        assert self.lo - self.slack <= value <= self.hi + self.slack, (
            f"{what}: {value} is outside the call's clock window [{self.lo}, {self.hi}]")
        return value


def _turn_part(role: str, calls: tuple[str, ...], result_of: str | None, content: Any, kind: str,
               created_at: int | None) -> ChatMessage:
    extra: dict[str, Any] = {}
    if calls:
        extra["tool_calls"] = [{"id": c, "type": "function", "function": {"name": "f"}} for c in calls]
    if result_of is not None:
        extra["tool_call_id"] = result_of
    return ChatMessage(role, content, created_at=created_at, kind=kind, extra=extra)


# Strategies (module level: built once).
KEYS = Bundle("keys")
new_keys = strategies.session_keys()
_words = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)
_near_start = st.none() | st.integers(START_MS - 10_000, START_MS + 10_000)
#: Pieces of tool-using turns from a small pool of call ids (calls without results,
#: results without calls, markers, times out of order), for ``page(whole_turns=...)``.
turn_parts = st.one_of(
    st.builds(_turn_part, st.just("assistant"), st.lists(st.sampled_from(TOOL_IDS), min_size=1, max_size=2,
                                                         unique=True).map(tuple),
              st.none(), st.none(), st.just("message"), _near_start),
    st.builds(_turn_part, st.just("tool"), st.just(()), st.sampled_from(TOOL_IDS), _words, st.just("message"),
              _near_start),
    st.builds(_turn_part, st.sampled_from(["user", "system"]), st.just(()), st.none(), _words,
              st.sampled_from(["message", "compaction"]), _near_start),
)
messages = strategies.messages(large=False) | st.builds(
    ChatMessage, st.sampled_from(strategies.ROLES),
    _words | st.lists(_words | st.fixed_dictionaries({"type": st.just("text"), "text": _words}), max_size=2))
rare_large = st.integers(0, 19).flatmap(lambda n: strategies.messages(large=True) if n == 0 else messages)
batches = (st.lists(rare_large, max_size=4) | strategies.tool_exchanges().map(list)
           | st.lists(turn_parts, min_size=1, max_size=6))
unserializable = st.sampled_from([float("nan"), float("inf"), 2**70, {1: "int key"}, b"bytes", {"set"}])

#: The states :meth:`SessionStoreMachine.edge_state` builds a new session in: no message
#: left (it exists, empty), one message, two, two with the last removed and another
#: appended (its id must be new), a fork of a session with a message appended to both.
EDGE_STATES = ("empty session", "one message", "two messages", "remove then append", "fork then append")

#: What a refused call returns in :meth:`MachineBase.same_outcome`.
REFUSED = object()


class MachineBase(RuleBasedStateMachine):
    """State and helpers; use :func:`~jsonl_sessions.testing.make_state_machine`."""

    #: ``factory(path)`` (or ``factory(path, clock)`` with ``manual_clock``).
    factory: StoreFactory
    manual_clock: bool = False
    #: The manual clock never moves (every id of a run is made in one millisecond).
    frozen_clock: bool = False
    #: ``storage(store)``: the backend's :class:`StorageProbe`, or None.
    storage: Callable[[SessionBackend], StorageProbe] | None = None
    #: What the machine exercised, summed over all instances of the class.
    stats: Counter[str]

    keys = KEYS

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="jsonl-harness-")
        self.path = pathlib.Path(self.tmp, "store")
        self.clock = ManualClock()
        #: The calls of this run as Python, and the sessions the current step touched.
        self.program = Program()
        self.touched: set[str | None] = set()
        self.real = self._open()
        self.store: Any = RecordingStore(self.real, self.program, self.touched)
        self.persistent = bool(getattr(type(self).factory, "persistent", True)
                               and getattr(self.real, "persistent", True))
        self.ref = ReferenceStore(wall=itertools.count(1).__next__)  # activity: a change counter
        self.model = self.ref.sessions
        self.known: set[str] = set()
        self.damaged: dict[str, Lines] = {}
        self.aged: dict[str, tuple[int, int]] = {}  # key -> (storage time set, model activity then)
        self.quarantined = 0
        self.removed: dict[str, set[str]] = {}  # key -> ids remove_last took from its end
        self.stats["examples"] += 1

    def _open(self) -> SessionBackend:
        factory = type(self).factory
        return factory(self.path, self.clock) if self.manual_clock else factory(self.path)

    @staticmethod
    def _close(store: SessionBackend) -> None:
        close = getattr(store, "close", None)  # (a test's facade may have none)
        if callable(close):
            close()

    def teardown(self) -> None:
        failure = sys.exc_info()[1]
        try:
            if failure is None:
                self._agrees(self.real, set(self.known), thorough=True)  # the last state, everything
            elif _final_run():
                note(self.reproduction(failure))
        finally:
            self._close(self.real)
            shutil.rmtree(self.tmp, ignore_errors=True)

    def reproduction(self, failure: BaseException) -> str:
        """The calls of this run, and the check that failed, as a pytest test."""
        if isinstance(failure, Mismatch):
            if self.program.lines and self.program.lines[-1].endswith(failure.operation):
                self.program.lines.pop()  # the failed call is the assertion below
            failing = self.program.assertion(failure.operation, failure.got, failure.want)
        else:
            failing = "# then: " + f"{type(failure).__name__}: {failure}".replace("\n", "\n# ")
        return ("The shortest failing program, as a test (make_store: the factory given to the harness):\n\n"
                + self.program.as_test(failing))

    @property
    def untyped(self) -> Any:
        """The store under test, to check at run time what its type promises (e.g. None)."""
        return self.store

    def probe(self, store: SessionBackend | None = None) -> StorageProbe | None:
        storage = type(self).storage
        return None if storage is None else storage(self.real if store is None else store)

    # -- comparing ----------------------------------------------------------------------
    def agree(self, got: Any, want: Any, operation: str | None = None) -> Any:
        """``got`` (the store's result of ``operation``, by default the newest recorded
        call) must equal the model's ``want``: :class:`Mismatch` otherwise."""
        if got != want or type(got) is not type(want) and isinstance(want, bool):
            raise Mismatch(operation or self.program.last, got, want, after=self.program.last)
        return got

    def ask(self, store: Any, want: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``store.method(...)`` (not recorded: a check) and :meth:`agree` with ``want``."""
        operation = self.program.call(method, args, kwargs)
        try:
            got = getattr(store, method)(*args, **kwargs)
        except Exception as exc:
            raise Mismatch(operation, exc, want, f"the store raised {exc!r}; the model returns a value",
                           after=self.program.last) from exc
        if got != want or type(got) is not type(want) and isinstance(want, bool):
            raise Mismatch(operation, got, want, after=self.program.last)
        return got

    def refuses(self, error: type[BaseException], call: Callable[[], Any], why: str) -> BaseException:
        """``call()`` (a recorded call) must raise ``error``: the model refuses it (``why``)."""
        try:
            got = call()
        except error as exc:
            self.stats["errors checked"] += 1
            return exc
        except Exception as exc:
            raise Mismatch(self.program.last, exc, error, f"the model refuses this ({why}) with "
                           f"{error.__name__}; the store raised {type(exc).__name__}") from exc
        raise Mismatch(self.program.last, got, error,
                       f"the model refuses this ({why}) with {error.__name__}; the store returned {got!r}")

    # -- time -------------------------------------------------------------------------
    @contextmanager
    def window(self) -> Iterator[Window]:
        """The range of clock values the store may have used during the block."""
        if self.manual_clock:
            yield Window(self.clock.now, self.clock.now, 0)
            return
        w = Window(time.time_ns() // 1_000_000, 0, CLOCK_SLACK_MS)
        yield w
        w.hi = time.time_ns() // 1_000_000

    def now(self) -> int:
        return self.clock.now if self.manual_clock else time.time_ns() // 1_000_000

    # -- learning what the store chose --------------------------------------------------
    def creation(self, key: str, w: Window) -> int:
        """The creation time of ``key`` if the model does not know the session yet (the
        store just created it: read back, checked against the call's window), else 0."""
        return 0 if key in self.model else self.created_of(key, w)

    def created_of(self, key: str, w: Window) -> int:
        """The creation time the store gave ``key`` during ``w``."""
        md = self.real.get_session_metadata(key)
        assert md is not None and md.created_at is not None, (
            f"{self.program.last}: the new session {key!r} has no created_at: {md!r}")
        return w.check(to_ms(md.created_at), f"created_at of session {key!r}")

    def expect(self, message: ChatMessage | dict[str, Any], key: str, message_id: str, w: Window) -> ChatMessage:
        """The stored form of a message just written with id ``message_id``."""
        given = as_message(message).created_at
        if given is None:
            got = self.real.get_message(key, message_id)
            assert got is not None, (f"{self.program.last}: store.get_message({key!r}, {message_id!r}) found "
                                     "nothing right after it was written")
            given = w.check(got.created_at, f"created_at of {message_id!r} (given none)")
        return expected_message(message, message_id, given)

    def check_new_id(self, key: str, message_id: str, previous: str | None) -> None:
        assert isinstance(message_id, str) and len(message_id) == 26 and ulid.decode(message_id) is not None, (
            f"{self.program.last}: a store-assigned id must be a ULID, got {message_id!r}")
        assert previous is None or message_id > previous, (
            f"{self.program.last}: id {message_id!r} does not sort after the previous id {previous!r} of {key!r}")
        assert message_id not in self.removed.get(key, ()), (
            f"{self.program.last}: returned id {message_id!r}, the id of a message remove_last removed from {key!r} "
            "(a compare-and-remove could take the new message for the old one)")

    def learn_rewrite(self, key: str, planned: list[tuple[ChatMessage | dict[str, Any], str]], w: Window) -> list[
            ChatMessage]:
        """After a whole-transcript write: the ids the store gave id-less messages (the
        caller's ids kept, all strictly increasing), then the messages as stored."""
        operation = self.program.last
        loaded = self.store.try_load(key)
        if len(loaded) != len(planned):
            raise Mismatch(self.program.last, loaded, [m for m, _ in planned],
                           f"after {operation} wrote {len(planned)} messages, the store loads {len(loaded)}")
        out = []
        prev: str | None = None
        for m, (message, given) in zip(loaded, planned):
            if given:
                assert m.id == given, f"{operation}: the caller's id {given!r} was not kept (got {m.id!r})"
                assert prev is None or m.id > prev, f"{operation}: ids out of order in {key!r}"
            else:
                self.check_new_id(key, m.id, prev)
            prev = m.id
            created = as_message(message).created_at
            out.append(expected_message(message, m.id, created if created is not None else
                                        w.check(m.created_at, f"created_at in {key!r}")))
        return out

    def same_outcome(self, call: Callable[[], Any], expected: Callable[[], Any]) -> Any:
        """Run ``expected()`` on the model, then ``call()`` on the store: the same result,
        or (when the model refuses) the same error; :data:`REFUSED` then."""
        try:
            want = expected()
        except SessionStoreError as exc:
            self.refuses(type(exc), call, str(exc))
            return REFUSED
        return self.agree(call(), want)

    # -- the model ----------------------------------------------------------------------
    def intact(self, key: str) -> bool:
        """Whether the session's stored transcript is as the API wrote it (no damage)."""
        return key not in self.damaged

    def last_id(self, key: str) -> str | None:
        session = self.model.get(key)
        return None if session is None else session.last_id

    def busy(self, data: st.DataObject, key: str) -> str:
        """Usually a session holding messages (where removals, updates, forks and pages
        have something to act on), else ``key``: so a run reaches those states early."""
        full = sorted(k for k, s in self.model.items() if s.messages and self.intact(k))
        if full and data.draw(st.integers(0, 3), label="a session with messages?") > 0:
            return data.draw(st.sampled_from(full), label="busy key")
        return key

    def pick_id(self, data: st.DataObject, key: str, label: str, *, skip_first: bool = False,
                skip_last: bool = False) -> str:
        """An id of the session (usually; not the first or last one when told, if there
        are others: a cursor there has a page on its side) or an unknown one."""
        known = [m.id for m in self.model[key].messages] if key in self.model else []
        if len(known) > 1:
            known = known[1 if skip_first else 0 : len(known) - 1 if skip_last else len(known)]
        if known and data.draw(st.integers(0, 4), label=f"{label} known?") > 0:
            return data.draw(st.sampled_from(known), label=label)
        return data.draw(st.sampled_from(UNKNOWN_IDS), label=label)

    def added(self, key: str, stored: list[ChatMessage], w: Window) -> None:
        """Record messages the store appended (creating the session when new)."""
        if stored:
            self.ref.append(key, stored, self.creation(key, w))
            if key in self.damaged:
                self.damaged[key] += [("msg", m) for m in stored]

    def storage_changed(self, key: str) -> None:
        """The store rewrote the session's storage outside the model's view: it is no
        longer aged (and must not look so)."""
        aged = self.aged.pop(key, None)
        probe = self.probe()
        if aged is not None and probe is not None:
            assert probe.changed_at(key) != aged[0], f"{key!r} was rewritten but still shows the time it was aged"

    def check_metadata(self, store: SessionBackend, md: SessionMetadata, key: str, operation: str = "") -> None:
        """``md`` (from ``store``, by ``operation``) is the model's metadata of ``key``; with
        the storage capability, ``updated_at`` and ``size_bytes`` are what storage shows."""
        operation = operation or self.program.call("get_session_metadata", (key,), {})
        assert isinstance(md, SessionMetadata), f"{operation}: not a SessionMetadata: {md!r}"
        assert isinstance(md.updated_at, datetime), f"{operation}: {key!r}: updated_at {md.updated_at!r}"
        assert isinstance(md.size_bytes, int) and md.size_bytes >= 0, (
            f"{operation}: {key!r}: size_bytes {md.size_bytes!r}")
        probe = self.probe(store)
        if probe is not None:
            self.agree(md.size_bytes, probe.size(key), f"{operation}.size_bytes")
            self.agree(md.updated_at, from_ns(probe.changed_at(key)), f"{operation}.updated_at")
        want = self.model[key].metadata(key)
        if key in self.damaged:
            want = replace(want, message_count=len(self.damaged[key]))  # complete lines, damaged ones too
        self.agree(replace(md, updated_at=None, size_bytes=0), want, operation)

    def _agrees(self, store: SessionBackend, keys: set[str], thorough: bool) -> None:
        """``store`` agrees with the model on the listings and on sessions ``keys``
        (:class:`SessionStoreMachine`)."""
        raise NotImplementedError

    def forget(self, key: str) -> None:
        """The session was deleted: drop what the machine knew about its storage."""
        self.damaged.pop(key, None)
        self.aged.pop(key, None)


# == transcript writes ======================================================================
# Rules for the transcript writes: append (one, many, caller ids,
# refused ids and values), remove_last / update_last, whole-transcript writes, clear,
# delete, fork, truncate and compact. Each checks the store's answer against the
# reference model and then records what the store chose (ids, times).

Planned = list[tuple[ChatMessage | dict[str, Any], str]]


class WriteRules(MachineBase):
    """Rules for every method that changes a transcript."""

    # -- appending --------------------------------------------------------------------
    @rule(key=KEYS, message=rare_large, method=st.sampled_from(["append", "append_message"]))
    def append(self, key: str, message: ChatMessage | dict[str, Any], method: str) -> None:
        """Also on a damaged transcript: an append only looks at the tail."""
        previous = self.last_id(key)
        with self.window() as w:
            new_id = getattr(self.store, method)(key, message)
        self.check_new_id(key, new_id, previous)
        self.added(key, [self.expect(message, key, new_id, w)], w)

    @rule(key=KEYS, message=messages, gap=st.integers(min_value=1, max_value=2**70))
    def append_with_caller_id(self, key: str, message: ChatMessage | dict[str, Any], gap: int) -> None:
        if not self.intact(key):
            return
        previous = self.last_id(key)
        given = shifted(previous, gap) if previous else ulid.encode((self.now() << 80) + gap)
        m = as_message(message).replace(id=given)
        with self.window() as w:
            self.agree(self.store.append(key, m), given)  # a caller-supplied id is kept
        self.added(key, [self.expect(m, key, given, w)], w)

    @rule(key=KEYS, batch=batches)
    def append_many(self, key: str, batch: list[ChatMessage | dict[str, Any]]) -> None:
        previous = self.last_id(key)
        with self.window() as w:
            got = self.store.append_many(key, batch)
        assert isinstance(got, list) and len(got) == len(batch), (
            f"{self.program.last}: returned {got!r}, not one id per message ({len(batch)})")
        for new_id in got:
            self.check_new_id(key, new_id, previous)
            previous = new_id
        self.added(key, [self.expect(m, key, i, w) for m, i in zip(batch, got)], w)

    @precondition(lambda self: any(s.messages for s in self.model.values()))
    @rule(data=st.data(), message=messages, many=st.booleans())
    def append_bad_id(self, data: st.DataObject, message: ChatMessage | dict[str, Any], many: bool) -> None:
        """A duplicate id -> DuplicateMessageError; a new id sorting before the last one ->
        InvalidMessageError (not a duplicate). Nothing is written."""
        candidates = sorted(k for k, s in self.model.items() if s.messages and self.intact(k))
        if not candidates:
            return
        key = data.draw(st.sampled_from(candidates), label="key")
        msgs = self.model[key].messages
        duplicate = data.draw(st.booleans(), label="duplicate")
        bad = data.draw(st.sampled_from([m.id for m in msgs])) if duplicate else shifted(msgs[0].id, -1)
        batch = [as_message(message).replace(id=bad)]
        if many:
            batch.insert(0, as_message(message))
        error = self.refuses(DuplicateMessageError if duplicate else InvalidMessageError,
                             lambda: self.store.append_many(key, batch) if many else self.store.append(key, batch[0]),
                             "a duplicate id" if duplicate else "an id sorting before the last one")
        assert isinstance(error, DuplicateMessageError) is duplicate, (
            f"{self.program.last}: an id out of order is not a duplicate: {error!r}")

    @rule(key=KEYS, batch=st.lists(messages, min_size=2, max_size=4), data=st.data())
    def append_many_with_duplicate(self, key: str, batch: list[ChatMessage | dict[str, Any]],
                                   data: st.DataObject) -> None:
        if not self.intact(key):
            return
        previous = self.last_id(key)
        dup = shifted(previous, 1) if previous else ulid.encode(self.now() << 80)
        second = data.draw(st.integers(min_value=1, max_value=len(batch) - 1), label="second")
        built = [as_message(m) for m in batch]
        built[0] = built[0].replace(id=dup)
        built[second] = built[second].replace(id=dup)
        self.refuses(DuplicateMessageError, lambda: self.store.append_many(key, built), "one id twice in a batch")

    @rule(key=KEYS, bad=unserializable, message=messages, many=st.booleans())
    def append_unserializable(self, key: str, bad: Any, message: ChatMessage | dict[str, Any], many: bool) -> None:
        """Content JSON cannot hold -> SerializationError (a TypeError); nothing written,
        no session created (also when the bad message comes after a good one)."""
        wrong = as_message(message).replace(content=[bad])
        self.refuses(SerializationError,
                     lambda: self.store.append_many(key, [message, wrong]) if many else self.store.append(key, wrong),
                     "content JSON cannot hold")

    # -- changing the end -------------------------------------------------------------
    @rule(key=KEYS, data=st.data())
    def remove_last(self, key: str, data: st.DataObject) -> None:
        key = self.busy(data, key)
        if not self.intact(key):
            return
        msgs = self.model[key].messages if key in self.model else []
        mode = data.draw(st.sampled_from(["plain", "expected", "stale"]), label="mode")
        if mode == "stale":
            expected_id: str | None = data.draw(st.sampled_from([m.id for m in msgs[:-1]] + list(UNKNOWN_IDS)),
                                                label="stale")
        else:
            expected_id = msgs[-1].id if (mode == "expected" and msgs) else None
        self._remove_last(key, expected_id)

    def _remove_last(self, key: str, expected_id: str | None) -> None:
        last = self.last_id(key)
        done = self.agree(self.store.remove_last(key, expected_id=expected_id),
                          self.ref.remove_last(key, expected_id=expected_id))
        if done and last is not None:
            self.removed.setdefault(key, set()).add(last)
        self.stats["removals"] += done

    @rule(key=KEYS, message=rare_large, data=st.data())
    def update_last(self, key: str, message: ChatMessage | dict[str, Any], data: st.DataObject) -> None:
        key = self.busy(data, key)
        if not self.intact(key):
            return
        msgs = self.model[key].messages if key in self.model else []
        m = as_message(message)
        if not msgs:
            self.agree(self.store.update_last(key, m), False)
            self.agree(self.store.update_last(key, m, expected_id=UNKNOWN_IDS[0]), False)
            return
        mode = data.draw(st.sampled_from(["plain", "expected", "stale", "same_id", "new_id", "between",
                                          "duplicate", "out_of_order"]), label="mode")
        old = msgs[-1]
        previous = msgs[-2].id if len(msgs) > 1 else None
        if mode == "stale":
            self.agree(self.store.update_last(key, m, expected_id=previous or shifted(old.id, 1)), False)
            return
        if mode in ("duplicate", "out_of_order"):
            assume(previous is not None)
            bad = previous if mode == "duplicate" else shifted(msgs[0].id, -1)
            self.refuses(DuplicateMessageError if mode == "duplicate" else InvalidMessageError,
                         lambda: self.store.update_last(key, m.replace(id=bad)),
                         "the id of an earlier message" if mode == "duplicate" else "an id out of order")
            return
        new_id = self._updated_id(mode, old.id, previous, data)
        sent = m.replace(id=new_id) if mode in ("same_id", "new_id", "between") else m
        expected_id = old.id if mode == "expected" else None
        self.agree(self.store.update_last(key, sent, expected_id=expected_id), True)
        created = old.created_at if m.created_at is None else m.created_at
        assert created is not None
        assert self.ref.update_last(key, expected_message(sent, new_id, created), expected_id=expected_id)
        self.stats["updates"] += 1

    @staticmethod
    def _updated_id(mode: str, old: str, previous: str | None, data: st.DataObject) -> str:
        """The id an update in ``mode`` gives the last message."""
        if mode == "new_id":
            return shifted(old, data.draw(st.integers(min_value=1, max_value=2**60), label="gap"))
        if mode != "between":
            return old
        high = ulid.decode(old)
        assert high is not None
        low = ulid.decode(previous) if previous else high - 2**40
        assert low is not None
        # The draw must not depend on the ids' values (they come from the clock, and
        # Hypothesis replays draws): without room between them the id stays the same.
        fraction = data.draw(st.integers(min_value=0, max_value=2**16 - 1), label="between")
        return ulid.encode(low + 1 + (high - low - 2) * fraction // (2**16 - 1)) if high - low > 1 else old

    # -- replacing everything ---------------------------------------------------------
    def _plan(self, kept: list[ChatMessage], new: list[ChatMessage | dict[str, Any]], with_ids: list[bool],
              gaps: list[int]) -> Planned:
        planned: Planned = [(m, m.id) for m in kept]
        cur = ulid.decode(kept[-1].id) if kept else (self.now() - 60_000) << 80
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

    @rule(key=KEYS, keep=st.lists(st.booleans(), max_size=12), new=st.lists(messages, max_size=4),
          with_ids=st.lists(st.booleans(), min_size=4, max_size=4),
          gaps=st.lists(st.integers(min_value=2**24, max_value=2**79), min_size=4, max_size=4))
    def rewrite_messages(self, key: str, keep: list[bool], new: list[ChatMessage | dict[str, Any]],
                         with_ids: list[bool], gaps: list[int]) -> None:
        if not self.intact(key):
            return
        old = self.model[key].messages if key in self.model else []
        planned = self._plan([m for m, k in zip(old, keep) if k], new, with_ids, gaps)
        with self.window() as w:
            returned: Any = self.untyped.rewrite_messages(key, [m for m, _ in planned])
        self.agree(returned, None)
        self.ref.rewrite_messages(key, self.learn_rewrite(key, planned, w), self.creation(key, w))
        self.stats["rewrites"] += 1

    @rule(key=KEYS, batch=st.lists(messages, min_size=2, max_size=4), duplicate=st.booleans(),
          method=st.sampled_from(["rewrite", "replace", "replace_if_exists"]))
    def rewrite_out_of_order(self, key: str, batch: list[ChatMessage | dict[str, Any]], duplicate: bool,
                             method: str) -> None:
        """Ids that do not strictly increase: InvalidMessageError (DuplicateMessageError for
        a repeated one) and nothing written, whichever whole-transcript write it is."""
        if not self.intact(key):
            return
        high = ulid.encode((self.now() << 80) + 1000)
        low = shifted(high, -10)
        built = [as_message(m) for m in batch]
        built[0] = built[0].replace(id=high)
        built[-1] = built[-1].replace(id=high if duplicate else low)
        if method == "replace_if_exists" and key not in self.model:
            self.agree(self.store.replace_conversation_state_if_exists(key, built, True), False)
            return
        calls: dict[str, Callable[[], Any]] = {
            "rewrite": lambda: self.store.rewrite_messages(key, built),
            "replace": lambda: self.store.replace_conversation_state(key, built, True),
            "replace_if_exists": lambda: self.store.replace_conversation_state_if_exists(key, built, True)}
        self.refuses(DuplicateMessageError if duplicate else InvalidMessageError, calls[method],
                     "a repeated id" if duplicate else "ids out of order")

    @rule(key=KEYS, prefix=st.lists(messages, max_size=2), keep=st.integers(min_value=0, max_value=4),
          crumb=st.booleans(), if_exists=st.booleans())
    def replace_conversation_state(self, key: str, prefix: list[ChatMessage | dict[str, Any]], keep: int,
                                   crumb: bool, if_exists: bool) -> None:
        """The trimming pattern: id-less messages (a breadcrumb) before a kept suffix."""
        if not self.intact(key):
            return
        old = self.model[key].messages if key in self.model else []
        kept = old[len(old) - min(keep, len(old)):]
        planned: Planned = [(m, "") for m in prefix] + [(m, m.id) for m in kept]
        with self.window() as w:
            if if_exists:
                done = self.store.replace_conversation_state_if_exists(key, [m for m, _ in planned], crumb)
                self.agree(done, key in self.model)
                if not done:
                    return
            else:
                returned: Any = self.untyped.replace_conversation_state(key, [m for m, _ in planned], crumb)
                self.agree(returned, None)
        self.ref.replace_conversation_state(key, self.learn_rewrite(key, planned, w), crumb, self.creation(key, w))
        self.stats["replaces"] += 1

    @rule(key=KEYS)
    def clear_messages(self, key: str) -> None:
        if self.intact(key):
            self.agree(self.store.clear_messages(key), self.ref.clear_messages(key))

    @rule(key=KEYS)
    def delete_session(self, key: str) -> None:
        self.agree(self.store.delete_session(key), self.ref.delete_session(key))
        self.forget(key)

    # -- fork, revert, compact --------------------------------------------------------
    @rule(source=KEYS, dest=KEYS | new_keys, data=st.data())
    def copy_messages(self, source: str, dest: str, data: st.DataObject) -> None:
        source = self.busy(data, source)
        target = dest  # ("target" is a reserved rule argument)
        if not (self.intact(source) and self.intact(target)):
            return
        self.known.add(target)
        up_to = None if data.draw(st.booleans(), label="all") else self.pick_id(data, source, "up_to")
        with self.window() as w:
            got = self.same_outcome(lambda: self.store.copy_messages(source, target, up_to_message_id=up_to),
                                    lambda: self.ref.copy_messages(source, target, 0, up_to_message_id=up_to))
        if got is not REFUSED:
            self.model[target].created_at = self.created_of(target, w)
            self.stats["forks"] += 1

    @rule(key=KEYS, data=st.data())
    def truncate_messages(self, key: str, data: st.DataObject) -> None:
        key = self.busy(data, key)
        if not self.intact(key):
            return
        up_to = self.pick_id(data, key, "up_to")
        got = self.same_outcome(lambda: self.store.truncate_messages(key, up_to),
                                lambda: self.ref.truncate_messages(key, up_to))
        self.stats["truncations"] += got is not REFUSED

    @rule(key=KEYS, repair=st.booleans())
    def compact(self, key: str, repair: bool) -> None:
        """Drops the damage (duplicates always, corrupt lines only with ``repair``, into a
        quarantine file); refuses a corrupt transcript without ``repair``; a clean one: 0."""
        lines = self.damaged.get(key, [])
        bad = sum(kind == "bad" for kind, _ in lines)
        dropped = bad + sum(kind == "dup" for kind, _ in lines)
        if bad and not repair:
            self.refuses(CorruptTranscriptError, lambda: self.store.compact(key), "a corrupt line, no repair")
            return
        got = self.same_outcome(lambda: self.store.compact(key, repair=repair), lambda: self.ref.compact(key) + dropped)
        if got is not REFUSED and key in self.damaged:
            del self.damaged[key]
            self.quarantined += bad > 0
            self.stats["compactions that dropped lines"] += dropped > 0
            self.stats["repairs (quarantine files)"] += bad > 0
            self.storage_changed(key)


# == metadata and history reads =============================================================
# Rules for metadata (every setter, owner-checked delete,
# attribution, run-state listings, cleanup, search) and for the history reads (get_message,
# get_messages windows, page with every option, whole page walks), each checked against
# the reference model.
#: Setter calls with a value every store refuses (before looking for the session): the
#: call and the error.
INVALID_SETTERS: tuple[tuple[str, tuple[Any, ...], type[Exception]], ...] = (
    ("set_session_name", (5,), TypeError),
    ("set_session_name", ("lone \ud800",), ValueError),
    ("set_session_agent_alias", (None,), TypeError),
    ("set_session_context", (["not", "a", "mapping"],), TypeError),
    ("set_session_context", ({"k": 1},), TypeError),
    ("set_session_principal", ("",), ValueError),
    ("set_session_state", ("done",), ValueError),
    ("set_session_state", ("Running",), ValueError),
    ("set_session_state", ("",), ValueError),
    ("set_session_state", (None,), ValueError),
)
_contexts = st.dictionaries(st.sampled_from(["cwd", "model", "\u00e9"]), st.text(max_size=5), max_size=2)


class ReadRules(MachineBase):
    """Rules for metadata and the history reads."""

    # -- metadata ---------------------------------------------------------------------
    @rule(key=KEYS, data=st.data())
    def set_metadata(self, key: str, data: st.DataObject) -> None:
        """One setter, on an existing or a missing session (SessionNotFoundError, nothing
        created), sometimes with a value it must refuse (TypeError / ValueError, also on a
        missing session)."""
        if data.draw(st.integers(0, 6), label="invalid?") == 0:
            method, args, error = data.draw(st.sampled_from(INVALID_SETTERS), label="invalid call")
            self.refuses(error, lambda: getattr(self.store, method)(key, *args), "an invalid value")
            return
        which = data.draw(st.sampled_from(["name", "alias", "context", "owner", "breadcrumb", "state"]),
                          label="setter")
        if which == "state":
            self._set_state(key, data.draw(st.sampled_from(["idle", "running", "error"]), label="state"),
                            data.draw(st.none() | st.sampled_from(["t1", "t2"]), label="turn"))
            return
        value: Any = data.draw({
            "name": st.sampled_from(NAMES) | st.text(max_size=8), "alias": st.sampled_from(ALIASES),
            "context": _contexts, "owner": st.sampled_from(OWNERS), "breadcrumb": st.booleans(),
        }[which], label=which)
        method = {"name": "set_session_name", "alias": "set_session_agent_alias", "context": "set_session_context",
                  "owner": "set_session_principal", "breadcrumb": "set_session_trim_breadcrumb"}[which]
        self.same_outcome(lambda: getattr(self.store, method)(key, value), lambda: self.ref.set_fields(key, **{
            which: value}))

    def _set_state(self, key: str, state: str, turn: str | None) -> None:
        """``since`` is the store's clock when the (state, turn) pair changes: read back."""
        session = self.model.get(key)
        with self.window() as w:
            got = self.same_outcome(lambda: self.store.set_session_state(key, state, turn),
                                    lambda: self.ref.session(key) and None)
        if got is REFUSED or session is None:
            return
        if (session.state, session.turn) != (state, None if state == "idle" else turn) or session.since is None:
            read = self.store.get_session_state(key)
            assert read is not None
            since = w.check(to_ms(read.since), f"since of {key!r}")
        else:
            since = 0  # unchanged: the model keeps its own
        self.ref.set_session_state(key, state, turn, since)

    @rule(key=KEYS, owner=st.sampled_from([*OWNERS, ""]))
    def delete_session_owned(self, key: str, owner: str) -> None:
        done = self.agree(self.store.delete_session_owned(key, owner), self.ref.delete_session_owned(key, owner))
        if done:
            self.forget(key)
            self.stats["owner-checked deletions"] += 1

    @rule(op=st.sampled_from(["count", "rename", "clear"]), old=st.sampled_from(ALIASES),
          new=st.sampled_from(ALIASES))
    def attribution(self, op: str, old: str, new: str) -> None:
        if op == "count":
            self.agree(self.store.count_agent_attribution(old), self.ref.count_agent_attribution(old))
        elif op == "rename":
            self.agree(self.store.rename_agent_attribution(old, new), self.ref.rename_agent_attribution(old, new))
        else:
            self.agree(self.store.clear_agent_attribution(old), self.ref.rename_agent_attribution(old, None))

    @rule(ttl=st.sampled_from([10**6] * 6 + [0, 2]))
    def cleanup_stale(self, ttl: int) -> None:
        """A huge TTL deletes nothing; 2 hours deletes the sessions aged past it; zero
        deletes every session. Never a ``running`` one."""
        doomed = [k for k, s in self.model.items() if s.state != "running" and (ttl == 0 or (
            ttl == 2 and k in self.aged))]
        self.agree(self.store.cleanup_stale(ttl), len(doomed))
        for k in doomed:
            self.ref.delete_session(k)
            self.forget(k)
        self.stats["sessions deleted by cleanup_stale"] += len(doomed)
        self.stats["aged sessions deleted by cleanup_stale"] += len(doomed) if ttl == 2 else 0

    @rule(threshold=st.sampled_from([0, 1, 30, 3600]))
    def list_running_and_stuck(self, threshold: int) -> None:
        self.agree([m.key for m in self.store.list_running_sessions()], self.ref.list_running_sessions(),
                   "[m.key for m in store.list_running_sessions()]")
        with self.window() as w:
            stuck = [m.key for m in self.store.list_stuck_sessions(threshold)]
        sure = self.ref.list_stuck_sessions(threshold, w.lo - w.slack)
        maybe = self.ref.list_stuck_sessions(threshold, w.hi + w.slack)
        assert set(sure) <= set(stuck) <= set(maybe) and stuck == sorted(stuck), (
            f"{self.program.last}: returned {stuck}; the model: at least {sure}, at most {maybe}, sorted")

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
        expected = set(self.ref.search(keyword, agent_alias=alias))
        got = self.store.search(SessionQuery(keyword, limit=limit, agent_alias=alias))
        operation = self.program.last
        keys = [m.key for m in got]
        assert len(keys) == len(set(keys)), f"{operation}: a session found twice: {keys}"
        if limit is None or limit >= len(expected):
            self.agree(sorted(keys), sorted(expected), f"sorted(m.key for m in {operation})")
        else:
            assert set(keys) <= expected and len(keys) == limit, (
                f"{operation}: found {keys}; the model: {limit} of {sorted(expected)}")
        stamps = [m.updated_at or EPOCH for m in got]
        assert all(a >= b for a, b in itertools.pairwise(stamps)), f"{operation}: not newest activity first: {stamps}"
        for md in got:
            self.check_metadata(self.real, md, md.key, operation)
        self.stats["searches"] += 1
        self.stats["search results checked"] += len(keys)

    # -- reads ------------------------------------------------------------------------
    @rule(key=KEYS, data=st.data())
    def get_message(self, key: str, data: st.DataObject) -> None:
        key = self.busy(data, key)
        if self.intact(key):
            mid = self.pick_id(data, key, "id")
            self.agree(self.store.get_message(key, mid), self.ref.get_message(key, mid))

    @rule(key=KEYS, offset=st.integers(0, 30), limit=st.none() | st.integers(0, 30))
    def get_messages(self, key: str, offset: int, limit: int | None) -> None:
        if self.intact(key):
            self.same_outcome(lambda: self.store.get_messages(key, offset=offset, limit=limit),
                              lambda: self.ref.get_messages(key, offset=offset, limit=limit))
            self.same_outcome(lambda: self.store.get_message_count(key), lambda: self.ref.get_message_count(key))

    @rule(key=KEYS, data=st.data(), limit=st.integers(1, 12), breakpoint=st.booleans(), whole_turns=st.booleans(),
          ts_first=st.booleans())
    def page(self, key: str, data: st.DataObject, limit: int, breakpoint: bool, whole_turns: bool,
             ts_first: bool) -> None:
        """A page with each cursor in turn (the newest, before an id, after an id, from the
        start), with the same options; ``ts_before`` on every other one."""
        key = self.busy(data, key)
        if not self.intact(key):
            return
        session = self.model.get(key)
        n = len(session.messages) if session else 0
        if n and data.draw(st.booleans(), label="at the page edge?"):  # bugs live where a page ends
            limit = max(1, n + data.draw(st.sampled_from([-1, 0, 1]), label="edge"))
        stamps = sorted({m.created_at for m in session.messages if m.created_at is not None}) if session else []
        if stamps:  # just past the newest too: with a wall clock every message may share one millisecond
            stamps.append(stamps[-1] + 1)
        for i, direction in enumerate(("newest", "before", "after", "after-start")):
            options: dict[str, Any] = {"limit": limit, "breakpoint": breakpoint, "whole_turns": whole_turns}
            if i % 2 == ts_first:
                options["ts_before"] = pick(data, stamps, "ts_before") if stamps else data.draw(st.integers(0, 2**47))
            if direction == "before":
                options["before"] = self.pick_id(data, key, "cursor", skip_first=True)
            elif direction == "after":
                options["after"] = self.pick_id(data, key, "cursor", skip_last=True)
            elif direction == "after-start":
                options["after"] = ""
            got = self.same_outcome(lambda o=options: self.store.page(key, **o),  # type: ignore[misc]
                                    lambda o=options: self.ref.page(key, **o))  # type: ignore[misc]
            if got is not REFUSED:
                self.stats["pages checked"] += 1
                if got.messages:
                    self.stats[f"pages {direction}"] += 1
                    self.stats["pages ts_before"] += "ts_before" in options
                    self.stats["pages breakpoint"] += breakpoint

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), limit=st.integers(1, 5), filtered=st.booleans())
    def walk_both_ways(self, data: st.DataObject, limit: int, filtered: bool) -> None:
        """Pages walked to the beginning (and from it to the end) concatenate to the
        history (or the part created before ts_before): no gap, no duplicate."""
        key = data.draw(st.sampled_from(sorted(self.model)), label="key")
        if not self.intact(key):
            return
        msgs = self.model[key].messages
        stamps = sorted({m.created_at for m in msgs if m.created_at is not None})
        ts_before = pick(data, stamps, "ts_before") if filtered and stamps else None
        want = [m for m in msgs if ts_before is None or (m.created_at is not None and m.created_at < ts_before)]
        for direction in ("older", "newer"):
            cursor = "before" if direction == "older" else "after"
            self.agree(self._walk(key, direction, limit, ts_before, len(msgs) + 2), want,
                       f"the pages of {key!r} walked {direction} (store.page(limit={limit}, {cursor}=<previous page>."
                       f"{cursor}, ts_before={ts_before}))")
        self.stats["page walks"] += 1

    def _walk(self, key: str, direction: str, limit: int, ts_before: int | None, most: int) -> list[ChatMessage]:
        got: list[ChatMessage] = []
        cursor: str | None = None if direction == "older" else ""
        step: Callable[[str | None], Any] = (
            (lambda c: self.store.page(key, limit=limit, before=c, ts_before=ts_before)) if direction == "older"
            else (lambda c: self.store.page(key, limit=limit, after=c, ts_before=ts_before)))
        for _ in range(most):
            p = step(cursor)
            if direction == "older":
                got[:0] = p.messages
                cursor = p.before
            else:
                got.extend(p.messages)
                cursor = p.after
            assert len(p.messages) <= limit, f"{self.program.last}: {len(p.messages)} messages, over the limit"
            if not p.has_more:
                assert cursor is None, f"{self.program.last}: has_more is False but the cursor is {cursor!r}"
                break
        return got


# == storage: damage, aging, what storage holds =============================================
# Rules for a backend that offers the storage capability
# (``make_state_machine(storage=...)``): another tool damages a transcript (a retried line
# written twice, a line that does not parse, a torn tail) or the session's storage is aged
# past a TTL; and the invariant that storage holds only the store's files and shows the
# times and sizes the metadata reports. Without the capability these rules never run.

TORN_TAIL = b'{"id":"01ZZZZZZZZZZZZZZZZZZZZZZZZ","role":"user","content":"alpha'
JUNK_LINES = (b"garbage alpha", b"", b'{"role": 5}', b'{"content":"beta"')


def _has_storage(self: MachineBase) -> bool:
    return type(self).storage is not None and bool(self.model)


class StorageRules(MachineBase):
    """Damage and aging through the storage capability."""

    def _target(self, data: st.DataObject) -> tuple[str, StorageProbe, Lines] | None:
        """A session whose stored transcript ends with a complete line (a torn tail first
        needs the next write to go), its probe and its lines; None if the draw has a torn tail."""
        key = data.draw(st.sampled_from(sorted(self.model)), label="key")
        probe = self.probe()
        assert probe is not None
        raw = probe.raw(key)
        if raw and not raw.endswith(b"\n"):
            return None
        lines = self.damaged.get(key) or [("msg", m) for m in self.model[key].messages]
        return key, probe, lines

    def damage(self, probe: StorageProbe, key: str, data: bytes, what: str) -> None:
        """Append ``data`` to the stored transcript of ``key`` as another tool would (and
        write it into the program: the next check runs after it)."""
        probe.append_raw(key, data)
        self.touched.add(key)
        self.program.last = f"storage.append_raw({key!r}, {data!r})"
        self.program.add(f"{self.program.last}  # {what} (your storage capability)")

    @precondition(_has_storage)
    @rule(data=st.data())
    def duplicate_last_line(self, data: st.DataObject) -> None:
        """A tool retried an append: the newest line is written twice."""
        target = self._target(data)
        if target is None or not target[2] or target[2][-1][0] != "msg":
            return
        key, probe, lines = target
        raw = probe.raw(key)
        self.damage(probe, key, raw[raw.rfind(b"\n", 0, len(raw) - 1) + 1 :], "the newest line written twice")
        self.damaged[key] = [*lines, ("dup", lines[-1][1])]
        self.stats["damaged lines"] += 1

    @precondition(_has_storage)
    @rule(data=st.data(), junk=st.sampled_from(JUNK_LINES))
    def corrupt_line(self, data: st.DataObject, junk: bytes) -> None:
        target = self._target(data)
        if target is not None:
            key, probe, lines = target
            self.damage(probe, key, junk + b"\n", "a line that does not parse")
            self.damaged[key] = [*lines, ("bad", None)]
            self.stats["damaged lines"] += 1

    @precondition(_has_storage)
    @rule(data=st.data())
    def torn_tail(self, data: st.DataObject) -> None:
        """A writer died mid-line: reads ignore the fragment, the next write removes it."""
        target = self._target(data)
        if target is not None:
            self.damage(target[1], target[0], TORN_TAIL, "a torn tail: a writer died mid-line")
            self.stats["torn tails"] += 1

    @precondition(_has_storage)
    @rule(data=st.data())
    def age(self, data: st.DataObject) -> None:
        """The session's storage looks untouched for 3 hours (stale for a 2-hour TTL)."""
        key = data.draw(st.sampled_from(sorted(self.model)), label="key")
        probe = self.probe()
        assert probe is not None
        then = time.time_ns() - AGED_NS
        probe.age(key, then)
        self.aged[key] = (then, self.model[key].activity)
        self.stats["sessions aged"] += 1

    @precondition(lambda self: type(self).storage is not None)
    @invariant()
    def storage_agrees(self) -> None:
        """Only the store's files, as many quarantine files as repairs made; a session
        the model saw change is no longer aged (a no-op may also refresh it)."""
        probe = self.probe()
        assert probe is not None
        assert probe.check_layout() == self.quarantined, "quarantine files"
        for key, (then, activity) in list(self.aged.items()):
            session = self.model.get(key)
            shown = probe.changed_at(key) if session is not None else None
            if session is not None and session.activity != activity:
                assert shown != then, f"{key!r} changed, but its storage still shows the time it was aged"
            if shown != then:
                del self.aged[key]


# == the machine ============================================================================
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
    @rule(target=KEYS, key=new_keys, recipe=st.sampled_from(EDGE_STATES), message=messages, data=st.data())
    def edge_state(self, key: str, recipe: str, message: ChatMessage | dict[str, Any], data: st.DataObject) -> str:
        """A new session brought to a state where bugs live (see :data:`EDGE_STATES`)."""
        self.known.add(key)
        if key in self.model or not self.intact(key):
            return key
        if recipe == "fork then append":
            source = self.busy(data, key)
            if source == key or source not in self.model:
                return key
            self.copy_messages(source, key, data)
            if key in self.model:
                self.append(source, message, "append")
        else:
            self.append_many(key, [message, message] if recipe in ("two messages", "remove then append") else [message])
        if recipe in ("empty session", "remove then append"):
            self._remove_last(key, None)
            self._agrees_on(self.real, key, thorough=False)  # checked here: the failure names remove_last
        if recipe in ("remove then append", "fork then append") and key in self.model:
            self.append(key, message, "append")
        self.stats[f"edge states: {recipe}"] += 1
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
        """Go on with a new instance: everything must come from storage (what a program
        restarted after a crash sees)."""
        self._close(self.real)
        self.real = self._open()
        self.store = RecordingStore(self.real, self.program, self.touched)
        self.program.add("store = make_store(tmp_path / 'store')  # a new instance on the same storage")
        self.touched.add(None)
        self.stats["recoveries"] += 1

    # -- invariants -------------------------------------------------------------------
    def _agrees(self, store: SessionBackend, keys: set[str], thorough: bool) -> None:
        """``store`` agrees with the model on the listings and on sessions ``keys``."""
        ask = self.ask
        ask(store, self.ref.list_sessions(), "list_sessions")
        if not keys:
            return
        listed = store.list_sessions_with_metadata()
        self.agree([m.key for m in listed], self.ref.list_sessions(), "[m.key for m in store.list_sessions_with_metadata()]")
        for md in listed:
            if md.key in keys:
                self.check_metadata(store, md, md.key, "store.list_sessions_with_metadata()")
        for key in sorted(keys):
            self._agrees_on(store, key, thorough)
        if thorough:
            self.agree([m.key for m in store.list_running_sessions()], self.ref.list_running_sessions(),
                       "[m.key for m in store.list_running_sessions()]")
            for alias in ALIASES:
                ask(store, self.ref.count_agent_attribution(alias), "count_agent_attribution", alias)
            if self.manual_clock:
                self.agree([m.key for m in store.list_stuck_sessions(1)], self.ref.list_stuck_sessions(1, self.clock.now),
                           "[m.key for m in store.list_stuck_sessions(1)]")

    def _agrees_on(self, store: SessionBackend, key: str, thorough: bool) -> None:
        ask = self.ask
        session = self.model.get(key)
        ask(store, session is not None, "session_exists", key)
        if session is None:
            ask(store, [], "load", key)
            ask(store, [], "try_load", key)
            ask(store, None, "get_session_metadata", key)
            ask(store, None, "get_session_trim_breadcrumb", key)
            ask(store, None, "get_session_name", key)
            ask(store, None, "get_session_state", key)
            return
        msgs = session.messages
        lines = self.damaged.get(key)
        if lines is None:  # the messages first: a wrong history explains a wrong count or size
            ask(store, msgs, "try_load", key)
            ask(store, len(msgs), "get_message_count", key)
        md = store.get_session_metadata(key)
        if md is None:
            raise Mismatch(self.program.call("get_session_metadata", (key,), {}), None, session.metadata(key))
        self.check_metadata(store, md, key, self.program.call("get_session_metadata", (key,), {}))
        ask(store, session.breadcrumb, "get_session_trim_breadcrumb", key)
        ask(store, session.name, "get_session_name", key)
        ask(store, session.alias, "get_session_agent_alias", key)
        ask(store, session.run_state(), "get_session_state", key)
        ids = [m.id for m in msgs]
        assert ids == sorted(set(ids)), f"{key!r}: the model's ids do not strictly increase (a harness bug): {ids}"
        if lines is not None:
            ask(store, [m for _, m in lines if m is not None], "load", key)
            ask(store, len(lines), "get_message_count", key)  # every complete line counts, damaged ones too
            if any(kind == "bad" for kind, _ in lines):
                with pytest.raises(CorruptTranscriptError):
                    store.try_load(key)
            return
        if thorough:
            ask(store, msgs, "load", key)
            stamped = store.load_with_timestamps(key)
            self.agree([t.message for t in stamped], msgs, f"[t.message for t in store.load_with_timestamps({key!r})]")
            self.agree([t.created_at for t in stamped], [
                None if m.created_at is None else datetime.fromtimestamp(m.created_at / 1000, tz=timezone.utc)
                for m in msgs], f"[t.created_at for t in store.load_with_timestamps({key!r})]")
            ask(store, reference_page(msgs, limit=3), "page", key, limit=3)

    @invariant()
    def store_agrees_with_model(self) -> None:
        """The sessions the step touched (all, after a call across sessions), thoroughly."""
        self.stats["steps"] += 1
        keys = touched_keys(self.touched, self.known)
        self.touched.clear()
        self._agrees(self.real, keys, thorough=True)

    @precondition(lambda self: self.persistent)
    @invariant()
    def fresh_store_agrees_with_model(self) -> None:
        """A new instance on the same storage agrees on everything it keeps."""
        fresh = self._open()
        try:
            self._agrees(fresh, set(self.known), thorough=False)
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
    (:class:`StorageProbe`), or None.
    The class's ``stats`` counter sums what its runs exercised (examples, steps, ...)."""
    attrs = {"factory": staticmethod(factory), "manual_clock": manual_clock or frozen_clock,
             "frozen_clock": frozen_clock, "storage": None if storage is None else staticmethod(storage),
             "stats": Counter()}
    return type(name or f"SessionStoreMachine_{getattr(factory, '__name__', 'store')}", (SessionStoreMachine,),
                attrs)


__all__ = ["CLOCK_SLACK_MS", "INVALID_SETTERS", "MachineBase", "ManualClock", "ReadRules", "SessionStoreMachine",
           "StorageProbe", "StorageRules", "Window", "WriteRules", "expected_message", "make_state_machine",
           "reference_page"]
