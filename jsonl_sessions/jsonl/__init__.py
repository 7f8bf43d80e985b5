"""The JSONL backend: each session a transcript file plus a sidecar, in one directory."""
