"""The environment of a worker process that a test starts with ``sys.executable``: it
imports this checkout's jsonl_sessions (first on PYTHONPATH), installed or not."""

from __future__ import annotations

import os
import pathlib

CHECKOUT = str(pathlib.Path(__file__).resolve().parent.parent)


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [CHECKOUT, os.environ.get("PYTHONPATH")]))}
