"""How to install an optional extra, for the import guards of the modules that need one.

An extra is named in ``pyproject.toml`` (``[project.optional-dependencies]``). The hint
gives both ways to get it: from the package index, and from a checkout of the repository
(an editable install, which is how the package is used before it is published).
"""

from __future__ import annotations


def install_hint(extra: str) -> str:
    """``pip install 'jsonl-sessions[<extra>]'``, and the form for a checkout."""
    return f"pip install 'jsonl-sessions[{extra}]' (in a checkout of the repository: pip install -e '.[{extra}]')"


__all__ = ["install_hint"]
