"""A Hypothesis state machine over the core of SessionStore, checked against a plain model.

The model is a dict ``key -> list[Rec]`` (a session exists iff its key is in the dict)
plus a dict of trim-breadcrumb flags. After every step both the store under test and a
*fresh* ``SessionStore`` on the same root must agree with the model: existence, ids,
order, contents, created_at, breadcrumb flags and ``list_sessions``.

The store runs on a clock the machine controls, so ``created_at`` is predictable and
the clock can be frozen or stepped backwards (ids must still strictly increase).

Budget: by default both durability modes plus the frozen-clock variant take ~30-40 s on
a 2-core machine; ``JSONL_SESSIONS_SOAK=1`` runs many more examples and longer programs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from jsonl_sessions import (
    ChatMessage,
    DuplicateMessageError,
    InvalidMessageError,
    SessionNotFoundError,
    SessionStore,
)
from jsonl_sessions import ids as ulid

SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"
EXAMPLES = 175  # per durability mode
FROZEN_EXAMPLES = 50
STEPS = 50
START_MS = 1_700_000_000_000

# -- strategies ------------------------------------------------------------------------

HOSTILE_KEYS = [
    "../x",
    "CON",
    "a/b",
    "\U0001f99c parrot",
    "\u200fRTL\u200f",
    "k" * 300,
    "A",
    "a",
    "x" * 130 + "1",  # these two differ only after char 120 (hashed stems)
    "x" * 130 + "2",
    "-rf",
    ".hidden",
]

key_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=12
)
keys_strategy = st.sampled_from(HOSTILE_KEYS) | key_text

odd_strings = st.sampled_from([
    "",
    "line one\nline two\r\n",
    'quote " and backslash \\ and tab \t',
    '{"id":"01FAKE","role":"user"}\n',
    "\u202eright-to-left\u200f",
    "\U0001f600\U0001f99c",
    "nul\x00inside",
    "\ufeffbom-first",
    "null",
])
json_text = st.text(max_size=16) | odd_strings
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | json_text
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(json_text, children, max_size=3),
    max_leaves=8,
)
tool_calls = st.lists(
    st.fixed_dictionaries({
        "id": st.text(max_size=6),
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": st.text(max_size=6), "arguments": json_text}),
    }),
    max_size=2,
)
extras = st.fixed_dictionaries(
    {},
    optional={"tool_calls": tool_calls, "tool_call_id": st.text(max_size=8), "name": json_text, "meta": json_values},
)


@dataclass(frozen=True)
class Spec:
    """What a caller hands in (without id): the parts the model can predict."""

    role: str
    content: Any
    kind: str
    extra: dict[str, Any]
    created_at: int | None
    as_dict: bool  # pass a plain dict instead of a ChatMessage
    omit_content: bool  # dict form only: leave "content" out (means None)

    def build(self, message_id: str = "", created_at: int | None = None) -> ChatMessage | dict[str, Any]:
        created = self.created_at if created_at is None else created_at
        if not self.as_dict:
            return ChatMessage(self.role, self.content, id=message_id, created_at=created, kind=self.kind,
                               extra=self.extra)
        d: dict[str, Any] = {"role": self.role, **self.extra}
        if not (self.omit_content and self.content is None):
            d["content"] = self.content
        if self.kind != "message":
            d["kind"] = self.kind
        if message_id:
            d["id"] = message_id
        if created is not None:
            d["created_at"] = created
        return d


specs = st.builds(
    Spec,
    role=st.sampled_from(["user", "assistant", "system", "tool"]) | st.text(max_size=6),
    content=json_values,
    kind=st.sampled_from(["message", "compaction", "note"]),
    extra=extras,
    created_at=st.none() | st.integers(min_value=0, max_value=2**47),
    as_dict=st.booleans(),
    omit_content=st.booleans(),
)


@dataclass(frozen=True)
class Rec:
    id: str
    role: str
    content: Any
    kind: str
    extra: dict[str, Any] = field(hash=False)
    created_at: int


def rec_of(spec: Spec, message_id: str, created_at: int) -> Rec:
    return Rec(message_id, spec.role, spec.content, spec.kind, dict(spec.extra), created_at)


def rec_to_message(r: Rec) -> ChatMessage:
    return ChatMessage(r.role, r.content, id=r.id, created_at=r.created_at, kind=r.kind, extra=r.extra)


def assert_same(actual: list[ChatMessage], expected: list[Rec], where: str) -> None:
    got = [(m.id, m.role, m.content, m.kind, m.extra, m.created_at) for m in actual]
    want = [(r.id, r.role, r.content, r.kind, r.extra, r.created_at) for r in expected]
    assert got == want, where


def shifted(message_id: str, delta: int) -> str:
    value = ulid.decode(message_id)
    assert value is not None
    return ulid.encode(value + delta)


# -- the machine -----------------------------------------------------------------------


class StoreMachine(RuleBasedStateMachine):
    durability = "fsync"
    clock_steps = True  # False: frozen clock

    keys = Bundle("keys")

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="jsonl-sm-")
        self.root = os.path.join(self.tmp, "store")
        self.now = START_MS
        self.store = self._open()
        self.sessions: dict[str, list[Rec]] = {}  # key -> messages; key present <=> session exists
        self.crumbs: dict[str, bool | None] = {}
        self.known: set[str] = set()

    def _open(self) -> SessionStore:
        return SessionStore(self.root, durability=self.durability, clock=lambda: self.now)  # type: ignore[arg-type]

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- helpers ------------------------------------------------------------------------
    def _last_id(self, key: str) -> str | None:
        msgs = self.sessions.get(key)
        return msgs[-1].id if msgs else None

    def _created(self, spec: Spec) -> int:
        return self.now if spec.created_at is None else spec.created_at

    def _ensure(self, key: str) -> list[Rec]:
        if key not in self.sessions:
            self.sessions[key] = []
            self.crumbs[key] = None
        return self.sessions[key]

    def _learn_ids(self, key: str, planned: list[tuple[Spec | Rec, str]]) -> list[Rec]:
        """After a whole-transcript write (which returns no ids): read the ids the store gave
        the id-less messages, check everything else against the plan."""
        loaded = self.store.try_load(key)
        assert len(loaded) == len(planned)
        out = []
        prev: str | None = None
        for m, (item, given_id) in zip(loaded, planned):
            if given_id:
                assert m.id == given_id, "a caller-supplied id must be kept"
            assert len(m.id) == 26 and ulid.decode(m.id) is not None
            assert prev is None or m.id > prev, "ids must strictly increase"
            prev = m.id
            if isinstance(item, Rec):
                out.append(item)
            else:
                out.append(rec_of(item, m.id, self._created(item)))
        return out

    # -- keys -----------------------------------------------------------------------------
    @initialize(target=keys)
    def first_key(self) -> str:
        self.known.add("A")
        return "A"

    @rule(target=keys, key=keys_strategy)
    def add_key(self, key: str) -> str:
        self.known.add(key)
        return key

    # -- clock and reopening --------------------------------------------------------------
    @precondition(lambda self: self.clock_steps)
    @rule(delta=st.integers(min_value=-5000, max_value=5000))
    def step_clock(self, delta: int) -> None:
        self.now += delta  # backwards steps included

    @rule()
    def reopen(self) -> None:
        """Continue with a new instance: the last id etc. must come from disk."""
        self.store = self._open()

    # -- appending --------------------------------------------------------------------------
    @rule(key=keys, spec=specs)
    def append(self, key: str, spec: Spec) -> None:
        last = self._last_id(key)
        new_id = self.store.append(key, spec.build())
        assert last is None or new_id > last
        self._ensure(key).append(rec_of(spec, new_id, self._created(spec)))

    @rule(key=keys, spec=specs, gap=st.integers(min_value=1, max_value=2**70))
    def append_with_caller_id(self, key: str, spec: Spec, gap: int) -> None:
        last = self._last_id(key)
        given = shifted(last, gap) if last else ulid.encode((self.now << 80) + gap)
        assert self.store.append(key, spec.build(given)) == given
        self._ensure(key).append(rec_of(spec, given, self._created(spec)))

    @precondition(lambda self: any(self.sessions.values()))
    @rule(data=st.data(), spec=specs)
    def append_bad_id(self, data: st.DataObject, spec: Spec) -> None:
        key = data.draw(st.sampled_from(sorted(k for k, v in self.sessions.items() if v)))
        msgs = self.sessions[key]
        if data.draw(st.booleans(), label="duplicate"):
            bad = data.draw(st.sampled_from([r.id for r in msgs]))
            with pytest.raises(DuplicateMessageError):
                self.store.append(key, spec.build(bad))
        else:
            bad = shifted(msgs[0].id, -1)  # new, but sorts before the last id
            with pytest.raises(InvalidMessageError) as info:
                self.store.append(key, spec.build(bad))
            assert not isinstance(info.value, DuplicateMessageError)

    @rule(key=keys, batch=st.lists(specs, max_size=4))
    def append_many(self, key: str, batch: list[Spec]) -> None:
        last = self._last_id(key)
        got = self.store.append_many(key, [s.build() for s in batch])
        assert len(got) == len(batch)
        prev = last
        for new_id in got:
            assert prev is None or new_id > prev
            prev = new_id
        if batch:
            self._ensure(key).extend(rec_of(s, i, self._created(s)) for s, i in zip(batch, got))

    @rule(key=keys, batch=st.lists(specs, min_size=2, max_size=4), data=st.data())
    def append_many_with_duplicate(self, key: str, batch: list[Spec], data: st.DataObject) -> None:
        last = self._last_id(key)
        dup = shifted(last, 1) if last else ulid.encode(self.now << 80)
        second = data.draw(st.integers(min_value=1, max_value=len(batch) - 1))
        built = [s.build() for s in batch]
        built[0] = batch[0].build(dup)
        built[second] = batch[second].build(dup)
        with pytest.raises(DuplicateMessageError):
            self.store.append_many(key, built)

    # -- changing the end ---------------------------------------------------------------------
    @rule(key=keys)
    def remove_last(self, key: str) -> None:
        msgs = self.sessions.get(key)
        assert self.store.remove_last(key) is bool(msgs)
        if msgs:
            msgs.pop()

    @rule(key=keys, data=st.data())
    def remove_last_expected(self, key: str, data: st.DataObject) -> None:
        msgs = self.sessions.get(key) or []
        stale_choices = [r.id for r in msgs[:-1]] + [ulid.encode((self.now << 80) + 7)]
        if bool(msgs) and data.draw(st.booleans(), label="matching"):
            assert self.store.remove_last(key, expected_id=msgs[-1].id) is True
            msgs.pop()
        else:
            stale = data.draw(st.sampled_from(stale_choices), label="stale id")
            assume(not msgs or stale != msgs[-1].id)
            assert self.store.remove_last(key, expected_id=stale) is False

    @rule(key=keys, spec=specs, data=st.data())
    def update_last(self, key: str, spec: Spec, data: st.DataObject) -> None:
        msgs = self.sessions.get(key) or []
        mode = data.draw(st.sampled_from(["plain", "expected", "stale", "same_id", "new_id", "bad_id"]), label="mode")
        if not msgs:
            assert self.store.update_last(key, spec.build()) is False
            assert self.store.update_last(key, spec.build(), expected_id=ulid.encode(self.now << 80)) is False
            return
        old = msgs[-1]
        kept = Rec(old.id, spec.role, spec.content, spec.kind, dict(spec.extra),
                   old.created_at if spec.created_at is None else spec.created_at)
        if mode == "plain":
            assert self.store.update_last(key, spec.build()) is True
            msgs[-1] = kept
        elif mode == "expected":
            assert self.store.update_last(key, spec.build(), expected_id=old.id) is True
            msgs[-1] = kept
        elif mode == "stale":
            stale = msgs[-2].id if len(msgs) > 1 else shifted(old.id, 1)
            assert self.store.update_last(key, spec.build(), expected_id=stale) is False
        elif mode == "same_id":
            assert self.store.update_last(key, spec.build(old.id)) is True
            msgs[-1] = kept
        elif mode == "new_id":
            new = shifted(old.id, data.draw(st.integers(min_value=1, max_value=2**60), label="gap"))
            assert self.store.update_last(key, spec.build(new)) is True
            # Fields the new message leaves empty are kept: a missing created_at is the old one.
            msgs[-1] = Rec(new, spec.role, spec.content, spec.kind, dict(spec.extra),
                           old.created_at if spec.created_at is None else spec.created_at)
        else:  # bad_id: the id of an earlier message (duplicate) or one sorting before it
            assume(len(msgs) > 1)
            if data.draw(st.booleans(), label="duplicate"):
                with pytest.raises(DuplicateMessageError):
                    self.store.update_last(key, spec.build(msgs[-2].id))
            else:
                with pytest.raises(InvalidMessageError) as info:
                    self.store.update_last(key, spec.build(shifted(msgs[0].id, -1)))
                assert not isinstance(info.value, DuplicateMessageError)

    # -- replacing everything ---------------------------------------------------------------
    def _plan(self, batch: list[Spec], with_ids: list[bool], gaps: list[int]) -> list[tuple[Spec | Rec, str]]:
        cur = (self.now - 60_000) << 80
        planned: list[tuple[Spec | Rec, str]] = []
        for spec, give, gap in zip(batch, with_ids, gaps):
            if give:
                cur += gap
                planned.append((spec, ulid.encode(cur)))
            else:
                planned.append((spec, ""))
        return planned

    @rule(
        key=keys,
        batch=st.lists(specs, max_size=5),
        with_ids=st.lists(st.booleans(), min_size=5, max_size=5),
        gaps=st.lists(st.integers(min_value=2**20, max_value=2**79), min_size=5, max_size=5),
    )
    def rewrite_messages(self, key: str, batch: list[Spec], with_ids: list[bool], gaps: list[int]) -> None:
        planned = self._plan(batch, with_ids, gaps)
        self.store.rewrite_messages(key, [s.build(i) for s, i in planned])  # type: ignore[union-attr]
        self._ensure(key)
        self.sessions[key] = self._learn_ids(key, planned)

    @rule(key=keys, batch=st.lists(specs, min_size=2, max_size=4), data=st.data())
    def rewrite_out_of_order(self, key: str, batch: list[Spec], data: st.DataObject) -> None:
        high = ulid.encode((self.now << 80) + 1000)
        low = shifted(high, -10)
        duplicate = data.draw(st.booleans(), label="duplicate")
        built = [s.build() for s in batch]
        built[0] = batch[0].build(high)
        built[-1] = batch[-1].build(high if duplicate else low)
        with pytest.raises(InvalidMessageError) as info:
            self.store.rewrite_messages(key, built)
        assert isinstance(info.value, DuplicateMessageError) is duplicate

    @rule(
        key=keys,
        prefix=st.lists(specs, max_size=2),
        keep=st.integers(min_value=0, max_value=4),
        crumb=st.booleans(),
        if_exists=st.booleans(),
    )
    def replace_conversation_state(self, key: str, prefix: list[Spec], keep: int, crumb: bool, if_exists: bool) -> None:
        """The trimming pattern: new id-less messages (a breadcrumb) before a kept suffix."""
        old = self.sessions.get(key) or []
        kept = old[len(old) - min(keep, len(old)):]
        planned: list[tuple[Spec | Rec, str]] = [(s, "") for s in prefix] + [(r, r.id) for r in kept]
        msgs = [s.build() for s in prefix] + [rec_to_message(r) for r in kept]
        if if_exists:
            done = self.store.replace_conversation_state_if_exists(key, msgs, crumb)
            assert done is (key in self.sessions)
            if not done:
                return
        else:
            self.store.replace_conversation_state(key, msgs, crumb)
        self._ensure(key)
        self.sessions[key] = self._learn_ids(key, planned)
        self.crumbs[key] = crumb

    @rule(key=keys)
    def clear_messages(self, key: str) -> None:
        msgs = self.sessions.get(key)
        assert self.store.clear_messages(key) == (len(msgs) if msgs is not None else 0)
        if msgs is not None:
            msgs.clear()

    @rule(key=keys)
    def delete_session(self, key: str) -> None:
        assert self.store.delete_session(key) is (key in self.sessions)
        self.sessions.pop(key, None)
        self.crumbs.pop(key, None)

    # -- breadcrumb ---------------------------------------------------------------------------
    @rule(key=keys, flag=st.booleans())
    def set_breadcrumb(self, key: str, flag: bool) -> None:
        if key not in self.sessions:
            with pytest.raises(SessionNotFoundError):
                self.store.set_session_trim_breadcrumb(key, flag)
            return
        self.store.set_session_trim_breadcrumb(key, flag)
        self.crumbs[key] = flag

    # -- invariants ----------------------------------------------------------------------------
    def _agrees(self, store: SessionStore, thorough: bool) -> None:
        assert store.list_sessions() == sorted(self.sessions)
        for key in self.known:
            exists = key in self.sessions
            assert store.session_exists(key) is exists, key
            expected = self.sessions.get(key, [])
            assert_same(store.try_load(key), expected, f"try_load {key!r}")
            assert store.get_session_trim_breadcrumb(key) == self.crumbs.get(key), key
            assert store._count(store._session(key)) == (len(expected) if exists else None), f"count {key!r}"
            if thorough:
                assert_same(store.load(key), expected, f"load {key!r}")
                stamped = store.load_with_timestamps(key)
                assert_same([t.message for t in stamped], expected, f"load_with_timestamps {key!r}")
                assert [t.created_at for t in stamped] == [
                    datetime.fromtimestamp(r.created_at / 1000, tz=timezone.utc) for r in expected
                ]

    @invariant()
    def store_agrees_with_model(self) -> None:
        self._agrees(self.store, thorough=False)

    @invariant()
    def fresh_store_agrees_with_model(self) -> None:
        self._agrees(self._open(), thorough=True)

    @invariant()
    def model_ids_strictly_increase(self) -> None:
        for msgs in self.sessions.values():
            ids = [r.id for r in msgs]
            assert ids == sorted(set(ids))

    @invariant()
    def only_session_files_directly_in_root(self) -> None:
        for entry in os.scandir(self.root):
            assert entry.is_file(follow_symlinks=False), entry.name
            assert not entry.name.endswith(".tmp"), f"temp file left behind: {entry.name}"
            assert entry.name.endswith((".jsonl", ".meta.json", ".lock")), entry.name
        assert os.listdir(self.tmp) == ["store"]


class FrozenClockMachine(StoreMachine):
    clock_steps = False


def _settings(examples: int, steps: int) -> settings:
    if SOAK:
        examples, steps = examples * 10, steps * 2
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )


def _machine(base: type[StoreMachine], durability: str) -> type[StoreMachine]:
    return type(f"{base.__name__}_{durability}", (base,), {"durability": durability})


@pytest.mark.parametrize("durability", ["fsync", "flush"])
def test_store_agrees_with_model(durability: str) -> None:
    run_state_machine_as_test(_machine(StoreMachine, durability), settings=_settings(EXAMPLES, STEPS))


def test_store_agrees_with_model_frozen_clock() -> None:
    run_state_machine_as_test(_machine(FrozenClockMachine, "flush"), settings=_settings(FROZEN_EXAMPLES, STEPS))


# -- clocks, directly ------------------------------------------------------------------


@pytest.mark.parametrize("durability", ["fsync", "flush"])
def test_ids_strictly_increase_with_frozen_and_backward_clock(tmp_path: Any, durability: str) -> None:
    now = [START_MS]
    store = SessionStore(tmp_path / "s", durability=durability, clock=lambda: now[0])  # type: ignore[arg-type]
    got = [store.append("k", {"role": "user", "content": i}) for i in range(5)]  # frozen: same ms
    now[0] -= 3_600_000  # an hour back
    got += store.append_many("k", [{"role": "user", "content": i} for i in range(5)])
    got.append(SessionStore(tmp_path / "s", clock=lambda: now[0] - 10).append("k", {"role": "user"}))
    now[0] += 7_200_000  # and forward again: a fresh time-based id
    got.append(store.append("k", {"role": "user"}))
    assert got == sorted(set(got))
    assert [m.id for m in store.try_load("k")] == got
    assert ulid.timestamp_ms(got[-1]) == now[0]
    assert all(m.created_at == START_MS for m in store.try_load("k")[:5])
