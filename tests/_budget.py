"""How long the randomized tests run: a lean default, ``JSONL_SESSIONS_SOAK=1`` for soaks.

The Hypothesis profiles are registered (and one loaded) in conftest.py: ``lean`` by
default, ``soak`` with ``JSONL_SESSIONS_SOAK=1`` (ten times the examples of every
property test that does not set its own count). :func:`machine_settings` sizes a state
machine run the same way.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"
#: How many times more examples a soak runs.
SCALE = 10 if SOAK else 1
#: Health checks that only say a test is slow or big (state machines over real files are).
RELAXED = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]

settings.register_profile("lean", max_examples=50, deadline=None, suppress_health_check=RELAXED)
settings.register_profile("soak", max_examples=500, deadline=None, suppress_health_check=RELAXED)


def machine_settings(examples: int, steps: int = 50) -> settings:
    """``examples`` programs of up to ``steps`` steps (x10 examples and x2 steps in a soak)."""
    return settings(max_examples=examples * SCALE, stateful_step_count=steps * (2 if SOAK else 1), deadline=None,
                    suppress_health_check=RELAXED)
