"""SessionStore against the reference model: the shipped state machine
(``jsonl_sessions.testing.make_state_machine``) in the configurations that matter for
the JSONL store, each with the storage capability (``JsonlFileDamage``: corrupt lines,
lines written twice, torn tails, sessions aged past a TTL, compact / repair and their
quarantine files, sizes and times against the files, nothing but store files in the
directory), and a *fresh* store on the same directory checked at every step:

- ``fsync`` and ``flush`` durability on the machine's manual clock (stepped forwards
  and backwards: ids must still strictly increase);
- ``fsync`` on the wall clock (times read back, within the call's window);
- a frozen clock (every id of a run made in one millisecond).

What each configuration exercised is in the run's summary. By default each runs 10-20
programs of up to 50 steps; ``JSONL_SESSIONS_SOAK=1`` runs 150-500 programs of up to 100.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import pytest
from _budget import machine_settings
from _summary import record
from hypothesis.stateful import run_state_machine_as_test

from jsonl_sessions import SessionStore
from jsonl_sessions import ids as ulid
from jsonl_sessions.testing import JsonlFileDamage, ManualClock, make_state_machine

START_MS = 1_700_000_000_000

#: name: (factory, clock: "manual" / "wall" / "frozen", examples, examples in a soak)
CONFIGURATIONS: dict[str, tuple[Callable[..., Any], str, int, int]] = {
    "fsync-manual-clock": (lambda p, c: SessionStore(p, durability="fsync", clock=c), "manual", 12, 300),
    "flush-manual-clock": (lambda p, c: SessionStore(p, durability="flush", clock=c), "manual", 20, 500),
    "fsync-wall-clock": (lambda p: SessionStore(p, durability="fsync"), "wall", 10, 150),
    "flush-frozen-clock": (lambda p, c: SessionStore(p, durability="flush", clock=c), "frozen", 10, 200),
}


@pytest.mark.parametrize("name", list(CONFIGURATIONS))
def test_store_agrees_with_model(name: str, request: pytest.FixtureRequest) -> None:
    factory, clock, examples, soak_examples = CONFIGURATIONS[name]
    machine = make_state_machine(factory, manual_clock=clock == "manual", frozen_clock=clock == "frozen",
                                 storage=JsonlFileDamage, name=f"SessionStore_{name.replace('-', '_')}")
    run_state_machine_as_test(machine, settings=machine_settings(examples, soak_examples=soak_examples))
    stats = machine.stats
    assert stats["fresh-store checks"] == stats["steps"] > examples, "a fresh store is checked at every step"
    assert stats["errors checked"] > examples, dict(stats)
    assert stats["damaged lines"] > 0 and stats["sessions aged"] > 0, dict(stats)
    for what, amount in stats.items():
        record(request.config, f"state machine (SessionStore {name}): {what}", amount)


@pytest.mark.parametrize("durability", ["fsync", "flush"])
def test_ids_strictly_increase_with_frozen_and_backward_clock(tmp_path: pathlib.Path, durability: str) -> None:
    clock = ManualClock(START_MS)
    store = SessionStore(tmp_path / "s", durability=durability, clock=clock)  # type: ignore[arg-type]
    got = [store.append("k", {"role": "user", "content": i}) for i in range(5)]  # frozen: same ms
    clock.step(-3_600_000)  # an hour back
    got += store.append_many("k", [{"role": "user", "content": i} for i in range(5)])
    got.append(SessionStore(tmp_path / "s", clock=lambda: clock.now - 10).append("k", {"role": "user"}))
    clock.step(7_200_000)  # and forward again: a fresh time-based id
    got.append(store.append("k", {"role": "user"}))
    assert got == sorted(set(got))
    assert [m.id for m in store.try_load("k")] == got
    assert ulid.timestamp_ms(got[-1]) == clock.now
    assert all(m.created_at == START_MS for m in store.try_load("k")[:5])
