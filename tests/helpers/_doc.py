"""The code of docs/testing.md, run as the page shows it: every ```python block in order,
in one namespace (so the gallery's file-store bugs are planted in the page's own store)."""

from __future__ import annotations

import ast
import pathlib
import re
from typing import Any

TESTING_DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def python_blocks(path: pathlib.Path = TESTING_DOC) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)


def _defines_only(block: str) -> bool:
    return all(isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef))
               for node in ast.parse(block).body)


def run_blocks(*, definitions_only: bool = False) -> dict[str, Any]:
    """Run the page's blocks in order (with ``definitions_only``: only those made of
    imports, functions and classes, so nothing is checked); the namespace they leave."""
    namespace: dict[str, Any] = {"__name__": "testing_doc"}
    for block in python_blocks():
        if not definitions_only or _defines_only(block):
            exec(compile(block, str(TESTING_DOC), "exec"), namespace)  # noqa: S102 - running the page is the point
    return namespace
