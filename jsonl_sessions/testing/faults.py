"""Fault injection through the store's one platform seam, and the I/O-error loop.

Every OS call :class:`~jsonl_sessions.SessionStore` makes goes through a function of
:mod:`jsonl_sessions._platform`, called as a module attribute. :class:`FaultInjector`
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
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from .. import _platform
from ..errors import SessionStoreError
from ..jsonl.control import RECORD_OFFSET

if TYPE_CHECKING:
    from typing_extensions import Self

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


def observer(*keys: str, check_ids: bool = True) -> Observer:
    """An id-agnostic view of sessions ``keys`` (so the state of two runs of the same
    mutation compares equal): existence, every message's role, kind, content and extras
    (strict ``try_load``: corruption raises), metadata (names, attribution, owner, run
    state, context, breadcrumb, fork parent, count). ``check_ids``: also check that ids
    strictly increase (off for a state holding a duplicated line on purpose)."""

    def observe(store: Any) -> Hashable:
        out = []
        for key in keys:
            messages = store.try_load(key)
            ids = [m.id for m in messages]
            assert not check_ids or ids == sorted(set(ids)), f"{key!r}: ids do not strictly increase: {ids}"
            md = store.get_session_metadata(key)
            meta = None if md is None else (md.name, md.agent_alias, md.principal_id, md.state, md.turn_id,
                                            md.trim_breadcrumb, tuple(sorted(md.context.items())), md.parent,
                                            md.message_count)
            out.append((key, store.session_exists(key), repr([(m.role, m.kind, m.content, m.extra) for m in messages]),
                        meta))
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
    count = len(fresh.try_load(key))
    probe = fresh.append(key, {"role": "user", "content": "probe after the fault"})
    got = factory(path).try_load(key)
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


__all__ = [
    "ERRNOS",
    "EXIT_STATUS",
    "KINDS",
    "TORN_KINDS",
    "Call",
    "FaultInjector",
    "FaultLoopReport",
    "fault_loop",
    "no_temp_files",
    "observer",
    "run_killed",
]
