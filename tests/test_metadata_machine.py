"""A Hypothesis state machine over every metadata and lifecycle method, checked against a
plain model.

The model is a dict ``key -> Rec`` (a session exists iff its key is in the dict): its
transcript lines (messages, exact duplicates and corrupt lines another tool appended, a
torn tail) and its metadata (name, alias, owner, state, turn, since, context, creation
time, whether its files were aged past the TTL). Rules: append, delete, every setter
(valid and invalid values, on existing and missing sessions), owner-checked delete,
attribution count/rename/clear, state and stuck listings, aging + ``cleanup_stale``,
``search``, ``compact`` with and without ``repair``, and raw damage. After every step a
*fresh* store on the same root must agree with the model on everything, metadata included.

Budget: ~20 s on a 2-core machine (both durability modes); ``JSONL_SESSIONS_SOAK=1``
runs ten times as many examples.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from _summary import record
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from jsonl_sessions import (
    CorruptTranscriptError,
    SessionNotFoundError,
    SessionQuery,
    SessionState,
    SessionStore,
)
from jsonl_sessions.keys import key_to_stem

#: What the machine exercised (reported in the run's summary).
STATS: Counter[str] = Counter()

SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"
START_MS = 1_700_000_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
AGED_NS = 3 * 3600 * 10**9  # files aged this far back are stale for a 2-hour TTL

KEYS = ["a", "B/c", "\u00fcml\u00e4ut", "long" + "x" * 140]  # the last has a hashed stem
ALIASES = ["planner", "coder", "Planner"]
OWNERS = ["alice", "bob"]
WORDS = ["alpha", "Beta", "stra\u00dfe", "quote\"d", "back\\slash", "new\nline", "\U0001f99c", "zeta"]
KEYWORDS = ["alpha", "BETA", "STRASSE", 'quote"', "\\sla", "w\nl", "\U0001f99c", "zz", "a", ""]

texts = st.lists(st.sampled_from(WORDS), min_size=0, max_size=3).map(" ".join)
contents = texts | st.lists(texts | st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=2)
contexts = st.dictionaries(st.sampled_from(["cwd", "model", "\u00e9"]), st.text(max_size=5), max_size=2)


def texts_of(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out = []
    for part in content:
        out.append(part if isinstance(part, str) else part["text"])
    return out


@dataclass
class Line:
    kind: str  # "msg", "dup" (exact copy of the line before it was appended), "bad"
    content: Any = None


@dataclass
class Rec:
    created: int
    lines: list[Line] = field(default_factory=list)
    torn: bool = False
    name: str | None = None
    alias: str | None = None
    owner: str | None = None
    state: str | None = None
    turn: str | None = None
    since: int | None = None
    context: dict[str, str] = field(default_factory=dict)
    aged_ns: int | None = None  # set while both files are aged

    @property
    def texts(self) -> list[str]:
        return [t for line in self.lines if line.kind != "bad" for t in texts_of(line.content)]


class MetadataMachine(RuleBasedStateMachine):
    durability = "flush"

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="jsonl-meta-sm-")
        self.root = os.path.join(self.tmp, "store")
        self.now = START_MS
        self.store = self._open()
        self.model: dict[str, Rec] = {}
        self.quarantined = 0

    def _open(self) -> SessionStore:
        return SessionStore(self.root, durability=self.durability, clock=lambda: self.now)  # type: ignore[arg-type]

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _path(self, key: str, suffix: str) -> str:
        return os.path.join(self.root, key_to_stem(key) + suffix)

    def _raw_append(self, key: str, data: bytes) -> None:
        """Another tool appends bytes to the transcript (politely, under the guard)."""
        with self.store.lock(key), open(self._path(key, ".jsonl"), "ab") as f:
            f.write(data)
        self.model[key].aged_ns = None

    # -- time and instances -------------------------------------------------------------
    @rule(delta=st.integers(min_value=-2000, max_value=20_000))
    def step_clock(self, delta: int) -> None:
        self.now += delta

    @rule()
    def reopen(self) -> None:
        self.store = self._open()

    # -- sessions -----------------------------------------------------------------------
    @initialize(keys=st.lists(st.sampled_from(KEYS), unique=True, min_size=1), content=contents)
    def some_sessions(self, keys: list[str], content: Any) -> None:
        for key in keys:
            self.append(key, content)

    @rule(key=st.sampled_from(KEYS), content=contents)
    def append(self, key: str, content: Any) -> None:
        self.store.append(key, {"role": "user", "content": content})
        rec = self.model.setdefault(key, Rec(created=self.now))
        rec.lines.append(Line("msg", content))
        rec.torn = False
        rec.aged_ns = None

    @rule(key=st.sampled_from(KEYS))
    def delete_session(self, key: str) -> None:
        assert self.store.delete_session(key) is (key in self.model)
        self.model.pop(key, None)

    # -- setters ------------------------------------------------------------------------
    def _set(self, key: str, method: str, *args: Any) -> bool:
        if key not in self.model:
            with pytest.raises(SessionNotFoundError):
                getattr(self.store, method)(key, *args)
            return False
        getattr(self.store, method)(key, *args)
        self.model[key].aged_ns = None
        return True

    @rule(key=st.sampled_from(KEYS), name=st.text(max_size=8) | st.sampled_from(WORDS))
    def set_name(self, key: str, name: str) -> None:
        if self._set(key, "set_session_name", name):
            self.model[key].name = name

    @rule(key=st.sampled_from(KEYS), alias=st.sampled_from(ALIASES))
    def set_alias(self, key: str, alias: str) -> None:
        if self._set(key, "set_session_agent_alias", alias):
            self.model[key].alias = alias

    @rule(key=st.sampled_from(KEYS), context=contexts)
    def set_context(self, key: str, context: dict[str, str]) -> None:
        if self._set(key, "set_session_context", context):
            self.model[key].context = dict(context)

    @rule(key=st.sampled_from(KEYS), owner=st.sampled_from(OWNERS))
    def set_principal(self, key: str, owner: str) -> None:
        if self._set(key, "set_session_principal", owner):
            self.model[key].owner = owner

    @rule(key=st.sampled_from(KEYS), state=st.sampled_from(["idle", "running", "error"]),
          turn=st.none() | st.sampled_from(["t1", "t2"]))
    def set_state(self, key: str, state: str, turn: str | None) -> None:
        if not self._set(key, "set_session_state", state, turn):
            return
        rec = self.model[key]
        turn = None if state == "idle" else turn
        if (rec.state, rec.turn) != (state, turn):
            rec.since = self.now
        rec.state, rec.turn = state, turn

    @rule(key=st.sampled_from(KEYS), bad=st.sampled_from(["", "Running", "done", None]))
    def set_bad_state(self, key: str, bad: Any) -> None:
        with pytest.raises(ValueError):
            self.store.set_session_state(key, bad)

    @rule(key=st.sampled_from(KEYS), owner=st.sampled_from([*OWNERS, ""]))
    def delete_session_owned(self, key: str, owner: str) -> None:
        rec = self.model.get(key)
        expected = rec is not None and owner != "" and rec.owner == owner
        assert self.store.delete_session_owned(key, owner) is expected
        if expected:
            del self.model[key]
            STATS["owner-checked deletions"] += 1

    # -- attribution --------------------------------------------------------------------
    @rule(alias=st.sampled_from(ALIASES))
    def count_attribution(self, alias: str) -> None:
        assert self.store.count_agent_attribution(alias) == sum(r.alias == alias for r in self.model.values())

    @rule(old=st.sampled_from(ALIASES), new=st.sampled_from(ALIASES))
    def rename_attribution(self, old: str, new: str) -> None:
        matching = [r for r in self.model.values() if r.alias == old]
        assert self.store.rename_agent_attribution(old, new) == len(matching)
        if old != new:
            for r in matching:
                r.alias = new
                r.aged_ns = None

    @rule(alias=st.sampled_from(ALIASES))
    def clear_attribution(self, alias: str) -> None:
        matching = [r for r in self.model.values() if r.alias == alias]
        assert self.store.clear_agent_attribution(alias) == len(matching)
        for r in matching:
            r.alias = None
            r.aged_ns = None

    # -- TTL ----------------------------------------------------------------------------
    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def age(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.model)))
        then = time.time_ns() - AGED_NS
        for suffix in (".jsonl", ".meta.json"):
            os.utime(self._path(key, suffix), ns=(then, then))
        self.model[key].aged_ns = then

    @rule()
    def cleanup_stale(self) -> None:
        doomed = [k for k, r in self.model.items() if r.aged_ns is not None and r.state != "running"]
        assert self.store.cleanup_stale(2) == len(doomed)
        STATS["sessions deleted by cleanup_stale"] += len(doomed)
        for k in doomed:
            del self.model[k]

    # -- search -------------------------------------------------------------------------
    @rule(keyword=st.sampled_from(KEYWORDS), alias=st.none() | st.sampled_from(ALIASES),
          limit=st.none() | st.integers(min_value=0, max_value=3))
    def search(self, keyword: str, alias: str | None, limit: int | None) -> None:
        needle = keyword.casefold()
        expected = {
            k for k, r in self.model.items()
            if (alias is None or r.alias == alias)
            and (needle in (r.name or "").casefold() and r.name is not None
                 or not needle or any(needle in t.casefold() for t in r.texts))
        }
        got = self.store.search(SessionQuery(keyword, limit=limit, agent_alias=alias))
        keys = [m.key for m in got]
        assert len(keys) == len(set(keys))
        assert set(keys) <= expected
        assert len(keys) == (len(expected) if limit is None else min(limit, len(expected)))
        STATS["search results checked"] += len(keys)
        stamps = [m.updated_at for m in got]
        assert stamps == sorted(stamps, reverse=True), "newest activity first"  # type: ignore[type-var]

    # -- damage and compact -------------------------------------------------------------
    @precondition(lambda self: any(r.lines and r.lines[-1].kind == "msg" and not r.torn for r in self.model.values()))
    @rule(data=st.data())
    def duplicate_last_line(self, data: st.DataObject) -> None:
        """A tool retried an append: the newest line is written twice."""
        key = data.draw(st.sampled_from(sorted(
            k for k, r in self.model.items() if r.lines and r.lines[-1].kind == "msg" and not r.torn)))
        with open(self._path(key, ".jsonl"), "rb") as f:
            raw = f.read()
        last = raw[raw.rfind(b"\n", 0, len(raw) - 1) + 1:]
        self._raw_append(key, last)
        self.model[key].lines.append(Line("dup", self.model[key].lines[-1].content))

    @precondition(lambda self: any(not r.torn for r in self.model.values()))
    @rule(data=st.data(), junk=st.sampled_from([b"garbage alpha", b"", b'{"role": 5}', b'{"content":"beta"']))
    def corrupt_line(self, data: st.DataObject, junk: bytes) -> None:
        key = data.draw(st.sampled_from(sorted(k for k, r in self.model.items() if not r.torn)))
        self._raw_append(key, junk + b"\n")
        self.model[key].lines.append(Line("bad"))

    @precondition(lambda self: any(not r.torn for r in self.model.values()))
    @rule(data=st.data())
    def torn_tail(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(k for k, r in self.model.items() if not r.torn)))
        self._raw_append(key, b'{"id":"01ZZZZZZZZZZZZZZZZZZZZZZZZ","role":"user","content":"alpha')
        self.model[key].torn = True

    @rule(key=st.sampled_from(KEYS), repair=st.booleans())
    def compact(self, key: str, repair: bool) -> None:
        rec = self.model.get(key)
        if rec is None:
            with pytest.raises(SessionNotFoundError):
                self.store.compact(key, repair=repair)
            return
        bad = sum(line.kind == "bad" for line in rec.lines)
        dups = sum(line.kind == "dup" for line in rec.lines)
        if bad and not repair:
            with pytest.raises(CorruptTranscriptError):
                self.store.compact(key)
            return
        assert self.store.compact(key, repair=repair) == bad + dups
        if bad or dups or rec.torn:
            rec.aged_ns = None  # rewritten
        rec.lines = [line for line in rec.lines if line.kind == "msg"]
        rec.torn = False
        self.quarantined += bad > 0
        STATS["compactions that dropped lines"] += bad + dups > 0
        STATS["repairs (quarantine files)"] += bad > 0

    # -- invariants ---------------------------------------------------------------------
    @invariant()
    def fresh_store_agrees_on_metadata(self) -> None:
        store = self._open()
        listed = store.list_sessions_with_metadata()
        STATS["steps checked against a fresh store"] += 1
        STATS["session metadata records checked"] += len(listed)
        assert [m.key for m in listed] == sorted(self.model)
        by_key = {m.key: m for m in listed}
        for key in KEYS:
            rec = self.model.get(key)
            md = store.get_session_metadata(key)
            if rec is None:
                assert md is None and store.get_session_state(key) is None and store.get_session_name(key) is None
                assert store.load(key) == []
                continue
            assert md == by_key[key]
            assert (md.name, md.agent_alias, md.principal_id, md.state, md.turn_id, md.context) == (
                rec.name, rec.alias, rec.owner, rec.state, rec.turn, rec.context), key
            assert md.created_at == EPOCH + timedelta(milliseconds=rec.created)
            assert md.message_count == len(rec.lines)
            assert md.size_bytes == os.path.getsize(self._path(key, ".jsonl"))
            if rec.aged_ns is not None:
                assert md.updated_at == EPOCH + timedelta(microseconds=rec.aged_ns // 1000)
            assert store.get_session_name(key) == rec.name
            assert store.get_session_agent_alias(key) == rec.alias
            expected_state = None if rec.state is None else SessionState(
                rec.state, rec.turn, EPOCH + timedelta(milliseconds=rec.since or 0))
            assert store.get_session_state(key) == expected_state
            assert [m.content for m in store.load(key)] == [ln.content for ln in rec.lines if ln.kind != "bad"]
        running = sorted(k for k, r in self.model.items() if r.state == "running")
        assert [m.key for m in store.list_running_sessions()] == running
        stuck = sorted(k for k, r in self.model.items() if r.state == "running" and self.now - (r.since or 0) > 1000)
        assert [m.key for m in store.list_stuck_sessions(1)] == stuck
        for alias in ALIASES:
            assert store.count_agent_attribution(alias) == sum(r.alias == alias for r in self.model.values())

    @invariant()
    def only_store_files_in_root(self) -> None:
        quarantine = 0
        for entry in os.scandir(self.root):
            name = entry.name
            assert entry.is_file(follow_symlinks=False), name
            assert not name.endswith(".tmp"), f"temp file left behind: {name}"
            if ".quarantine-" in name:
                assert name.endswith(".jsonl.bak")
                quarantine += 1
                continue
            assert name.endswith((".jsonl", ".meta.json", ".lock")), name
            if name.endswith(".meta.json"):
                assert os.path.exists(os.path.join(self.root, name[: -len(".meta.json")] + ".jsonl")), \
                    f"orphan sidecar {name}"
        assert quarantine == self.quarantined


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples * (10 if SOAK else 1),
        stateful_step_count=50,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )


@pytest.mark.parametrize(("durability", "examples"), [("flush", 220), ("fsync", 60)])
def test_metadata_agrees_with_model(durability: str, examples: int, request: pytest.FixtureRequest) -> None:
    machine = type(f"MetadataMachine_{durability}", (MetadataMachine,), {"durability": durability})
    STATS.clear()
    run_state_machine_as_test(machine, settings=_settings(examples))
    for name, amount in STATS.items():
        record(request.config, f"metadata machine: {name}", amount)
