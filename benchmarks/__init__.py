"""Benchmarks of jsonl_sessions against raw-syscall floors and stdlib sqlite3, measured in
one run. ``python -m benchmarks --help``; see benchmarks/README.md. Never a CI gate."""
