"""An older version of the package, importable next to this checkout's, for before/after
ratios measured in one run.

``load(rev, base)`` extracts ``jsonl_sessions/`` as it was at git revision ``rev`` into
``base`` under the package name ``jsonl_sessions_baseline`` and imports it. The package's
own imports are relative, so the copy is a separate package with its own guards and caches;
its sessions live in their own directories. Only the store is used
(``module.SessionStore``).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from types import ModuleType

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "jsonl_sessions_baseline"


def load(rev: str, base: str) -> ModuleType:
    """The package as it was at ``rev``, imported as :data:`NAME` from a copy in ``base``."""
    target = os.path.join(base, "baseline-src")
    os.makedirs(target)
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "jsonl_sessions"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", target], input=archive, check=True)
    os.rename(os.path.join(target, "jsonl_sessions"), os.path.join(target, NAME))
    sys.path.insert(0, target)
    try:
        return importlib.import_module(NAME)
    finally:
        sys.path.remove(target)
