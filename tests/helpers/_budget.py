"""How long the randomized tests run: a lean default, ``JSONL_SESSIONS_SOAK=1`` for soaks.

The Hypothesis profiles are registered (and one loaded) in conftest.py: ``lean`` by
default, ``soak`` with ``JSONL_SESSIONS_SOAK=1`` (ten times the examples of every
property test that does not set its own count). :func:`machine_settings` sizes a state
machine run the same way.
"""

from __future__ import annotations

import os
from typing import TypeVar

from hypothesis import HealthCheck, settings

T = TypeVar("T")

SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"
#: How many times more examples a soak runs.
SCALE = 10 if SOAK else 1
#: Health checks that only say a test is slow or big (state machines over real files are).
RELAXED = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]

settings.register_profile("lean", max_examples=50, deadline=None, suppress_health_check=RELAXED)
settings.register_profile("soak", max_examples=500, deadline=None, suppress_health_check=RELAXED)


def sized(lean: T, soak: T) -> T:
    """``soak`` with ``JSONL_SESSIONS_SOAK=1``, else ``lean`` (a smaller run of the same check)."""
    return soak if SOAK else lean


def machine_settings(examples: int, steps: int = 50, *, soak_examples: int | None = None) -> settings:
    """``examples`` programs of up to ``steps`` steps (x2 steps and ``soak_examples``, by
    default x10 examples, in a soak)."""
    if SOAK:
        examples = soak_examples if soak_examples is not None else examples * SCALE
    return settings(max_examples=examples, stateful_step_count=steps * (2 if SOAK else 1), deadline=None,
                    suppress_health_check=RELAXED)
