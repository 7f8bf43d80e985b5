"""The ``jsonl-sessions`` command (also ``python -m jsonl_sessions``): look inside a store.

:func:`main` runs a command line and returns its exit status; :mod:`.entry` describes the
exit statuses and the error contract, :mod:`.parser` every command and option.
"""

from __future__ import annotations

from ..location import default_root, resolve_root
from .entry import main
from .parser import COMMANDS, build_parser

__all__ = ["COMMANDS", "build_parser", "default_root", "main", "resolve_root"]
