"""The agent SDKs the adapters' tests run against come with the ``test-integrations``
extra, not with ``test``. A test (or a whole test module) that needs one calls
:func:`require`: without the SDK it skips, naming the extra to install, unless
``JSONL_SESSIONS_REQUIRE_INTEGRATIONS=1`` (CI): then it fails."""

from __future__ import annotations

import importlib
import os

import pytest

REQUIRE = os.environ.get("JSONL_SESSIONS_REQUIRE_INTEGRATIONS") == "1"
EXTRA = "test-integrations"


def require(*modules: str) -> None:
    """Import each of ``modules``; if any is missing, skip the calling test or module
    (fail it when ``JSONL_SESSIONS_REQUIRE_INTEGRATIONS=1``)."""
    __tracebackhide__ = True  # report the skip or failure at the caller's line, not here
    missing = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if not missing:
        return
    reason = f"needs {', '.join(missing)}: pip install '.[{EXTRA}]'"
    if REQUIRE:
        pytest.fail(f"an SDK is required (JSONL_SESSIONS_REQUIRE_INTEGRATIONS=1) but this test {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)
