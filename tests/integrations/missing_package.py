"""The one check every adapter's tests make of its packaging: with its framework hidden,
importing the adapter raises one ImportError naming the extra to install; with the
framework back, the adapter imports again as the same module."""

from __future__ import annotations

import importlib
import re
import sys
import types

import pytest


def assert_missing_framework_error(monkeypatch: pytest.MonkeyPatch, package: str, adapter: types.ModuleType,
                                   extra: str) -> None:
    """Hide ``package`` (and its submodules), import ``adapter`` afresh and expect
    ``pip install 'jsonl-sessions[extra]'`` in the error."""
    for name in list(sys.modules):
        if name == package or name.startswith(package + "."):
            monkeypatch.setitem(sys.modules, name, None)  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, package, None)  # type: ignore[arg-type]
    monkeypatch.delitem(sys.modules, adapter.__name__)
    with pytest.raises(ImportError, match=re.escape(f"pip install 'jsonl-sessions[{extra}]'")):
        importlib.import_module(adapter.__name__)
    monkeypatch.undo()
    assert importlib.import_module(adapter.__name__) is adapter
