"""Simulated power loss: which states can a crash of the machine leave on disk?

:func:`check_power_loss` runs a workload (a list of mutations) on a real store while
recording, through the one platform seam (:mod:`jsonl_sessions._platform`), every call
that changes the store's directory: file writes (``write`` at the descriptor's position,
``pwrite``), ``truncate``, ``fsync``, directory ``fsync_dir``, file creation
(``open_file`` of a new name), ``replace`` (rename) and ``unlink``. From that log it
rebuilds the states a power loss could leave at every point of the workload, recovers
each one the way a restarted program would (a fresh store from ``factory`` plus one
guarded operation per session: ``remove_last`` with an id no message has), and checks
what the fresh store sees:

- a crash during mutation *j* must show the state after the last acknowledged mutation,
  or that plus mutation *j* (the one in flight); a crash between mutations exactly the
  acknowledged state: **no acknowledged write is lost, nothing is half-applied**;
- or a :class:`~jsonl_sessions.CorruptTranscriptError` that is *precise* and *deserved*:
  its line and offset name a complete line of the file, and that line holds bytes the
  store never wrote there (damage the simulated crash did, other than a torn tail). A
  complete line the store wrote itself must never be reported corrupt, and a torn tail
  never raises.

**The model (what is simulated).** Files are identified by inode (a new file gets a new
identity, so inode reuse does not confuse it). A file's data ops (writes, truncates)
are durable once an ``fsync`` of that file follows them; the directory's ops (create,
rename, unlink) once an ``fsync_dir`` of the store's root follows them (strict POSIX: an
``fsync`` of a new file does not make its name durable; ext4 often would). At a crash
point, everything durable is kept and the pending ops vary:

- all of them happened (as after a process crash), or none did;
- the data of every file happened but no directory op, or the reverse;
- the directory ops happened in order up to some point (metadata is journaled in
  order), the data all or none;
- one file's pending data was lost while the others' was not;
- one pending write of more than :data:`~.crashstates.ATOMIC_WRITE_BYTES` (64) was *torn*: cut half-way or
  just before its final byte (finer than the sectors a disk really tears at), the rest
  missing (short file), zero-filled (the size grew, the data did not arrive) or garbage
  (random bytes without a newline); the writes after it in that file lost;
- *reordered*: one pending op of a file was lost while the later ones of the same file
  arrived (a dropped write under a later one leaves zeros or the old bytes).

**Not simulated.** Tearing of small writes (up to 64 bytes: sector-atomic), reordering
or tearing *inside* one write other than at its tail (a lost page in the middle),
directory ops lost out of order, a disk lying about a completed fsync, corruption of
data that was durable, anything outside the store's root directory (the root itself is
assumed durable), other processes, crash states combining several of the variations
above (e.g. one file torn *and* the directory ops lost). Rebuilt files are new files, so a cache keyed by inode / mtime (the store's
message-count cache) is never trusted after a simulated crash: its validation is not
exercised here. POSIX only (uses ``fcntl``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..errors import CorruptTranscriptError
from .crashstates import Op, Recorder, Step, Timeline, everything

NO_SUCH_ID = "0" * 26


# -- checking -------------------------------------------------------------------------
Observer = Callable[[Any], Hashable]


def exact_observer(*keys: str) -> Observer:
    """What a fresh store shows of sessions ``keys``, ids and times included: existence,
    every message (strict ``try_load``), breadcrumb, metadata (not activity time or size)."""

    def observe(store: Any) -> Hashable:
        out = []
        for key in keys:
            md = store.get_session_metadata(key)
            meta = None if md is None else (md.name, md.agent_alias, md.principal_id, md.state, md.turn_id,
                                            md.trim_breadcrumb, tuple(sorted(md.context.items())), md.parent,
                                            md.fork_point, md.message_count, md.created_at)
            out.append((key, store.session_exists(key),
                        tuple(orjson.dumps(m.to_dict()) for m in store.try_load(key)),
                        store.get_session_trim_breadcrumb(key), meta))
        return tuple(out)

    return observe


@dataclass
class PowerLossReport:
    """What :func:`check_power_loss` checked."""

    ops: int = 0  #: recorded calls (crash points: ops + 1)
    crash_points: int = 0
    states_generated: int = 0  #: crash states built (before removing duplicates)
    states_checked: int = 0  #: distinct crash states recovered and checked
    outcomes: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    def add(self, other: PowerLossReport) -> None:
        self.ops += other.ops
        self.crash_points += other.crash_points
        self.states_generated += other.states_generated
        self.states_checked += other.states_checked
        self.outcomes.update(other.outcomes)
        self.violations += other.violations


def check_power_loss(
    factory: Callable[[str], Any],
    keys: Sequence[str],
    steps: Sequence[Step],
    *,
    setup: Callable[[Any], None] | None = None,
    observe: Observer | None = None,
    base: str | None = None,
    raise_on_violation: bool = True,
) -> PowerLossReport:
    """Run ``steps`` (mutations: ``fn(store)`` or ``(label, fn)``) on ``factory(root)``
    after ``setup``, recording them; then check every simulated crash state (see the
    module docstring). ``keys``: the sessions to recover and observe. ``observe``
    (default :func:`exact_observer` of ``keys``) views a state. Returns the counts; raises
    AssertionError listing the first violations unless ``raise_on_violation`` is False.

    A crash *moment* is a point of the log plus what had been acknowledged then: after a
    mutation's last recorded call there are two (it may or may not have returned)."""
    view = observe or exact_observer(*keys)
    work = tempfile.mkdtemp(prefix="jsonl-powerloss-", dir=base)
    report = PowerLossReport()
    try:
        root = os.path.join(work, "root")
        rec, labels, states = _record(factory, root, steps, setup, view)
        timeline = Timeline(rec)
        ops = rec.ops
        report.ops = len(ops)
        recovered: dict[bytes, _Recovered] = {}
        for k in range(len(ops) + 1):
            report.crash_points += 1
            intended = timeline.build(k, everything, None)
            for variant, choice, prefix in timeline.variants(k):
                files = timeline.build(k, choice, prefix)
                report.states_generated += 1
                digest = _digest(files)
                if digest not in recovered:
                    recovered[digest] = _recover(factory, keys, view, files, work, len(recovered))
                    report.states_checked += 1
                for acked, in_flight in _moments(ops, k, len(steps)):
                    allowed = {states[acked]: "the acknowledged state"}
                    if in_flight:
                        allowed.setdefault(states[in_flight], "the acknowledged state plus the in-flight mutation")
                    outcome = recovered[digest].judge(allowed, intended)
                    if outcome.startswith("VIOLATION"):
                        when = (f"during {labels[in_flight]!r}" if in_flight else f"after {labels[acked]!r}")
                        last = _describe(ops[k - 1]) if k else "nothing"
                        report.violations.append(f"crash after call {k}/{len(ops)} ({last}), {when}; "
                                                 f"{variant}: {outcome[11:]}")
                    else:
                        report.outcomes[outcome] += 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if raise_on_violation and report.violations:
        shown = "\n\n".join(report.violations[:5])
        raise AssertionError(f"{len(report.violations)} simulated power losses (of {report.states_checked} distinct "
                             f"crash states) break the guarantees; the first ones:\n\n{shown}")
    return report


def _record(factory: Callable[[str], Any], root: str, steps: Sequence[Step], setup: Callable[[Any], None] | None,
            view: Observer) -> tuple[Recorder, list[str], list[Hashable]]:
    """Run the workload on ``factory(root)`` while recording; the recorder, each step's
    label (index 0: the start) and the state a fresh store sees after it."""
    store = factory(root)
    if setup is not None:
        setup(store)
    labels = ["the start"]
    states = [view(factory(root))]
    with Recorder(root) as rec:
        for n, step in enumerate(steps, 1):
            label, fn = step if isinstance(step, tuple) else (getattr(step, "__name__", f"step {n}"), step)
            rec.step = n
            fn(store)
            rec.step, rec.acked = 0, n
            labels.append(label)
            states.append(view(factory(root)))
    return rec, labels, states


def _moments(ops: list[Op], k: int, steps: int) -> list[tuple[int, int]]:
    """``(acknowledged mutations, mutation in flight or 0)`` for a crash after ``k`` calls."""
    if k == 0:
        out = [(0, 0)]
    else:
        op = ops[k - 1]
        if op.step:
            out = [(op.step - 1, op.step)]
            if k == len(ops) or ops[k].step != op.step:
                out.append((op.step, 0))  # it returned before the next call
        else:
            out = [(op.acked, 0)]
    if k == len(ops) and (steps, 0) not in out:
        out.append((steps, 0))
    return out


@dataclass
class _Recovered:
    """What a fresh store made of one crash state: a state, or an error (with the bytes of
    the file it named, to judge a CorruptTranscriptError)."""

    state: Hashable = None
    error: BaseException | None = None
    named: bytes | None = None

    def judge(self, allowed: dict[Hashable, str], intended: dict[str, bytes]) -> str:
        if self.error is None:
            if self.state in allowed:
                return allowed[self.state]
            return ("VIOLATION: a fresh store sees a state that is neither the acknowledged one nor that plus the "
                    f"in-flight mutation:\n  seen    {self.state}\n  allowed " + "\n          ".join(map(str, allowed)))
        if isinstance(self.error, CorruptTranscriptError):
            return _judge_corruption(self.error, self.named, intended)
        return f"VIOLATION: recovery failed: {self.error!r}"


def _digest(files: dict[str, bytes]) -> bytes:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode("utf-8") + b"\0" + len(files[name]).to_bytes(8, "little") + files[name])
    return h.digest()


def _describe(op: Op) -> str:
    if op.kind == "rename":
        return f"rename {op.name} -> {op.dst}"
    if op.kind in ("create", "unlink"):
        return f"{op.kind} {op.name}"
    if op.kind == "write":
        return f"write of {len(op.data)} bytes at {op.offset} to file {op.file}"
    if op.kind == "truncate":
        return f"truncate of file {op.file} to {op.offset}"
    return f"{op.kind} {op.file if op.file >= 0 else 'of the root'}"


def _recover(factory: Callable[[str], Any], keys: Sequence[str], view: Observer, files: dict[str, bytes],
             work: str, n: int) -> _Recovered:
    """Rebuild ``files`` in a new directory, open a fresh store on it, take each session's
    guard once (recovery), observe."""
    crash = os.path.join(work, f"crash-{n}")
    os.mkdir(crash, 0o700)
    try:
        for name, data in files.items():
            fd = os.open(os.path.join(crash, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        try:
            store = factory(crash)
            for key in keys:
                store.remove_last(key, expected_id=NO_SUCH_ID)  # one guarded op: recovery runs
            return _Recovered(state=view(store))
        except CorruptTranscriptError as exc:
            named = None
            try:
                with open(os.path.join(crash, os.path.basename(exc.path or "")), "rb") as f:
                    named = f.read()
            except OSError:
                pass
            return _Recovered(error=exc, named=named)
        except Exception as exc:  # noqa: BLE001 - any other failure breaks the guarantees
            return _Recovered(error=exc)
    finally:
        shutil.rmtree(crash, ignore_errors=True)


def _judge_corruption(exc: CorruptTranscriptError, data: bytes | None, intended: dict[str, bytes]) -> str:
    """A CorruptTranscriptError is deserved when it names a complete line (line number and
    offset consistent) holding bytes the store never wrote at that place."""
    if data is None:
        return f"VIOLATION: {exc} names a file that is not there"
    offset = exc.offset if isinstance(exc.offset, int) else -1
    if not 0 <= offset < len(data):
        return f"VIOLATION: {exc} names offset {offset}, outside the {len(data)}-byte file"
    end = data.find(b"\n", offset)
    if end == -1:
        return f"VIOLATION: {exc} reports a torn tail (no newline after offset {offset}) as corruption"
    if offset and data[offset - 1 : offset] != b"\n" and not (offset == 3 and data.startswith(b"\xef\xbb\xbf")):
        return f"VIOLATION: {exc} names offset {offset}, which is not the start of a line"
    line_number = data.count(b"\n", 0, offset) + 1
    if exc.line != line_number:
        return f"VIOLATION: {exc} names line {exc.line}, but offset {offset} starts line {line_number}"
    line = data[offset : end + 1]
    if any(content[offset : end + 1] == line for content in intended.values()):
        return f"VIOLATION: {exc} reports a line the store itself wrote there: {line[:200]!r}"
    return "a precise CorruptTranscriptError for a line the crash damaged"


__all__ = ["Op", "PowerLossReport", "check_power_loss", "exact_observer"]
