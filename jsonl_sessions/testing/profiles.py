"""Checking a backend in one call: :func:`check_backend` runs the state machine under a
named profile and fails when the run did not exercise what the profile promises.

A profile fixes how long the run is and what it must have covered:

- ``quick``: a smoke run (about 2 s on the in-memory store), each behaviour at least once;
- ``ci`` (the default): the run to put in a test suite (about 10 s on the in-memory store
  on 2 cores, a failure found and shrunk in the same budget);
- ``soak``: ten times ``ci``'s programs, twice as long, for a nightly job.

Every profile reports one failure (the first, shrunk) and runs the generate and shrink phases only (Hypothesis's ``explain`` phase
replays the failure hundreds of times to say which lines only failing runs reach; that
costs more than the whole search), with no deadline (a real database's first call may be
slow) and the ``too_slow`` health check off for the same reason.

**Coverage is data.** The machine counts what it exercised (``Machine.stats``, a
``Counter``); :data:`COVERED` names the counters every profile requires, and
:func:`check_coverage` raises :class:`CoverageError` naming each one that fell short. A
run that never removed a message, paged with every cursor, searched, forked, truncated,
replaced a conversation or (for a store that keeps its data: ``persistent``) reopened
the store on the same storage does not pass, however green its checks were. A round that
falls short by the luck of the draw is followed by up to :data:`EXTRA_ROUNDS` more (their
counts add up), so only a backend that keeps the machine from acting fails this way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import run_state_machine_as_test

from ..protocol import SessionBackend
from .machine import SessionStoreMachine, StorageProbe, make_state_machine

#: The counters every profile requires (``"recoveries"`` only of a persistent store:
#: a new instance opened on the same storage, which must see everything).
COVERED = ("removals", "updates", "pages newest", "pages before", "pages after", "pages after-start",
           "pages ts_before", "pages breakpoint", "searches", "forks", "truncations", "replaces", "recoveries")


@dataclass(frozen=True)
class Profile:
    """How long a run is (``examples`` programs of up to ``steps`` steps) and the least
    count of each counter of :data:`COVERED` it must reach (``minimum``, or the value in
    ``minimums``)."""

    name: str
    examples: int
    steps: int
    minimum: int
    minimums: Mapping[str, int] = field(default_factory=dict)

    def least(self, counter: str) -> int:
        return self.minimums.get(counter, self.minimum)

    def settings(self, **overrides: Any) -> settings:
        """The Hypothesis settings of the profile (``overrides``: any other setting, such
        as ``database=None``)."""
        chosen: dict[str, Any] = {
            "max_examples": self.examples, "stateful_step_count": self.steps, "deadline": None,
            "phases": [Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
            "suppress_health_check": [HealthCheck.too_slow], "report_multiple_bugs": False}
        chosen.update(overrides)
        return settings(**chosen)


PROFILES: dict[str, Profile] = {
    "quick": Profile("quick", examples=60, steps=25, minimum=1),
    "ci": Profile("ci", examples=150, steps=30, minimum=5),
    "soak": Profile("soak", examples=1500, steps=60, minimum=50),
}


#: How many more rounds of the profile's programs :func:`check_backend` runs when a round
#: falls short of the minimums (a thin random draw), before it raises CoverageError.
EXTRA_ROUNDS = 2


class CoverageError(AssertionError):
    """A run did not exercise what its profile requires. ``short`` maps each counter that
    fell short to ``(counted, required)``; ``stats`` is everything the run counted."""

    def __init__(self, profile: str, short: Mapping[str, tuple[int, int]], stats: Mapping[str, int]) -> None:
        self.profile, self.short, self.stats = profile, dict(short), dict(stats)
        listed = ", ".join(f"{name}: {got} (needs {need})" for name, (got, need) in sorted(self.short.items()))
        super().__init__(f"the {profile!r} run exercised too little to count as a check: {listed}. "
                         "Sessions may stay empty (does append create them?), or calls fail before they act.")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.profile, self.short, self.stats))


def check_coverage(stats: Mapping[str, int], profile: str | Profile = "ci") -> None:
    """Raise :class:`CoverageError` unless ``stats`` reach the profile's minimums (those
    of :data:`COVERED`, and any other counter the profile's ``minimums`` names)."""
    chosen = PROFILES[profile] if isinstance(profile, str) else profile
    needed = [c for c in COVERED if c != "recoveries" or stats.get("fresh-store checks", 0)]
    needed += [c for c in chosen.minimums if c not in needed]
    short = {c: (stats.get(c, 0), chosen.least(c)) for c in needed if stats.get(c, 0) < chosen.least(c)}
    if short:
        raise CoverageError(chosen.name, short, stats)


def run_covered(machine: type[SessionStoreMachine], profile: Profile, run_settings: settings | None = None, *,
                extra_rounds: int = EXTRA_ROUNDS) -> None:
    """Run ``machine`` (with ``run_settings``, default the profile's) until its counters
    reach ``profile``'s minimums: up to ``extra_rounds`` more rounds when a round falls
    short, then :class:`CoverageError`. A failure of the machine propagates at once. A
    derandomized run stays repeatable: its extra rounds use the fixed seeds 1, 2, ..."""
    chosen = run_settings or profile.settings()
    for extra in range(extra_rounds + 1):
        if extra and chosen.derandomize:  # a fixed run: each extra round other fixed programs
            seed(extra)(machine)
            chosen = settings(chosen, database=None)
        run_state_machine_as_test(machine, settings=chosen)
        try:
            check_coverage(machine.stats, profile)
            return
        except CoverageError:
            if extra == extra_rounds:
                raise
            machine.stats["extra rounds"] += 1  # a thin draw: run as many programs again


def check_backend(factory: Callable[..., SessionBackend], *, profile: str | Profile = "ci",
                  manual_clock: bool = False, storage: Callable[[SessionBackend], StorageProbe] | None = None,
                  name: str | None = None, **overrides: Any) -> Counter[str]:
    """Check the stores ``factory(path)`` builds against the reference model, under
    ``profile`` (a name of :data:`PROFILES` or a :class:`Profile`); what the run counted.

    Raises the first failure the state machine finds, shrunk (an ``AssertionError``,
    usually a :class:`~jsonl_sessions.testing.report.Mismatch`, with the failing program
    as a pytest test in its notes), or :class:`CoverageError`. ``manual_clock`` and
    ``storage``: see :func:`~jsonl_sessions.testing.make_state_machine`; ``overrides``:
    Hypothesis settings (``database=None``, ``derandomize=True``, ...)."""
    chosen = PROFILES[profile] if isinstance(profile, str) else profile
    machine: type[SessionStoreMachine] = make_state_machine(factory, manual_clock=manual_clock, storage=storage,
                                                            name=name)
    run_covered(machine, chosen, chosen.settings(**overrides))
    return machine.stats


__all__ = ["COVERED", "EXTRA_ROUNDS", "PROFILES", "CoverageError", "Profile", "check_backend", "check_coverage",
           "run_covered"]
