"""The code of docs/testing.md, run as the page shows it: every ```python block in order,
in one namespace (so the gallery's file-store bugs are planted in the page's own store)."""

from __future__ import annotations

import pathlib
import re
from typing import Any

TESTING_DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def python_blocks(path: pathlib.Path = TESTING_DOC) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)


def run_blocks(upto: int | None = None) -> dict[str, Any]:
    """Run the page's blocks (the first ``upto`` of them); the namespace they leave."""
    namespace: dict[str, Any] = {"__name__": "testing_doc"}
    for block in python_blocks()[:upto]:
        exec(compile(block, str(TESTING_DOC), "exec"), namespace)  # noqa: S102 - running the page is the point
    return namespace
