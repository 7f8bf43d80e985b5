"""The state machine's foundation: its state (store under test, reference model, what
storage damage and aging it applied), its clock, and the helpers its rule sets share.

The machine itself, its documentation and :func:`make_state_machine` are in
:mod:`jsonl_sessions.testing.machine`; its rules are in ``machine_writes``,
``machine_reads`` and ``machine_storage``.
"""

from __future__ import annotations

import itertools
import pathlib
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

import orjson
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine

from .. import ids as ulid
from ..errors import SessionStoreError
from ..protocol import SessionBackend
from ..types import ChatMessage, SessionMetadata, as_message
from . import strategies
from .reference import EPOCH, ReferenceStore

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
        self.store = self._open()
        self.persistent = bool(getattr(type(self).factory, "persistent", True)
                               and getattr(self.store, "persistent", True))
        self.ref = ReferenceStore(wall=itertools.count(1).__next__)  # activity: a change counter
        self.model = self.ref.sessions
        self.known: set[str] = set()
        self.damaged: dict[str, Lines] = {}
        self.aged: dict[str, tuple[int, int]] = {}  # key -> (storage time set, model activity then)
        self.quarantined = 0
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
        self._close(self.store)
        shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def untyped(self) -> Any:
        """The store under test, to check at run time what its type promises (e.g. None)."""
        return self.store

    def probe(self, store: SessionBackend | None = None) -> StorageProbe | None:
        storage = type(self).storage
        return None if storage is None else storage(self.store if store is None else store)

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
        md = self.store.get_session_metadata(key)
        assert md is not None and md.created_at is not None, f"new session {key!r} has no created_at: {md!r}"
        return w.check(to_ms(md.created_at), f"created_at of session {key!r}")

    def expect(self, message: ChatMessage | dict[str, Any], key: str, message_id: str, w: Window) -> ChatMessage:
        """The stored form of a message just written with id ``message_id``."""
        given = as_message(message).created_at
        if given is None:
            got = self.store.get_message(key, message_id)
            assert got is not None, f"get_message({key!r}, {message_id!r}) found nothing right after it was written"
            given = w.check(got.created_at, f"created_at of {message_id!r} (given none)")
        return expected_message(message, message_id, given)

    def check_new_id(self, key: str, message_id: str, previous: str | None) -> None:
        assert isinstance(message_id, str) and len(message_id) == 26 and ulid.decode(message_id) is not None, (
            f"{key!r}: a store-assigned id must be a ULID, got {message_id!r}")
        assert previous is None or message_id > previous, (
            f"{key!r}: id {message_id!r} does not sort after the previous id {previous!r}")

    def learn_rewrite(self, key: str, planned: list[tuple[ChatMessage | dict[str, Any], str]], w: Window) -> list[
            ChatMessage]:
        """After a whole-transcript write: the ids the store gave id-less messages (the
        caller's ids kept, all strictly increasing), then the messages as stored."""
        loaded = self.store.try_load(key)
        assert len(loaded) == len(planned), f"{key!r}: wrote {len(planned)} messages, loaded {len(loaded)}"
        out = []
        prev: str | None = None
        for m, (message, given) in zip(loaded, planned):
            if given:
                assert m.id == given, f"{key!r}: the caller's id {given!r} was not kept (got {m.id!r})"
                assert prev is None or m.id > prev
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
            with pytest.raises(type(exc)):
                call()
            self.stats["errors checked"] += 1
            return REFUSED
        got = call()
        assert got == want, f"store returned {got!r}, the model says {want!r}"
        return got

    # -- the model ----------------------------------------------------------------------
    def intact(self, key: str) -> bool:
        """Whether the session's stored transcript is as the API wrote it (no damage)."""
        return key not in self.damaged

    def last_id(self, key: str) -> str | None:
        session = self.model.get(key)
        return None if session is None else session.last_id

    def pick_id(self, data: st.DataObject, key: str, label: str) -> str:
        """An id of the session (usually) or an unknown one."""
        known = [m.id for m in self.model[key].messages] if key in self.model else []
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

    def check_metadata(self, store: SessionBackend, md: SessionMetadata, key: str) -> None:
        """``md`` (from ``store``) is the model's metadata of ``key``; with the storage
        capability, ``updated_at`` and ``size_bytes`` are what storage shows."""
        assert isinstance(md, SessionMetadata), md
        assert isinstance(md.updated_at, datetime), f"{key!r}: updated_at {md.updated_at!r}"
        assert isinstance(md.size_bytes, int) and md.size_bytes >= 0, f"{key!r}: size_bytes {md.size_bytes!r}"
        probe = self.probe(store)
        if probe is not None:
            assert md.size_bytes == probe.size(key), f"{key!r}: size_bytes {md.size_bytes}, stored {probe.size(key)}"
            assert md.updated_at == from_ns(probe.changed_at(key)), f"{key!r}: updated_at {md.updated_at}"
        want = self.model[key].metadata(key)
        if key in self.damaged:
            want = replace(want, message_count=len(self.damaged[key]))  # complete lines, damaged ones too
        got = replace(md, updated_at=None, size_bytes=0)
        assert got == want, f"{key!r}: metadata\n{got}\n!= model\n{want}"

    def forget(self, key: str) -> None:
        """The session was deleted: drop what the machine knew about its storage."""
        self.damaged.pop(key, None)
        self.aged.pop(key, None)


__all__ = ["CLOCK_SLACK_MS", "MachineBase", "ManualClock", "StorageProbe", "Window", "expected_message"]
