"""``python -m benchmarks``: run the benchmarks (see benchmarks/README.md)."""

from __future__ import annotations

from benchmarks.run import main

raise SystemExit(main())
