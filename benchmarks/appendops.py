"""The timed calls every append benchmark shares, built once: ``benchmarks.run`` (the full
run) and ``benchmarks.appendpath`` (one append taken apart) time the same floor, bare
Python, store and sqlite3 appends, with the same labels.

Each call appends message ``pool[i % len(pool)]`` (``i``: the call's index). Measurement
aids, never used by the package."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from benchmarks.bare import BareAppend
from benchmarks.measure import Row
from benchmarks.workload import SqlitePeer, encoded_lines, open_append
from jsonl_sessions import SessionStore

Op = Callable[[int], object]
KEY = "bench"


def append_ops(d: str, mode: str, pool: list[dict[str, Any]], closers: list[Callable[[], object]],
               baseline: Any = None) -> tuple[dict[str, Op], SessionStore]:
    """The shared appends of ``mode`` (``"flush"`` / ``"fsync"``), each writing its files in
    directory ``d``: ``floor`` (``os.write`` of the encoded line on a descriptor kept
    open, + ``os.fsync``), ``bare`` (:class:`~benchmarks.bare.BareAppend`: the same system
    calls and checks as the store, one function), ``jsonl_sessions`` (``store.append``),
    ``sqlite_intpk`` (WAL, autocommit ``INSERT`` into an ``INTEGER PRIMARY KEY`` table,
    ``NORMAL`` / ``FULL``) and, with ``baseline`` (an older package, ``benchmarks.baseline``),
    ``baseline``. Closers of what stays open go to ``closers``; the store is returned too."""
    flush = mode == "flush"
    size = len(pool)
    lines = encoded_lines(pool)
    store = SessionStore(os.path.join(d, "store"), durability=mode)  # type: ignore[arg-type]
    os.makedirs(os.path.join(d, "bare"))
    bare = BareAppend(os.path.join(d, "bare"), durable=not flush)
    closers.append(bare.close)
    fd = open_append(os.path.join(d, "floor.jsonl"))
    closers.append(lambda: os.close(fd))
    peer = SqlitePeer(os.path.join(d, "intpk.sqlite"), "NORMAL" if flush else "FULL", schema="intpk")
    closers.append(peer.close)
    write, fsync = os.write, os.fsync

    if flush:
        def floor(i: int) -> None:
            write(fd, lines[i % size])
    else:
        def floor(i: int) -> None:
            write(fd, lines[i % size])
            fsync(fd)

    append, bare_append, intpk = store.append, bare.append, peer.append_intpk
    ops: dict[str, Op] = {
        "floor": floor,
        "bare": lambda i: bare_append(pool[i % size]),
        "jsonl_sessions": lambda i: append(KEY, pool[i % size]),
        "sqlite_intpk": lambda i: intpk(KEY, pool[i % size]),
    }
    if baseline is not None:
        old = baseline.SessionStore(os.path.join(d, "baseline"), durability=mode).append
        ops["baseline"] = lambda i: old(KEY, pool[i % size])
    return ops, store


def append_rows(mode: str, samples: dict[str, list[int]], baseline_label: str | None = None) -> list[Row]:
    """The rows of :func:`append_ops`' samples (``baseline_label``: the baseline's row label,
    when it was timed)."""
    flush = mode == "flush"
    sync = "NORMAL" if flush else "FULL"
    rows = [
        Row("floor", "floor: os.write of the encoded line, O_APPEND" + ("" if flush else " + fsync"), samples["floor"]),
        Row("bare", "bare Python: the same system calls and checks, one function", samples["bare"]),
        Row("jsonl_sessions", f'jsonl_sessions append, durability="{mode}"', samples["jsonl_sessions"]),
        Row("sqlite_intpk", f"sqlite3 WAL sync={sync} autocommit INSERT, INTEGER PRIMARY KEY + record",
            samples["sqlite_intpk"]),
    ]
    if baseline_label is not None:
        rows.append(Row("baseline", baseline_label, samples["baseline"]))
    return rows
