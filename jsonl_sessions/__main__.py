"""``python -m jsonl_sessions``: the command-line interface."""

from .cli import main

raise SystemExit(main())
