"""Counting what the crash, concurrency and fault tests actually exercised.

``record(config, name, amount)`` adds to a counter; at the end of the run the totals
are printed in pytest's terminal summary with ``-v`` or ``JSONL_SESSIONS_COUNTS=1`` (a
plain run stays quiet) and always stored in the pytest cache under ``jsonl_sessions/counts``
(``.pytest_cache/v/jsonl_sessions/counts``), where CI or a person can read them.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest

_PLUGIN_NAME = "jsonl_sessions_counts"


class _Counts:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.counts: Counter[str] = Counter()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        cache = getattr(self.config, "cache", None)
        if cache is not None and self.counts:
            cache.set("jsonl_sessions/counts", dict(sorted(self.counts.items())))
        if not self.counts or not (self.config.get_verbosity() > 0 or os.environ.get("JSONL_SESSIONS_COUNTS") == "1"):
            return  # quiet unless asked: -v, or JSONL_SESSIONS_COUNTS=1
        terminalreporter.write_sep("-", "jsonl_sessions crash / fault / concurrency counts")
        for name in sorted(self.counts):
            terminalreporter.write_line(f"{name}: {self.counts[name]}")


def record(config: pytest.Config, name: str, amount: int = 1) -> None:
    """Add ``amount`` to counter ``name`` for this run's summary."""
    plugin = config.pluginmanager.get_plugin(_PLUGIN_NAME)
    if plugin is None:
        plugin = _Counts(config)
        config.pluginmanager.register(plugin, _PLUGIN_NAME)
    plugin.counts[name] += amount
