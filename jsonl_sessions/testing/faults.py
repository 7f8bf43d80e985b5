"""What goes wrong beneath a session store, made to happen on purpose: failing OS calls
and killed processes (:class:`FaultInjector`, :func:`fault_loop`, :func:`run_killed`),
another tool's damage to the files of the JSONL layout (:class:`JsonlFileDamage`), and
power loss (:func:`check_power_loss`). Everything acts through the store's one platform
seam or its files; nothing is mocked.

**Failing OS calls.** Every OS call :class:`~jsonl_sessions.SessionStore` makes goes
through a function of :mod:`jsonl_sessions._platform`, called as a module attribute. :class:`FaultInjector`
swaps those attributes for wrappers (no file-system mocks: the real calls still run),
so the Nth ``write`` / ``pwrite`` / ``fsync`` / ``fsync_dir`` / ``replace`` /
``truncate`` / ``unlink`` / ``open_file`` / ``lstat`` (which every existence check of
the store, ``_platform.exists``, makes) / ``scandir`` / ``listdir`` (or the Nth of any
of them) can

- raise ``OSError(errno)`` before doing anything (``EIO``, ``ENOSPC``, ``EDQUOT``...),
  once (transient) or from then on (``persistent``: the store's own clean-up and
  recovery fail too);
- with ``torn=True`` (``write`` / ``pwrite``), first write half of the bytes (a short
  write followed by an error, as on a full disk);
- or end the process right there (``action="exit"``: ``os._exit``, no clean-up runs;
  ``action="sigkill"``: SIGKILL to itself), for use in a child process.

:func:`fault_loop` is SQLite's I/O-error loop: it runs a mutation with the failure point
at call 1, 2, 3... until the mutation completes without meeting it, once per mode
(transient, persistent, and ``kill``: in a forked child killed at that call), and after
every failure checks that a store opened before the failure and a fresh one both see
exactly the old state or exactly the new one (the new one whenever the call returned),
that one guarded operation (recovery) changes nothing they saw, and that the session
then takes an append. Only the injected errors may surface (``OSError`` with the
injected errno, or a ``SessionStoreError``).

**Damage to JSONL files.** The storage capability for stores using the JSONL file
layout (docs/format.md): ``<root>/<stem>.jsonl`` transcripts, ``<stem>.meta.json``
sidecars, ``<stem>.lock`` control files and ``*.quarantine-*.jsonl.bak`` files kept by a
repair.

:class:`JsonlFileDamage` reaches under a store's API the way another tool (or a crash,
or time) would: read and append a transcript's bytes, set its files' modification times,
and check that the directory holds nothing but the store's own files. The contract mixin
uses :meth:`~JsonlFileDamage.raw`, :meth:`~JsonlFileDamage.append_raw` and
:meth:`~JsonlFileDamage.rewrite_raw` (its ``damage`` capability); the state machine uses
all of it (its ``storage`` capability).

**Power loss: which states can a crash of the machine leave on disk?**
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
- one pending write of more than :data:`ATOMIC_WRITE_BYTES` (64) was *torn*: cut
  half-way or just before its final byte (finer than the sectors a disk really tears at), the rest
  missing (short file), zero-filled (the size grew, the data did not arrive) or garbage
  (random bytes without a newline); the writes after it in that file lost;
- *reordered*: one pending op of a file was lost while the later ones of the same file
  arrived (a dropped write under a later one leaves zeros or the old bytes).

**Not simulated.** Tearing of small writes (up to 64 bytes: sector-atomic), reordering
or tearing *inside* one write other than at its tail (a lost page in the middle),
directory ops lost out of order, a disk lying about a completed fsync, corruption of
data that was durable, anything outside the store's root directory (the root itself is
assumed durable), other processes, crash states combining several of the variations
above (e.g. one file torn *and* the directory ops lost). Rebuilt files are new files, so
a cache keyed by inode / mtime (the store's message-count cache) is never trusted after
a simulated crash: its validation is not exercised here. POSIX only (uses ``fcntl``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import random
import shutil
import signal
import stat
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import orjson

from .. import _platform
from ..errors import CorruptTranscriptError, SessionStoreError
from ..jsonl.control import RECORD_OFFSET
from ..jsonl.layout import LOCK_SUFFIX as CONTROL
from ..jsonl.layout import QUARANTINE_MARK, QUARANTINE_SUFFIX
from ..jsonl.layout import SIDECAR_SUFFIX as SIDECAR
from ..jsonl.layout import TMP_SUFFIX as TEMP_SUFFIX
from ..jsonl.layout import TRANSCRIPT_SUFFIX as TRANSCRIPT
from ..keys import key_to_stem

if TYPE_CHECKING:
    from typing_extensions import Self

# == failing OS calls, killed processes =======================================================
#: The kinds of OS call that can be made to fail (``"open"`` is an alias of ``"open_file"``).
KINDS = ("write", "pwrite", "fsync", "fsync_dir", "replace", "truncate", "unlink", "open_file", "lstat", "scandir",
         "listdir")
TORN_KINDS = ("write", "pwrite")
#: The errors injected by default, in turn: I/O error, disk full, quota exceeded.
ERRNOS: tuple[int, ...] = (errno.EIO, errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
Action = Literal["raise", "exit", "sigkill"]
Match = Callable[[str, tuple[Any, ...]], bool]
Mode = Literal["transient", "persistent", "torn", "kill"]
#: ``os._exit`` status of a process ended by ``action="exit"``.
EXIT_STATUS = 86


@dataclass(frozen=True)
class Call:
    """One call seen by the injector: its kind, target (fd, path or (src, dst)), offset
    (pwrite), and whether it succeeded."""

    kind: str
    target: Any
    offset: int | None
    ok: bool


def _kinds(kind: str | Iterable[str]) -> frozenset[str]:
    names = [kind] if isinstance(kind, str) else list(kind)
    out: set[str] = set()
    for name in names:
        if name == "any":
            out.update(KINDS)
        elif name == "open":
            out.add("open_file")
        elif name in KINDS:
            out.add(name)
        else:
            raise ValueError(f"unknown kind {name!r}; choose from {KINDS} or 'any'")
    return frozenset(out)


class FaultInjector:
    """``with FaultInjector(kind, nth, ...)``: call number ``nth`` (1-based) of ``kind``
    (a kind of :data:`KINDS`, ``"open"``, ``"any"``, or several) fails.

    ``err``: the errno raised. ``persistent``: every later call of ``kind`` fails too.
    ``torn``: a failing ``write`` / ``pwrite`` first writes half its bytes. ``action``:
    ``"raise"`` (OSError), ``"exit"`` (``os._exit(EXIT_STATUS)``) or ``"sigkill"``.
    ``match(kind, args)``: only the calls it accepts count (e.g. writes of more than a few
    bytes, to tear data but not a control file's fixed fields).
    Every call of every kind is logged (:attr:`log`), so a test can tell what happened
    before the failure. Not re-entrant; swaps module attributes, so it affects every
    thread of the process while active."""

    def __init__(self, kind: str | Iterable[str] = "any", nth: int = 1, *, err: int = errno.EIO,
                 persistent: bool = False, torn: bool = False, action: Action = "raise",
                 match: Match | None = None) -> None:
        self.kinds = _kinds(kind)
        if nth < 1:
            raise ValueError("nth counts from 1")
        if torn and not self.kinds & set(TORN_KINDS):
            raise ValueError("torn failures exist only for write / pwrite")
        if action not in ("raise", "exit", "sigkill"):
            raise ValueError(f"unknown action {action!r}")
        self.nth = nth
        self.err = err
        self.persistent = persistent
        self.torn = torn
        self.action = action
        self.match = match
        self.calls = 0  #: calls of the chosen kinds so far
        self.injected = 0  #: failures injected so far
        self.log: list[Call] = []
        self._saved: dict[str, Callable[..., Any]] = {}

    def _should_fail(self) -> bool:
        self.calls += 1
        return self.calls == self.nth or (self.persistent and self.calls > self.nth)

    def _fail(self, kind: str, real: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.injected += 1
        if self.torn and kind in TORN_KINDS:
            data = args[1]
            real(args[0], data[: len(data) // 2], *args[2:])
        if self.action == "exit":
            os._exit(EXIT_STATUS)
        if self.action == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise OSError(self.err, f"{os.strerror(self.err)} (injected: {kind} call {self.calls})")

    def _wrap(self, kind: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any) -> Any:
            target: Any = (args[0], args[1]) if kind == "replace" else args[0]
            offset = args[2] if kind == "pwrite" else None
            if kind in self.kinds and (self.match is None or self.match(kind, args)) and self._should_fail():
                self.log.append(Call(kind, target, offset, False))
                self._fail(kind, real, args)
            try:
                result = real(*args)
            except BaseException:
                self.log.append(Call(kind, target, offset, False))
                raise
            self.log.append(Call(kind, result if kind == "open_file" else target, offset, True))
            return result

        return wrapper

    def __enter__(self) -> Self:
        if self._saved:
            raise RuntimeError("FaultInjector is not re-entrant")
        for kind in KINDS:
            real = getattr(_platform, kind)
            self._saved[kind] = real
            setattr(_platform, kind, self._wrap(kind, real))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for kind, real in self._saved.items():
            setattr(_platform, kind, real)
        self._saved.clear()

    def record_committed(self, lock_fd: int, durable: bool) -> bool:
        """Whether a roll-forward record was committed on ``lock_fd`` (a session's lock
        file) before the failure: written at its offset, cut to length and (``durable``)
        fsynced, all successfully and in that order."""
        steps = ["pwrite", "truncate"] + (["fsync"] if durable else [])
        log = self.log
        for i, call in enumerate(log):
            if call.kind == "pwrite" and call.target == lock_fd and call.offset == RECORD_OFFSET and call.ok:
                window = log[i : i + len(steps)]
                if [c.kind for c in window] == steps and all(c.ok and c.target == lock_fd for c in window):
                    return True
        return False


# -- the loop -------------------------------------------------------------------------
Observer = Callable[[Any], Hashable]


class SessionSeen(NamedTuple):
    """What :func:`observer` sees of one session (every field named, so a report of two
    states that differ says which field does)."""

    key: str
    exists: bool
    messages: str  #: repr of (role, kind, content, extra) per message
    metadata: MetadataSeen | None


class MetadataSeen(NamedTuple):
    """The metadata fields a view compares. The id- and time-agnostic view (:func:`observer`)
    leaves ``fork_point`` and ``created_at`` None; :func:`exact_observer` fills them."""

    name: str | None
    agent_alias: str | None
    principal_id: str | None
    state: str | None
    turn_id: str | None
    trim_breadcrumb: bool | None
    context: tuple[tuple[str, str], ...]
    parent: str | None
    message_count: int
    fork_point: str | None = None
    created_at: Any = None

    @classmethod
    def of(cls, md: Any, *, exact: bool) -> MetadataSeen | None:
        """The view of ``md`` (a :class:`SessionMetadata` or None); ``exact``: with the
        fork point's id and the creation time."""
        if md is None:
            return None
        return cls(md.name, md.agent_alias, md.principal_id, md.state, md.turn_id, md.trim_breadcrumb,
                   tuple(sorted(md.context.items())), md.parent, md.message_count,
                   md.fork_point if exact else None, md.created_at if exact else None)


class ExactSessionSeen(NamedTuple):
    """What :func:`exact_observer` sees of one session: messages as stored, ids and times too."""

    key: str
    exists: bool
    messages: tuple[bytes, ...]  #: each message's JSON
    trim_breadcrumb: bool | None
    metadata: MetadataSeen | None


def observer(*keys: str, check_ids: bool = True) -> Observer:
    """An id-agnostic view of sessions ``keys`` (so the state of two runs of the same
    mutation compares equal): existence, every message's role, kind, content and extras
    (strict ``try_load``: corruption raises), metadata (names, attribution, owner, run
    state, context, breadcrumb, fork parent, count), as :class:`SessionSeen` tuples.
    ``check_ids``: also check that ids strictly increase (off for a state holding a
    duplicated line on purpose: that state is read with the lenient ``load``, as strict
    reads refuse a repeated id)."""

    def observe(store: Any) -> Hashable:
        out = []
        for key in keys:
            messages = store.try_load(key) if check_ids else store.load(key)
            ids = [m.id for m in messages]
            assert not check_ids or ids == sorted(set(ids)), f"{key!r}: ids do not strictly increase: {ids}"
            md = store.get_session_metadata(key)
            out.append(SessionSeen(key, store.session_exists(key),
                                   repr([(m.role, m.kind, m.content, m.extra) for m in messages]),
                                   MetadataSeen.of(md, exact=False)))
        return tuple(out)

    return observe


@dataclass
class FaultLoopReport:
    """What :func:`fault_loop` did."""

    runs: int = 0  #: mutation runs that met an injected fault (each one checked)
    injected: int = 0  #: I/O errors injected (persistent mode injects several per run)
    kills: int = 0  #: child processes killed at the failure point
    outcomes: Counter[str] = field(default_factory=Counter)  #: "old" / "new" states seen after a failure
    completed_at: dict[str, int] = field(default_factory=dict)  #: mode -> first n the mutation got past

    def add(self, other: FaultLoopReport) -> None:
        self.runs += other.runs
        self.injected += other.injected
        self.kills += other.kills
        self.outcomes.update(other.outcomes)


NO_SUCH_ID = "0" * 26


def fault_loop(
    factory: Callable[[str], Any],
    setup: Callable[[Any], None],
    mutation: Callable[[Any], Any],
    *,
    key: str,
    observe: Observer | None = None,
    kinds: str | Iterable[str] = "any",
    modes: Iterable[Mode] = ("transient", "persistent"),
    errnos: tuple[int, ...] = ERRNOS,
    rolled_back: bool = False,
    check_dir: Callable[[str], None] | None = None,
    match: Match | None = None,
    max_n: int = 2000,
    base: str | None = None,
) -> FaultLoopReport:
    """Run ``mutation(store)`` with call n of ``kinds`` failing, for n = 1, 2, ... until it
    completes without meeting the fault, in each of ``modes``; check every outcome.

    ``factory(path)`` builds a store on a directory (called for the store under test, for
    an observer opened before the failure, and for fresh stores after it); ``setup(store)``
    makes the "old" state; ``key`` is the session to recover and probe; ``observe``
    (default :func:`observer` of ``key``) views a state; ``rolled_back``: a failed call must
    leave the old state (appends; not required in ``persistent`` mode, where the calls a
    rollback needs fail too); ``check_dir(path)``: extra checks once recovered (e.g.
    no temp file left); ``match``: which calls count (see :class:`FaultInjector`). Errors
    cycle through ``errnos``. Raises AssertionError naming the
    mutation step, the mode and the errno on the first violation."""
    view = observe or observer(key)
    work = tempfile.mkdtemp(prefix="jsonl-faults-", dir=base)
    report = FaultLoopReport()
    try:
        clean = os.path.join(work, "clean")
        store = factory(clean)
        setup(store)
        old = view(factory(clean))
        mutation(store)
        new = view(factory(clean))
        for mode in modes:
            for n in range(1, max_n + 1):
                path = os.path.join(work, f"{mode}-{n}")
                err = errnos[n % len(errnos)]
                if mode == "kill":
                    met = _kill_case(factory, setup, mutation, path, kinds, n, old, new, view, key, check_dir, match,
                                     report)
                else:
                    met = _error_case(factory, setup, mutation, path, kinds, n, err, mode, old, new, view, key,
                                      rolled_back, check_dir, match, report)
                shutil.rmtree(path, ignore_errors=True)
                if not met:
                    report.completed_at[mode] = n
                    break
            else:
                raise AssertionError(f"{mode}: the mutation still met a fault after {max_n} calls")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report


def _error_case(factory: Callable[[str], Any], setup: Callable[[Any], None], mutation: Callable[[Any], Any],
                path: str, kinds: str | Iterable[str], n: int, err: int, mode: str, old: Hashable, new: Hashable,
                view: Observer, key: str, rolled_back: bool, check_dir: Callable[[str], None] | None,
                match: Match | None, report: FaultLoopReport) -> bool:
    context = f"call {n} of {kinds!r} fails ({mode}, errno {errno.errorcode.get(err, err)})"
    store = factory(path)
    setup(store)
    before_fault = factory(path)  # a long-running reader, opened before the failure
    raised: BaseException | None = None
    with FaultInjector(kinds, n, err=err, persistent=mode == "persistent", torn=mode == "torn",
                       match=match) as injector:
        try:
            mutation(store)
        except Exception as exc:  # noqa: BLE001 - judged below
            raised = exc
    if injector.injected == 0:
        if raised is not None:
            raise AssertionError(f"{context}: the mutation failed without an injected fault: {raised!r}") from raised
        assert view(factory(path)) == new, f"{context}: completed, but a fresh store does not see the new state"
        return False
    report.runs += 1
    report.injected += injector.injected
    if raised is not None:
        if not isinstance(raised, (OSError, SessionStoreError)):
            raise AssertionError(f"{context}: surfaced {raised!r}, not an I/O or store error") from raised
        if isinstance(raised, OSError) and not isinstance(raised, SessionStoreError) and raised.errno != err:
            raise AssertionError(f"{context}: surfaced {raised!r}, not the injected error") from raised
    seen_before = view(before_fault)
    fresh = factory(path)
    first = view(fresh)
    assert first == seen_before, (f"{context}: a store opened before the failure sees\n{_short(seen_before)}\n"
                                  f"a fresh one\n{_short(first)}")
    if raised is None:
        assert first == new, f"{context}: the call returned, yet a fresh store sees\n{_short(first)}\nnot\n{_short(new)}"
    elif rolled_back and mode != "persistent":
        assert first == old, (f"{context}: the call failed and must have been rolled back, yet a fresh store "
                              f"sees\n{_short(first)}")
    else:
        assert first in (old, new), (f"{context}: a fresh store sees\n{_short(first)}\nneither the old\n{_short(old)}"
                                     f"\nnor the new\n{_short(new)}")
    report.outcomes["new" if first == new else "old"] += 1
    _recover_and_probe(fresh, factory, path, key, view, first, context, check_dir)
    return True


def _recover_and_probe(fresh: Any, factory: Callable[[str], Any], path: str, key: str, view: Observer,
                       first: Hashable, context: str, check_dir: Callable[[str], None] | None) -> None:
    # One guarded operation that changes nothing (the id matches no message): it takes
    # the session's guard, so whatever recovery the backend does happens now.
    fresh.remove_last(key, expected_id=NO_SUCH_ID)
    assert view(fresh) == first, f"{context}: recovery changed what a fresh store had already seen"
    if check_dir is not None:
        check_dir(path)
    # (lenient reads: the state may hold a repeated line on purpose, which strict reads refuse;
    # ``view`` has already read it as the caller chose)
    count = len(fresh.load(key))
    probe = fresh.append(key, {"role": "user", "content": "probe after the fault"})
    got = factory(path).load(key)
    assert len(got) == count + 1 and got[-1].id == probe, f"{context}: the next append did not land cleanly"


def _kill_case(factory: Callable[[str], Any], setup: Callable[[Any], None], mutation: Callable[[Any], Any],
               path: str, kinds: str | Iterable[str], n: int, old: Hashable, new: Hashable, view: Observer,
               key: str, check_dir: Callable[[str], None] | None, match: Match | None,
               report: FaultLoopReport) -> bool:
    context = f"SIGKILL at call {n} of {kinds!r}"
    setup(factory(path))
    status = run_killed(lambda: mutation(factory(path)), kinds, n, match=match)
    if status == 0:
        assert view(factory(path)) == new, f"{context}: completed, but a fresh store does not see the new state"
        return False
    assert status == -signal.SIGKILL, f"{context}: the child ended with status {status}, not by the SIGKILL"
    report.runs += 1
    report.kills += 1
    fresh = factory(path)
    first = view(fresh)
    assert first in (old, new), (f"{context}: a fresh store sees\n{_short(first)}\nneither the old\n{_short(old)}"
                                 f"\nnor the new\n{_short(new)}")
    report.outcomes["new" if first == new else "old"] += 1
    _recover_and_probe(fresh, factory, path, key, view, first, context, check_dir)
    return True


def _short(state: Hashable, limit: int = 800) -> str:
    text = repr(state)
    return text if len(text) <= limit else text[: limit // 2] + " ... " + text[-limit // 2 :]


def run_killed(body: Callable[[], Any], kinds: str | Iterable[str], n: int, *, match: Match | None = None) -> int:
    """Run ``body()`` in a forked child with call ``n`` of ``kinds`` killing it (SIGKILL).
    Returns 0 when the body completed without reaching the call, 1 when it raised, else
    minus the signal that ended the child (``-signal.SIGKILL``). POSIX only."""
    if not hasattr(os, "fork"):  # pragma: no cover - Windows
        raise RuntimeError("run_killed needs os.fork")
    sys.stdout.flush()
    sys.stderr.flush()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads (Python 3.12+)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; its coverage is not collected
        code = 0
        try:
            with FaultInjector(kinds, n, action="sigkill", match=match):
                body()
        except BaseException:  # noqa: BLE001 - reported through the exit status
            code = 1
        finally:
            os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def no_temp_files(path: str) -> None:
    """``check_dir`` for the JSONL layout: no temp file left behind."""
    with contextlib.suppress(FileNotFoundError):
        left = sorted(name for name in os.listdir(path) if name.endswith(".tmp"))
        assert not left, f"temp files left behind: {left}"


# == damage to JSONL files ====================================================================
class JsonlFileDamage:
    """The ``damage`` / ``storage`` capability of a store with a ``root`` directory in the
    JSONL file layout and a ``lock(key)`` guard."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def path(self, key: str, suffix: str = TRANSCRIPT) -> str:
        return os.path.join(self.store.root, key_to_stem(key) + suffix)

    def raw(self, key: str) -> bytes:
        """The transcript's bytes."""
        with open(self.path(key), "rb") as f:
            return f.read()

    def append_raw(self, key: str, data: bytes) -> None:
        """Append bytes to the transcript under the session's guard, as a polite other tool would."""
        with self.store.lock(key), open(self.path(key), "ab") as f:
            f.write(data)

    def rewrite_raw(self, key: str, data: bytes) -> None:
        """Replace the transcript's bytes in place (same file), as a tool editing its lines would."""
        with self.store.lock(key), open(self.path(key), "r+b") as f:
            f.write(data)
            f.truncate()

    def _files(self, key: str) -> list[str]:
        return [p for p in (self.path(key), self.path(key, SIDECAR)) if os.path.exists(p)]

    def age(self, key: str, ns: int) -> None:
        """Set the modification time of the session's transcript and sidecar to ``ns``."""
        for p in self._files(key):
            os.utime(p, ns=(ns, ns))

    def changed_at(self, key: str) -> int:
        """The newest modification time (ns) of transcript and sidecar: the session's activity."""
        return max(os.stat(p).st_mtime_ns for p in self._files(key))

    def size(self, key: str) -> int:
        """The transcript's length in bytes (a torn tail included)."""
        return os.path.getsize(self.path(key))

    def check_layout(self) -> int:
        """Assert that ``root`` holds only regular files of the layout (no temp file, no
        symlink, no sidecar without its transcript) and that its parent directory holds
        nothing but ``root`` (the state machine gives each store a directory of its own);
        the number of quarantine files of repairs. A torn tail a write cut is saved to a
        quarantine file too; such a file holds no newline (a repair's copy holds the
        complete line it dropped), and is not counted."""
        root = str(self.store.root)
        parent = os.path.dirname(os.path.abspath(root))
        assert os.listdir(parent) == [os.path.basename(root)], f"files beside the store: {os.listdir(parent)}"
        quarantined = 0
        for name in os.listdir(root):
            assert stat.S_ISREG(os.lstat(os.path.join(root, name)).st_mode), f"not a regular file: {name}"
            assert not name.endswith(TEMP_SUFFIX), f"temp file left behind: {name}"
            if QUARANTINE_MARK in name:
                assert name.endswith(QUARANTINE_SUFFIX), name
                with open(os.path.join(root, name), "rb") as f:
                    quarantined += b"\n" in f.read()
                continue
            assert name.endswith((TRANSCRIPT, SIDECAR, CONTROL)), f"not a store file: {name}"
            if name.endswith(SIDECAR):
                transcript = name[: -len(SIDECAR)] + TRANSCRIPT
                assert os.path.exists(os.path.join(root, transcript)), f"orphan sidecar {name}"
        return quarantined


# == power loss: recording the writes, rebuilding crash states ================================
# The recording and rebuilding half of the power-loss simulator
# (:func:`check_power_loss`): :class:`Recorder` logs, through the
# platform seam, every call that changes files under a store's root; :class:`Timeline`
# rebuilds from that log the file-system states a power loss could leave at each point
# (see the module's documentation for the model of what is simulated).

#: Writes up to this size are never torn (a device writes a 512-byte sector whole; the
#: store's control-file fields are this small). Longer ones are torn at arbitrary bytes.
ATOMIC_WRITE_BYTES = 64
_DATA = ("write", "truncate")
_DIR = ("create", "rename", "unlink")
Step = Callable[[Any], Any] | tuple[str, Callable[[Any], Any]]


@dataclass(frozen=True)
class Op:
    """One recorded call. ``file``: the file's identity (data ops, fsync, create)."""

    index: int
    kind: str  # write, truncate, fsync, fsync_dir, create, rename, unlink
    file: int = -1
    offset: int = 0
    data: bytes = b""
    name: str = ""
    dst: str = ""
    step: int = 0  # 1-based mutation in flight, 0 = between mutations
    acked: int = 0  # mutations that had returned when the call was made


class Recorder:
    """Records the calls through the platform seam that change files under ``root``."""

    WRAPPED = ("open_file", "close", "write", "pwrite", "truncate", "fsync", "fsync_dir", "replace", "unlink")

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.base_names: dict[str, int] = {}
        self.base_content: dict[int, bytes] = {}
        self.by_inode: dict[tuple[int, int], int] = {}
        self.by_fd: dict[int, int] = {}
        self.ops: list[Op] = []
        self.step = 0
        self.acked = 0
        self._saved: dict[str, Callable[..., Any]] = {}
        for entry in os.scandir(self.root):
            if entry.is_file(follow_symlinks=False):
                st = entry.stat(follow_symlinks=False)
                file = self.by_inode.setdefault((st.st_dev, st.st_ino), len(self.by_inode))
                self.base_names[entry.name] = file
                with open(entry.path, "rb") as f:
                    self.base_content[file] = f.read()

    def _inside(self, path: str) -> bool:
        return os.path.dirname(os.path.abspath(path)) == self.root

    def _file_of_fd(self, fd: int) -> int | None:
        if fd in self.by_fd:
            return self.by_fd[fd]
        st = os.fstat(fd)
        return self.by_inode.get((st.st_dev, st.st_ino))

    def _log(self, kind: str, **fields: Any) -> None:
        self.ops.append(Op(len(self.ops), kind, step=self.step, acked=self.acked, **fields))

    def __enter__(self) -> Self:
        self._saved = {name: getattr(_platform, name) for name in self.WRAPPED}
        for name in self.WRAPPED:
            setattr(_platform, name, getattr(self, f"_{name}"))
        return self

    # -- the wrappers (each calls the real function it replaces) ------------------------
    def _open_file(self, path: str, flags: int, mode: int = 0o600) -> int:
        inside = self._inside(path)
        existed = inside and os.path.lexists(path)
        fd: int = self._saved["open_file"](path, flags, mode)
        if inside:
            st = os.fstat(fd)
            if existed:
                file = self.by_inode.get((st.st_dev, st.st_ino))
                if file is None:
                    raise AssertionError(f"{path} was created outside the platform seam while recording")
            else:
                file = len(self.base_content)
                self.base_content[file] = b""
                self.by_inode[(st.st_dev, st.st_ino)] = file
                self._log("create", file=file, name=os.path.basename(path))
            self.by_fd[fd] = file
            if flags & os.O_TRUNC and existed:
                self._log("truncate", file=file, offset=0)
        return fd

    def _close(self, fd: int) -> None:
        self.by_fd.pop(fd, None)
        self._saved["close"](fd)

    def _write(self, fd: int, data: bytes) -> None:
        file = self._file_of_fd(fd)
        if file is not None:
            appending = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND
            at = os.fstat(fd).st_size if appending else os.lseek(fd, 0, os.SEEK_CUR)
            self._log("write", file=file, offset=at, data=bytes(data))
        self._saved["write"](fd, data)

    def _pwrite(self, fd: int, data: bytes, offset: int) -> None:
        file = self._file_of_fd(fd)
        if file is not None:
            self._log("write", file=file, offset=offset, data=bytes(data))
        self._saved["pwrite"](fd, data, offset)

    def _truncate(self, fd: int, size: int) -> None:
        file = self._file_of_fd(fd)
        if file is not None:
            self._log("truncate", file=file, offset=size)
        self._saved["truncate"](fd, size)

    def _fsync(self, fd: int) -> None:
        self._saved["fsync"](fd)
        file = self._file_of_fd(fd)
        if file is not None:
            self._log("fsync", file=file)

    def _fsync_dir(self, path: str) -> None:
        self._saved["fsync_dir"](path)
        if os.path.abspath(path) == self.root:
            self._log("fsync_dir")

    def _replace(self, src: str, dst: str) -> None:
        self._saved["replace"](src, dst)
        if self._inside(src) and self._inside(dst):
            self._log("rename", name=os.path.basename(src), dst=os.path.basename(dst))

    def _unlink(self, path: str) -> None:
        self._saved["unlink"](path)
        if self._inside(path):
            self._log("unlink", name=os.path.basename(path))

    def __exit__(self, *exc: object) -> None:
        for name, fn in self._saved.items():
            setattr(_platform, name, fn)
        self._saved = {}


# -- rebuilding crash states ----------------------------------------------------------
Choice = Callable[[int, int], Any]  # (file, position among its pending ops) -> "apply" | "drop" | ("torn", cut, fill)


def _apply(content: bytearray, op: Op, how: Any, seed: int) -> None:
    if op.kind == "truncate":
        if how == "apply":
            if op.offset < len(content):
                del content[op.offset:]
            else:
                content.extend(bytes(op.offset - len(content)))
        return
    if how == "drop":
        return
    data = op.data
    if how != "apply":
        _torn, cut, fill = how
        if fill == "partial":
            data = data[:cut]
        elif fill == "zeros":
            data = data[:cut] + bytes(len(data) - cut)
        else:
            noise = random.Random(seed).randbytes(len(data) - cut).replace(b"\n", b"*")
            data = data[:cut] + noise
    end = op.offset + len(data)
    if op.offset > len(content):
        content.extend(bytes(op.offset - len(content)))
    content[op.offset:end] = data


class Timeline:
    """The recorded log, and the file system states it allows at each crash point."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.ops = rec.ops

    def split(self, k: int) -> tuple[dict[int, list[Op]], dict[int, list[Op]], list[Op], list[Op]]:
        """For a crash after the first ``k`` ops: per file its durable and pending data
        ops, and the durable and pending directory ops."""
        last_sync: dict[int, int] = {}
        last_dir = -1
        for op in self.ops[:k]:
            if op.kind == "fsync":
                last_sync[op.file] = op.index
            elif op.kind == "fsync_dir":
                last_dir = op.index
        durable: dict[int, list[Op]] = {}
        pending: dict[int, list[Op]] = {}
        dir_durable: list[Op] = []
        dir_pending: list[Op] = []
        for op in self.ops[:k]:
            if op.kind in _DATA:
                target = durable if op.index < last_sync.get(op.file, -1) else pending
                target.setdefault(op.file, []).append(op)
            elif op.kind in _DIR:
                (dir_durable if op.index < last_dir else dir_pending).append(op)
        return durable, pending, dir_durable, dir_pending

    def build(self, k: int, choice: Choice, dir_prefix: int | None) -> dict[str, bytes]:
        """The files (name -> bytes) after a crash at ``k``: durable ops kept, pending data
        ops as ``choice`` says, the first ``dir_prefix`` pending directory ops (None: all)."""
        durable, pending, dir_durable, dir_pending = self.split(k)
        names = dict(self.rec.base_names)
        for op in dir_durable + dir_pending[: len(dir_pending) if dir_prefix is None else dir_prefix]:
            if op.kind == "create":
                names[op.name] = op.file
            elif op.kind == "rename":
                if op.name in names:
                    names[op.dst] = names.pop(op.name)
            else:
                names.pop(op.name, None)
        out = {}
        for name, file in names.items():
            content = bytearray(self.rec.base_content[file])
            for op in durable.get(file, []):
                _apply(content, op, "apply", op.index)
            for position, op in enumerate(pending.get(file, [])):
                _apply(content, op, choice(file, position), op.index)
            out[name] = bytes(content)
        return out

    def variants(self, k: int) -> Iterator[tuple[str, Choice, int | None]]:
        """The crash states considered at point ``k`` (see the module docstring)."""
        _durable, pending, _dir_durable, dir_pending = self.split(k)
        yield "all pending ops arrived", everything, None
        yield "no pending op arrived", _nothing, 0
        if dir_pending:
            yield "file data arrived, no directory op", everything, 0
            yield "directory ops arrived, no file data", _nothing, None
            for m in range(1, len(dir_pending)):
                yield f"the first {m} pending directory ops arrived", everything, m
                yield f"the first {m} pending directory ops arrived, no file data", _nothing, m
        for file, ops in pending.items():
            yield f"file {file}: its pending data lost", _lost(file), None
            for position, op in enumerate(ops):
                if op.kind == "write" and len(op.data) > ATOMIC_WRITE_BYTES:
                    for cut in sorted({len(op.data) // 2, len(op.data) - 1}):
                        for fill in ("partial", "zeros", "garbage"):
                            label = f"file {file}: write of {len(op.data)} bytes at {op.offset} torn at +{cut} ({fill})"
                            yield label, _torn(file, position, cut, fill), None
                if len(ops) > 1:
                    yield (f"file {file}: pending op {position} lost, the later ones arrived",
                           _dropped(file, position), None)


def everything(_file: int, _position: int) -> Any:
    return "apply"


def _nothing(_file: int, _position: int) -> Any:
    return "drop"


def _lost(lost: int) -> Choice:
    def choice(file: int, _position: int) -> Any:
        return "drop" if file == lost else "apply"

    return choice


def _dropped(target: int, at: int) -> Choice:
    def choice(file: int, position: int) -> Any:
        return "drop" if (file, position) == (target, at) else "apply"

    return choice


def _torn(target: int, at: int, cut: int, fill: str) -> Choice:
    def choice(file: int, position: int) -> Any:
        if file != target or position < at:
            return "apply"
        return ("torn", cut, fill) if position == at else "drop"

    return choice


# == power loss: the check ====================================================================
def exact_observer(*keys: str) -> Observer:
    """What a fresh store shows of sessions ``keys``, ids and times included: existence,
    every message (strict ``try_load``), breadcrumb, metadata (not activity time or size),
    as :class:`ExactSessionSeen` tuples."""

    def observe(store: Any) -> Hashable:
        out = []
        for key in keys:
            md = store.get_session_metadata(key)
            out.append(ExactSessionSeen(key, store.session_exists(key),
                                        tuple(orjson.dumps(m.to_dict()) for m in store.try_load(key)),
                                        store.get_session_trim_breadcrumb(key), MetadataSeen.of(md, exact=True)))
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


__all__ = [
    "ATOMIC_WRITE_BYTES",
    "ERRNOS",
    "EXIT_STATUS",
    "KINDS",
    "TORN_KINDS",
    "Call",
    "ExactSessionSeen",
    "FaultInjector",
    "FaultLoopReport",
    "JsonlFileDamage",
    "MetadataSeen",
    "Op",
    "PowerLossReport",
    "Recorder",
    "SessionSeen",
    "Step",
    "Timeline",
    "check_power_loss",
    "everything",
    "exact_observer",
    "fault_loop",
    "no_temp_files",
    "observer",
    "run_killed",
]
