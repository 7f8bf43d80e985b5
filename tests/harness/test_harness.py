"""jsonl_sessions.testing used on ourselves, the way a third-party backend would use it.

- The state machine and the contract mixin (``SessionStoreContract``) run on every
  backend in tests/contract; here, what they do when a factory is not persistent or the
  ``store`` fixture is missing.
- The fault tools: ``fault_loop`` over every mutation, with the Nth OS call of any kind
  failing (transient, persistent), torn data writes, and SIGKILL at every call in a
  forked child; ``check_power_loss`` over a workload of every mutation in fsync mode
  (no violation allowed) and in flush mode (which makes no power-loss promise: the
  simulator must find lost acknowledged writes there).
- The strategies, the fault injector itself, and the import guard.

Budget: ~40 s by default; ``JSONL_SESSIONS_SOAK=1`` runs ten times the machine examples
and the fault loops with every errno.
"""

from __future__ import annotations

import errno
import inspect
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

import pytest
from _budget import SOAK, machine_settings
from _summary import record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

import jsonl_sessions.testing as harness
from jsonl_sessions import ChatMessage, InvalidSessionKeyError, SessionStore, _platform
from jsonl_sessions.errors import SessionNotFoundError
from jsonl_sessions.keys import key_to_stem
from jsonl_sessions.protocol import SessionBackend, backend_methods
from jsonl_sessions.testing import (
    FaultInjector,
    ManualClock,
    MemorySessionStore,
    SessionStoreContract,
    check_power_loss,
    contract,
    fault_loop,
    make_state_machine,
    strategies,
)
from jsonl_sessions.testing.contract import covered_methods
from jsonl_sessions.testing.faults import EXIT_STATUS, no_temp_files, observer, run_killed

HAS_FORK = hasattr(os, "fork") and hasattr(signal, "SIGKILL")


def test_machine_skips_fresh_store_checks_only_for_non_persistent_factories() -> None:
    """``persistent = False`` on the factory (not only on the store) turns the check off."""

    def factory(path: pathlib.Path) -> SessionStore:
        return SessionStore(path, durability="flush")

    factory.persistent = False  # type: ignore[attr-defined]
    machine = make_state_machine(factory)
    run_state_machine_as_test(machine, settings=machine_settings(3, steps=10))
    assert machine.stats["fresh-store checks"] == 0 and machine.stats["steps"] > 0


# -- the contract ---------------------------------------------------------------------------
def test_contract_fixture_must_be_overridden() -> None:
    class Incomplete(SessionStoreContract):
        pass

    fixture = Incomplete.store
    with pytest.raises(NotImplementedError, match="define a `store` fixture"):
        getattr(fixture, "__wrapped__", fixture)(Incomplete())


# -- fault injection: the I/O-error loop ----------------------------------------------------
K = "faulty \u00e9"
FORK = "fork"


def existing(store: Any) -> None:
    store.append_many(K, [{"role": "system", "content": "s"}, {"role": "user", "content": "q", "pad": "x" * 5000},
                          {"role": "assistant", "content": [{"type": "text", "text": "a"}]}])
    store.set_session_trim_breadcrumb(K, True)
    store.set_session_principal(K, "alice")


def transcript(store: Any, key: str) -> str:
    return os.path.join(store.root, key_to_stem(key) + ".jsonl")


def existing_torn(store: Any) -> None:
    """A crash's leftover from a while ago (modified 10 s back: no writer is still at it,
    so the store need not wait for it to stand still)."""
    existing(store)
    assert os.path.exists(transcript(store, K))
    with open(transcript(store, K), "ab") as f:
        f.write(b'{"id":"7ZZZZZZZZZZZZZZZZZZZZZZZZZ","role":"user","content":"torn')
    ago = time.time_ns() - 10 * 10**9
    os.utime(transcript(store, K), ns=(ago, ago))


def existing_with_duplicate(store: Any) -> None:
    existing(store)
    path = transcript(store, K)
    with open(path, "rb") as f:
        last = f.read().splitlines(keepends=True)[-1]
    with store.lock(K), open(path, "ab") as f:
        f.write(last)


def missing(store: Any) -> None:
    pass


def msg(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}


# name: (setup, mutation, keys observed, rolled back on failure)
MUTATIONS: dict[str, tuple[Callable[[Any], None], Callable[[Any], Any], tuple[str, ...], bool]] = {
    "append": (existing, lambda s: s.append(K, msg("new")), (K,), True),
    "append_after_torn_tail": (existing_torn, lambda s: s.append(K, msg("new")), (K,), True),
    "append_creating": (missing, lambda s: s.append(K, msg("new")), (K,), True),
    "append_many": (existing, lambda s: s.append_many(K, [msg(c) for c in "abc"]), (K,), True),
    "remove_last": (existing, lambda s: s.remove_last(K), (K,), False),
    "update_last": (existing, lambda s: s.update_last(K, msg("u" * 9000)), (K,), False),
    "update_last_after_torn_tail": (existing_torn, lambda s: s.update_last(K, msg("short")), (K,), False),
    "rewrite_messages": (existing, lambda s: s.rewrite_messages(K, [msg("r1"), msg("r2")]), (K,), False),
    "replace_conversation_state": (existing, lambda s: s.replace_conversation_state(K, [msg("s1")], False),
                                   (K,), False),
    "replace_conversation_state_if_exists": (
        existing, lambda s: s.replace_conversation_state_if_exists(K, [msg("s1"), msg("s2")], False), (K,), False),
    "clear_messages": (existing, lambda s: s.clear_messages(K), (K,), False),
    "delete_session": (existing, lambda s: s.delete_session(K), (K,), False),
    "delete_session_owned": (existing, lambda s: s.delete_session_owned(K, "alice"), (K,), False),
    "copy_messages": (existing, lambda s: s.copy_messages(K, FORK), (K, FORK), False),
    "truncate_messages": (existing, lambda s: s.truncate_messages(K, s.load(K)[0].id), (K,), False),
    "set_session_name": (existing, lambda s: s.set_session_name(K, "renamed"), (K,), False),
    "set_session_state": (existing, lambda s: s.set_session_state(K, "running", "t1"), (K,), False),
    "compact_repair": (existing_with_duplicate, lambda s: s.compact(K), (K,), False),
}


#: By default flush mode (whose error paths are fsync mode's minus the fsyncs) runs these,
#: and SIGKILL at every call runs for these (the multi-step and in-place mutations);
#: JSONL_SESSIONS_SOAK=1 runs everything everywhere.
FLUSH_DEFAULT = {"append_after_torn_tail", "append_many", "update_last", "rewrite_messages",
                 "replace_conversation_state", "copy_messages", "truncate_messages", "delete_session"}
KILL_DEFAULT = {"append_many", "update_last", "update_last_after_torn_tail", "replace_conversation_state",
                "rewrite_messages", "copy_messages", "compact_repair", "delete_session"}
FAULT_CASES = [(name, durability) for name in sorted(MUTATIONS) for durability in ("fsync", "flush")
               if SOAK or durability == "fsync" or name in FLUSH_DEFAULT]


@pytest.mark.parametrize(("name", "durability"), FAULT_CASES)
def test_fault_loop(tmp_path: pathlib.Path, durability: str, name: str, request: pytest.FixtureRequest) -> None:
    """Every call of every kind fails in turn (transient, then persistent), every data
    write (more than 64 bytes) is torn in turn, and (fsync mode) the process is SIGKILLed at every call: a
    fresh store sees the old state or the new one, recovery changes nothing it saw, no
    temp file is left, and the session takes the next append."""
    setup, mutation, keys, rolled_back = MUTATIONS[name]

    def factory(path: str) -> SessionStore:
        return SessionStore(path, durability=durability, lock_timeout=5)  # type: ignore[arg-type]

    view = observer(*keys, check_ids=setup is not existing_with_duplicate)
    common: dict[str, Any] = {"key": K, "observe": view, "rolled_back": rolled_back,
                              "check_dir": no_temp_files, "base": str(tmp_path)}
    errnos = harness.ERRNOS if SOAK else harness.ERRNOS[:2]
    modes: tuple[Any, ...] = ("transient", "persistent")
    if HAS_FORK and durability == "fsync" and (SOAK or name in KILL_DEFAULT):
        modes += ("kill",)
    report = fault_loop(factory, setup, mutation, modes=modes, errnos=errnos, **common)
    # Torn: data writes only (a write of a few bytes into a page is never short; the
    # control file's fixed fields are that small).
    torn = fault_loop(factory, setup, mutation, kinds=("write", "pwrite"), modes=("torn",),
                      match=lambda _kind, args: len(args[1]) > 64, **common)
    assert report.runs and report.injected >= report.runs - report.kills
    assert torn.runs or name in ("remove_last", "clear_messages", "delete_session", "delete_session_owned",
                                 "truncate_messages"), "no data write to tear?"
    report.add(torn)
    record(request.config, "harness faults: mutation runs that met an injected fault", report.runs)
    record(request.config, "harness faults: injected I/O errors", report.injected)
    record(request.config, "harness faults: SIGKILL trials (child killed at the Nth call)", report.kills)


def test_fault_tools_see_no_io_from_the_memory_store(tmp_path: pathlib.Path) -> None:
    """MemorySessionStore does no file I/O: the first run of every mode meets no fault."""
    report = fault_loop(lambda p: MemorySessionStore(p), existing, lambda s: s.append(K, msg("x")), key=K,
                        observe=observer(K), base=str(tmp_path))
    assert report.runs == 0 and report.completed_at == {"transient": 1, "persistent": 1}


# -- fault injection: simulated power loss --------------------------------------------------
P = "powered"


def workload() -> list[tuple[str, Callable[[Any], Any]]]:
    return [
        ("append (creates)", lambda s: s.append(P, msg("one"))),
        ("append", lambda s: s.append(P, {"role": "assistant", "content": "two " * 60})),
        ("append_many", lambda s: s.append_many(P, [msg(f"b{i}") for i in range(3)])),
        ("update_last", lambda s: s.update_last(P, msg("updated " * 40))),
        ("remove_last", lambda s: s.remove_last(P)),
        ("set_session_name", lambda s: s.set_session_name(P, "named")),
        ("copy_messages", lambda s: s.copy_messages(P, FORK)),
        ("rewrite_messages", lambda s: s.rewrite_messages(P, [msg("r1"), msg("r2"), msg("r3")])),
        ("replace_conversation_state", lambda s: s.replace_conversation_state(P, [msg("crumb"), msg("kept")], True)),
        ("truncate_messages", lambda s: s.truncate_messages(P, s.load(P)[0].id)),
        ("clear_messages", lambda s: s.clear_messages(P)),
        ("append after clear", lambda s: s.append(P, msg("again"))),
        ("delete_session", lambda s: s.delete_session(FORK)),
    ]


def test_power_loss_fsync_mode_loses_nothing(tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> None:
    """Every crash state of the workload recovers to the acknowledged history, plus at
    most the mutation in flight, or to a precise CorruptTranscriptError for damage."""
    report = check_power_loss(lambda p: SessionStore(p, durability="fsync"), [P, FORK], workload(),
                              base=str(tmp_path))
    assert report.states_checked > 100 and not report.violations
    assert report.outcomes["the acknowledged state plus the in-flight mutation"] > 0
    record(request.config, "harness power loss: recorded calls", report.ops)
    record(request.config, "harness power loss: crash states generated", report.states_generated)
    record(request.config, "harness power loss: distinct crash states recovered and checked", report.states_checked)


def test_power_loss_simulator_tells_flush_mode_apart(tmp_path: pathlib.Path) -> None:
    """Flush mode promises nothing about power loss: without fsyncs, the simulator must
    find states where acknowledged mutations are gone."""
    report = check_power_loss(lambda p: SessionStore(p, durability="flush"), [P], workload()[:3],
                              base=str(tmp_path), raise_on_violation=False)
    assert report.violations
    assert any("neither the acknowledged one" in v for v in report.violations)


def test_power_loss_torn_batch_tail_is_cut(tmp_path: pathlib.Path) -> None:
    """Regression (found by the simulator): a batch whose length survived a power loss but
    whose last bytes did not (zero-filled or stale) is removed whole by recovery."""
    steps = [("append_many", lambda s: s.append_many(P, [msg(f"b{i}") for i in range(4)]))]
    report = check_power_loss(lambda p: SessionStore(p, durability="fsync"), [P], steps,
                              setup=lambda s: s.append(P, msg("first")), base=str(tmp_path))
    assert not report.violations and report.states_checked > 10


# -- the fault injector itself --------------------------------------------------------------
def test_injector_fails_the_nth_call_of_a_kind(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "s", durability="fsync")
    store.append("k", msg("a"))
    real = _platform.fsync
    with FaultInjector("fsync", 2, err=errno.ENOSPC) as inj, pytest.raises(OSError) as info:
        store.append("k", msg("b"))  # fsync 1: the append; it passes
        store.append("k", msg("c"))  # fsync 2: fails
    assert info.value.errno == errno.ENOSPC and inj.injected == 1 and inj.calls == 2
    assert [m.content for m in store.try_load("k")] == ["a", "b"]
    assert _platform.fsync is real  # restored on exit
    with FaultInjector("open", 1, persistent=True) as inj:
        for _ in range(3):
            with pytest.raises(OSError):
                store.try_load("k")
    assert inj.injected == 3
    assert [m.content for m in store.try_load("k")] == ["a", "b"]


def test_injector_torn_write_leaves_half_the_bytes(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        with FaultInjector("write", 1, torn=True), pytest.raises(OSError):
            _platform.write(fd, b"0123456789")
    finally:
        os.close(fd)
    assert path.read_bytes() == b"01234"


@pytest.mark.skipif(not HAS_FORK, reason="needs fork and SIGKILL")
def test_injector_kills_the_process(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "s", durability="fsync")
    store.append("k", msg("a"))
    assert run_killed(lambda: SessionStore(tmp_path / "s").append("k", msg("b")), "fsync", 1) == -signal.SIGKILL
    assert run_killed(lambda: SessionStore(tmp_path / "s").append("k", msg("c")), "fsync", 5) == 0  # not reached
    assert [m.content for m in SessionStore(tmp_path / "s").try_load("k")] in (["a", "c"], ["a", "b", "c"])
    code = textwrap.dedent(f"""
        from jsonl_sessions import SessionStore
        from jsonl_sessions.testing import FaultInjector
        with FaultInjector("write", 1, action="exit"):
            SessionStore({str(tmp_path / 'x')!r}).append("k", {{"role": "user"}})
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=False)
    assert done.returncode == EXIT_STATUS, done.stderr


def test_injector_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        FaultInjector("read", 1)
    with pytest.raises(ValueError):
        FaultInjector("fsync", 1, torn=True)
    with pytest.raises(ValueError):
        FaultInjector("write", 0)


# -- strategies -----------------------------------------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(key=strategies.session_keys(), batch=st.lists(strategies.messages(), max_size=3),
       marker=strategies.compaction_markers(), exchange=strategies.tool_exchanges())
def test_strategies_make_what_every_store_accepts(key: str, batch: list[Any], marker: ChatMessage,
                                                  exchange: list[ChatMessage]) -> None:
    assert marker.kind == "compaction"
    calls = exchange[0].extra["tool_calls"]
    assert [m.extra["tool_call_id"] for m in exchange[1:]] == [c["id"] for c in calls]
    memory = MemorySessionStore()
    ids = memory.append_many(key, [*batch, marker, *exchange])
    assert [m.id for m in memory.load(key)] == ids == sorted(set(ids))
    assert memory.list_sessions() == [key]


@settings(max_examples=30, deadline=None)
@given(bad=strategies.invalid_session_keys())
def test_invalid_key_strategy_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidSessionKeyError):
        MemorySessionStore().append(bad, msg("x"))


def test_hostile_keys_round_trip(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "s", durability="flush")
    for key in strategies.HOSTILE_KEYS:
        store.append(key, msg(key))
    assert store.list_sessions() == sorted(set(strategies.HOSTILE_KEYS))
    assert all(name.endswith((".jsonl", ".meta.json", ".lock")) for name in os.listdir(tmp_path / "s"))


# -- the contract, from the protocol ---------------------------------------------------------
def test_contract_covers_every_protocol_method() -> None:
    """Every method of the backend protocol is called on purpose by the contract, every
    parameter of the protocol has a sample value, and the tables name only protocol
    methods."""
    contract.check_samples()
    assert covered_methods() == set(backend_methods())
    for table in (contract.BAD_METADATA, contract.BAD_LISTING, contract.BAD_READS):
        for case, (method, args, _) in table.items():
            assert set(args) <= set(contract.signature(method).parameters), case


def test_missing_session_outcomes_follow_the_protocol_docs() -> None:
    """What the contract expects on a missing session is read from the protocol: the
    methods documented to raise SessionNotFoundError raise it, those documented to create
    the session are not expected to fail, the rest return their type's empty value."""
    creators = set(contract.KEYED_METHODS) - set(contract.ON_MISSING)
    assert creators == {"append", "append_message", "append_many", "rewrite_messages", "replace_conversation_state",
                        "copy_messages(target)"}
    for method, expected in contract.ON_MISSING.items():
        doc = inspect.getdoc(getattr(SessionBackend, method.split("(")[0])) or ""
        assert (expected is SessionNotFoundError) is (":raises SessionNotFoundError:" in doc), method
    assert contract.ON_MISSING["load"] == [] and contract.ON_MISSING["delete_session"] is False
    assert contract.ON_MISSING["clear_messages"] == 0 and contract.ON_MISSING["get_session_state"] is None


# -- the package ----------------------------------------------------------------------------
def test_public_names() -> None:
    assert len(harness.__all__) == len(set(harness.__all__))
    assert all(hasattr(harness, name) for name in harness.__all__)
    assert ManualClock(5)() == 5


@pytest.mark.parametrize("missing_module", ["hypothesis", "pytest"])
def test_import_guard_names_the_extra(missing_module: str) -> None:
    code = textwrap.dedent(f"""
        import sys
        sys.modules[{missing_module!r}] = None  # as if not installed
        import jsonl_sessions  # the library itself does not need it
        try:
            import jsonl_sessions.testing
        except ImportError as exc:
            print(exc)
        else:
            raise SystemExit("imported without {missing_module}")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "pip install 'jsonl-sessions[testing]'" in done.stdout
