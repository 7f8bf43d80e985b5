"""The environment of a worker process that a test starts with ``sys.executable``: it
imports this checkout's jsonl_sessions (first on PYTHONPATH), installed or not, and the
shared test helpers (``tests/helpers``) by name, wherever the worker script lives."""

from __future__ import annotations

import os
import pathlib

HELPERS = pathlib.Path(__file__).resolve().parent
CHECKOUT = str(HELPERS.parents[1])


def child_env() -> dict[str, str]:
    return {**os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [CHECKOUT, str(HELPERS), os.environ.get("PYTHONPATH")]))}
