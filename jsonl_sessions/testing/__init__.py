"""Conformance and fault-injection harness for session stores (``jsonl_sessions.testing``).

Shipped inside the package so that a third-party backend (SQLite, a cloud store, an
in-memory fake) can prove it honours the contract of docs/api.md the way this library's
own :class:`~jsonl_sessions.SessionStore` does, with the same tools:

- :class:`ReferenceStore` (``reference.py``): the reference model, what every method
  returns and changes as plain Python over a dict of lists (``reference.page``: page
  semantics), used by everything below.
- :func:`make_state_machine` (``machine.py``): a Hypothesis state machine built from a
  ``factory(path)``, checking every method against the reference model (options: a
  manual or frozen clock, a ``storage`` capability); run it with
  ``run_state_machine_as_test``.
- :mod:`~jsonl_sessions.testing.strategies`: session keys (hostile ones included),
  messages, compaction markers, tool call / result pairs.
- :class:`SessionStoreContract` (``contract.py``): a pytest mixin whose tests cover the
  error contract of every method, each call built from the protocol; subclass it and
  define a ``store`` fixture.
- :class:`MemorySessionStore` (``memory.py``): an in-memory implementation of the whole
  API built on the reference model, passing the same harness; a test double.
- ``faults.py``, what goes wrong beneath a store: :class:`FaultInjector` and
  :func:`fault_loop` make the Nth OS call of a kind fail (or kill the process) through
  the store's one platform seam, and run a mutation with the failure point advanced one
  by one; :class:`JsonlFileDamage` is the ``damage`` / ``storage`` capability for stores
  in the JSONL file layout; :func:`check_power_loss` simulates power loss over the
  recorded writes and syncs of a workload.
- ``pgserver.py``: a throwaway PostgreSQL server for tests and benchmarks.

Needs the testing extra (hypothesis and pytest): ``pip install 'jsonl-sessions[testing]'``.
"""

from __future__ import annotations

try:
    import hypothesis  # noqa: F401
    import pytest  # noqa: F401
except ImportError as _exc:  # pragma: no cover - exercised in a subprocess by the tests
    from ..extras import install_hint

    raise ImportError(f"jsonl_sessions.testing needs hypothesis and pytest; install them with: "
                      f"{install_hint('testing')}") from _exc

from . import strategies
from .contract import SessionStoreContract
from .faults import (
    ERRNOS,
    KINDS,
    FaultInjector,
    FaultLoopReport,
    JsonlFileDamage,
    PowerLossReport,
    check_power_loss,
    fault_loop,
)
from .machine import ManualClock, make_state_machine
from .memory import MemorySessionStore
from .reference import ReferenceStore

__all__ = [
    "ERRNOS",
    "KINDS",
    "FaultInjector",
    "FaultLoopReport",
    "JsonlFileDamage",
    "ManualClock",
    "MemorySessionStore",
    "PowerLossReport",
    "ReferenceStore",
    "SessionStoreContract",
    "check_power_loss",
    "fault_loop",
    "make_state_machine",
    "strategies",
]
