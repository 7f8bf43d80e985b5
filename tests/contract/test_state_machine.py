"""Every backend against the reference model: the shipped state machine
(``jsonl_sessions.testing.make_state_machine``) in the configurations that matter for
each backend, with its storage capability where it has one (damaged and repeated lines or
rows, torn tails, sessions aged past a TTL, compact / repair and their quarantine, sizes
and times against the storage, nothing but the store's files or tables), and a *fresh*
store on the same storage checked at every step (not for the in-memory store, which
keeps nothing beyond its object):

- the JSONL store: ``fsync`` and ``flush`` on the machine's manual clock (stepped
  forwards and backwards: ids must still strictly increase), ``fsync`` on the wall clock
  (times read back, within the call's window), a frozen clock (every id of a run made in
  one millisecond), and ``flush`` through the async facade;
- SQLite and PostgreSQL: ``fsync`` on the wall clock, ``flush`` on the manual clock with
  the storage capability (PostgreSQL: a schema per store);
- the in-memory store, on the manual and the wall clock.

The backends' stores come from ``helpers/stores.py``, as for the rest of tests/contract.
Each run must exercise every counter of ``jsonl_sessions.testing.profiles.COVERED`` at least
once (and the storage rules where the backend has them), or it fails naming what fell
short; the counts are in the run's summary with ``-v``. By default each runs 3-20
programs of 30-50 steps (up to four rounds more when a round falls short of the counters); ``JSONL_SESSIONS_SOAK=1`` runs 60-500 programs of twice the steps.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from _budget import machine_settings
from _summary import record
from hypothesis.stateful import run_state_machine_as_test
from stores import STORAGE, Backend, opener

from jsonl_sessions import AsyncSessionStore
from jsonl_sessions import ids as ulid
from jsonl_sessions.testing import ManualClock, Profile, make_state_machine
from jsonl_sessions.testing.profiles import run_covered

START_MS = 1_700_000_000_000


class Machine(NamedTuple):
    backend: str  #: a name of stores.BACKENDS
    durability: str
    clock: str  #: "manual" / "wall" / "frozen"
    storage: bool  #: with the backend's storage capability
    examples: int
    soak_examples: int
    steps: int = 50


#: Each run must reach every counter of COVERED (up to four extra rounds, counters adding
#: up). One round of 4 examples of the PostgreSQL wall-clock run reached them in none of 16
#: tries, and once all five rounds together missed "pages before"; with 10 examples a
#: round, 5 of 8 single rounds reach them.
MACHINES: dict[str, Machine] = {
    "jsonl-fsync-manual-clock": Machine("jsonl-fsync", "fsync", "manual", True, 12, 300),
    "jsonl-flush-manual-clock": Machine("jsonl-flush", "flush", "manual", True, 20, 500),
    "jsonl-fsync-wall-clock": Machine("jsonl-fsync", "fsync", "wall", True, 10, 150),
    "jsonl-flush-frozen-clock": Machine("jsonl-flush", "flush", "frozen", True, 10, 200),
    "sqlite-fsync-wall-clock": Machine("sqlite", "fsync", "wall", False, 10, 80, steps=40),
    "sqlite-flush-manual-clock-storage": Machine("sqlite", "flush", "manual", True, 10, 140, steps=40),
    "postgres-fsync-wall-clock": Machine("postgres", "fsync", "wall", False, 10, 60, steps=30),
    "postgres-flush-manual-clock-storage": Machine("postgres", "flush", "manual", True, 8, 100, steps=30),
    "memory-manual-clock": Machine("memory", "fsync", "manual", False, 15, 350),
    "memory-wall-clock": Machine("memory", "fsync", "wall", False, 6, 150),
}


@pytest.mark.parametrize("name", list(MACHINES))
def test_store_agrees_with_model(name: str, request: pytest.FixtureRequest) -> None:
    config = MACHINES[name]
    pg = request.getfixturevalue("pg_server") if config.backend == "postgres" else None
    open_at = opener(config.backend, pg)
    stores: list[Any] = []

    def opened(store: Any) -> Any:
        stores.append(store)
        return store

    factory: Callable[..., Any]
    if config.clock == "wall":
        def factory(path: pathlib.Path) -> Any:
            return opened(open_at(path, durability=config.durability))
    else:
        def factory(path: pathlib.Path, clock: ManualClock) -> Any:
            return opened(open_at(path, durability=config.durability, clock=clock))

    machine = make_state_machine(factory, manual_clock=config.clock == "manual", frozen_clock=config.clock == "frozen",
                                 storage=STORAGE[config.backend] if config.storage else None,
                                 name=f"Machine_{name.replace('-', '_')}")
    chosen = machine_settings(config.examples, steps=config.steps, soak_examples=config.soak_examples)
    # What the run must have exercised, as data: each counter of COVERED at least once (or
    # fails with CoverageError naming the ones short of it), and the storage rules too.
    wanted = Profile(name, chosen.max_examples, chosen.stateful_step_count, minimum=1,
                     minimums={"damaged lines": 1, "sessions aged": 1} if config.storage else {})
    try:
        run_covered(machine, wanted, chosen, extra_rounds=4)  # short runs: a thin draw is likelier
    finally:
        for store in stores:
            store.close()
        if pg is not None:
            for schema in sorted({store.schema for store in stores}):
                pg.drop(schema)
    stats = machine.stats
    assert stats["examples"] >= config.examples and stats["steps"] > config.examples
    if config.backend == "memory":
        assert stats["fresh-store checks"] == 0, "MemorySessionStore is not persistent: no fresh-store check"
    else:
        assert stats["fresh-store checks"] == stats["steps"], "a fresh store is checked at every step"
    assert stats["errors checked"] > config.examples, dict(stats)  # refusals are exercised, not just reached
    for what, amount in stats.items():
        record(request.config, f"state machine ({name}): {what}", amount)


class BlockingFacade:
    """AsyncSessionStore driven through a blocking front (each call run to completion on
    one event loop), so the machine checks every coroutine against the model too."""

    def __init__(self, loop: asyncio.AbstractEventLoop, path: pathlib.Path, clock: ManualClock) -> None:
        self._loop = loop
        self._store = AsyncSessionStore(path, durability="flush", clock=clock)

    def lock(self, key: str) -> Any:
        return self._store.sync.lock(key)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._store, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run_until_complete(method(*args, **kwargs))

        return call


def test_state_machine_through_the_async_facade(request: pytest.FixtureRequest) -> None:
    loop = asyncio.new_event_loop()
    try:
        machine = make_state_machine(lambda p, c: BlockingFacade(loop, p, c), manual_clock=True)
        run_state_machine_as_test(machine, settings=machine_settings(4, steps=30, soak_examples=60))
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
    assert machine.stats["fresh-store checks"] == machine.stats["steps"] > 0
    record(request.config, "state machine (AsyncSessionStore-flush-manual-clock): steps", machine.stats["steps"])


def test_ids_strictly_increase_with_frozen_and_backward_clock(backend: Backend) -> None:
    """Ids strictly increase within a session whatever the clock does: frozen, an hour
    back, another store object whose clock lags, forward again."""
    clock = ManualClock(START_MS)
    store = backend.open(clock=clock)
    got = [store.append("k", {"role": "user", "content": i}) for i in range(5)]  # frozen: same ms
    clock.step(-3_600_000)  # an hour back
    got += store.append_many("k", [{"role": "user", "content": i} for i in range(5)])
    got.append(backend.fresh(store, clock=lambda: clock.now - 10).append("k", {"role": "user"}))
    clock.step(7_200_000)  # and forward again: a fresh time-based id
    got.append(store.append("k", {"role": "user"}))
    assert got == sorted(set(got))
    assert [m.id for m in store.try_load("k")] == got
    assert ulid.timestamp_ms(got[-1]) == clock.now
    assert all(m.created_at == START_MS for m in store.try_load("k")[:5])
