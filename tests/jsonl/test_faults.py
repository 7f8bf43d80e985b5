"""I/O errors at every step of every mutation, through the one platform seam.

For each mutation and each kind of OS call in :data:`jsonl_sessions.testing.faults.KINDS`, the Nth call of that
kind fails, for N = 1, 2, ... until the mutation completes without meeting the fault;
once transient (only call N fails), once persistent (every call from N on fails: the
store's own cleanup and recovery fail too), and for write / pwrite once torn (half the
bytes are written, then the error). Errors cycle through EIO, ENOSPC and EDQUOT.

After each failure:

- what surfaced is an ``OSError`` or a ``SessionStoreError``, the session's guard is
  released and no descriptor leaked;
- a store opened before the failure and a *fresh* store (faults removed) both see
  exactly the old state or exactly the new one
  (transcript, breadcrumb flag, existence): the new one when the call returned
  normally or had committed its roll-forward record before it failed, the old one
  when an append failed (a failed append is rolled back, so it never appears later);
- once the fresh store has taken the session's guard (recovery), no temp file is left,
  what it saw has not changed, and the session takes an append normally.
"""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from _budget import sized
from _summary import record

from jsonl_sessions import SessionStore, SessionStoreError, _platform
from jsonl_sessions.testing.faults import ERRNOS, KINDS, TORN_KINDS
from jsonl_sessions.testing.faults import FaultInjector as Injector

KEY = "faulty"
MAX_N = 500
Msg = tuple[str | None, str, Any]  # (id, None = any fresh id; role; content)


@dataclass(frozen=True)
class View:
    exists: bool
    messages: tuple[tuple[str, str, Any], ...]
    breadcrumb: bool | None


@dataclass(frozen=True)
class Expected:
    exists: bool
    messages: tuple[Msg, ...]
    breadcrumb: bool | None

    def matches(self, view: View) -> bool:
        return (
            view.exists == self.exists
            and view.breadcrumb == self.breadcrumb
            and len(view.messages) == len(self.messages)
            and all(
                (want_id is None or got[0] == want_id) and got[1:] == (role, content)
                for got, (want_id, role, content) in zip(view.messages, self.messages)
            )
        )


def view(store: SessionStore) -> View:
    messages = tuple((m.id, m.role, m.content) for m in store.try_load(KEY))
    ids = [m[0] for m in messages]
    assert ids == sorted(set(ids)), f"ids not strictly increasing: {ids}"
    return View(store.session_exists(KEY), messages, store.get_session_trim_breadcrumb(KEY))


# -- set-ups --------------------------------------------------------------------------
def existing(store: SessionStore) -> None:
    store.append(KEY, {"role": "user", "content": "m0"})
    store.append(KEY, {"role": "assistant", "content": [{"type": "text", "text": "m1"}], "pad": "x" * 5000})
    store.append(KEY, {"role": "user", "content": "m2"})
    store.set_session_trim_breadcrumb(KEY, True)


def existing_torn(store: SessionStore) -> None:
    """A crash's leftover from a while ago (modified 10 s back: no writer is still at it,
    so the store need not wait for it to stand still)."""
    existing(store)
    path = os.path.join(store.root, KEY + ".jsonl")
    with open(path, "ab") as f:
        f.write(b'{"id":"01ZZZZZZZZZZZZZZZZZZZZZZZZ","role":"user","content":"torn')
    ago = time.time_ns() - 10 * 10**9
    os.utime(path, ns=(ago, ago))


def missing(store: SessionStore) -> None:
    pass


def deleted(store: SessionStore) -> None:
    existing(store)
    store.delete_session(KEY)


def fresh(contents: list[str], role: str = "user") -> tuple[Msg, ...]:
    return tuple((None, role, c) for c in contents)


def with_messages(old: View, messages: tuple[Msg, ...], breadcrumb: bool | None | str = "same") -> Expected:
    return Expected(True, messages, old.breadcrumb if breadcrumb == "same" else breadcrumb)  # type: ignore[arg-type]


LONG = "updated " + "u" * 9000  # longer than the line it replaces: the file grows in place


@dataclass(frozen=True)
class Mutation:
    setup: Callable[[SessionStore], None]
    run: Callable[[SessionStore], Any]
    new: Callable[[View], Expected]
    returns: Any = None


MUTATIONS: dict[str, Mutation] = {
    "append": Mutation(existing, lambda s: s.append(KEY, {"role": "user", "content": "new"}),
                       lambda old: with_messages(old, old.messages + fresh(["new"])), returns=str),
    "append_after_torn_tail": Mutation(existing_torn, lambda s: s.append(KEY, {"role": "user", "content": "new"}),
                                       lambda old: with_messages(old, old.messages + fresh(["new"])), returns=str),
    "append_creating_session": Mutation(missing, lambda s: s.append(KEY, {"role": "user", "content": "new"}),
                                        lambda old: Expected(True, fresh(["new"]), None), returns=str),
    "append_many": Mutation(existing, lambda s: s.append_many(KEY, [{"role": "user", "content": c} for c in "abc"]),
                            lambda old: with_messages(old, old.messages + fresh(list("abc"))), returns=list),
    "append_many_creating_session": Mutation(
        missing, lambda s: s.append_many(KEY, [{"role": "user", "content": c} for c in "abc"]),
        lambda old: Expected(True, fresh(list("abc")), None), returns=list),
    "remove_last": Mutation(existing, lambda s: s.remove_last(KEY),
                            lambda old: with_messages(old, old.messages[:-1]), returns=True),
    "remove_last_after_torn_tail": Mutation(existing_torn, lambda s: s.remove_last(KEY),
                                            lambda old: with_messages(old, old.messages[:-1]), returns=True),
    "update_last": Mutation(
        existing, lambda s: s.update_last(KEY, {"role": "assistant", "content": LONG}),
        lambda old: with_messages(old, old.messages[:-1] + ((old.messages[-1][0], "assistant", LONG),)), returns=True),
    "update_last_after_torn_tail": Mutation(
        existing_torn, lambda s: s.update_last(KEY, {"role": "assistant", "content": "short"}),
        lambda old: with_messages(old, old.messages[:-1] + ((old.messages[-1][0], "assistant", "short"),)),
        returns=True),
    "rewrite_messages": Mutation(existing, lambda s: s.rewrite_messages(KEY, [{"role": "user", "content": "r1"},
                                                                             {"role": "assistant", "content": "r2"}]),
                                 lambda old: with_messages(old, fresh(["r1"]) + fresh(["r2"], "assistant"))),
    "rewrite_messages_creating_session": Mutation(
        missing, lambda s: s.rewrite_messages(KEY, [{"role": "user", "content": "r1"}]),
        lambda old: Expected(True, fresh(["r1"]), None)),
    "replace_conversation_state": Mutation(
        existing, lambda s: s.replace_conversation_state(KEY, [{"role": "user", "content": c} for c in ("s1", "s2", "s3")],
                                                         False),
        lambda old: Expected(True, fresh(["s1", "s2", "s3"]), False)),
    "replace_conversation_state_creating_session": Mutation(
        missing, lambda s: s.replace_conversation_state(KEY, [{"role": "user", "content": "s1"}], True),
        lambda old: Expected(True, fresh(["s1"]), True)),
    "replace_conversation_state_if_exists": Mutation(
        existing, lambda s: s.replace_conversation_state_if_exists(KEY, [{"role": "user", "content": "s1"}], False),
        lambda old: Expected(True, fresh(["s1"]), False), returns=True),
    "replace_conversation_state_if_exists_deleted": Mutation(
        deleted, lambda s: s.replace_conversation_state_if_exists(KEY, [{"role": "user", "content": "s1"}], False),
        lambda old: Expected(False, (), None), returns=False),
    "set_session_trim_breadcrumb": Mutation(existing, lambda s: s.set_session_trim_breadcrumb(KEY, False),
                                            lambda old: with_messages(old, old.messages, False)),
    "clear_messages": Mutation(existing, lambda s: s.clear_messages(KEY), lambda old: with_messages(old, ()), returns=3),
    "delete_session": Mutation(existing, lambda s: s.delete_session(KEY), lambda old: Expected(False, (), None),
                               returns=True),
}
#: Appends are rolled back when they fail: a failed append never appears later.
ROLLED_BACK = {"append", "append_after_torn_tail", "append_creating_session", "append_many",
               "append_many_creating_session"}
#: Mutations that commit a roll-forward record before touching the session's files.
JOURNALED = {"update_last", "update_last_after_torn_tail", "replace_conversation_state",
             "replace_conversation_state_if_exists"}
MODES = ("transient", "persistent", "torn")


def temp_files(root: pathlib.Path) -> list[str]:
    return sorted(p.name for p in root.glob(".*.tmp"))


def _target(fd: str) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def lock_holder(path: str) -> int | None:
    """The pid holding the flock of the lock file at ``path`` (from /proc/locks), if any."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return _platform.lock_holder(fd)
    finally:
        os.close(fd)


def open_fds() -> set[str]:
    """This process's open descriptors (Linux; empty elsewhere)."""
    if not os.path.isdir("/proc/self/fd"):
        return set()
    fds = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(name))
        except OSError:  # the descriptor listdir itself used
            continue
        fds.add(name)
    return fds


def check_result(result: Any, expected: Any) -> None:
    if isinstance(expected, type):
        assert isinstance(result, expected)
    else:
        assert result == expected


def run_case(root: pathlib.Path, durability: str, name: str, kind: str, mode: str, n: int) -> int:
    """One mutation with call ``n`` of ``kind`` failing; returns how many errors were injected."""
    mutation = MUTATIONS[name]
    err = ERRNOS[(n + KINDS.index(kind) + MODES.index(mode)) % len(ERRNOS)]
    context = f"{name}: {kind} call {n} fails ({mode}, errno {err}), durability={durability}"
    store = SessionStore(root, durability=durability, lock_timeout=5)  # type: ignore[arg-type]
    mutation.setup(store)
    old = view(store)
    new = mutation.new(old)
    # A store opened before the failure, like a long-running process: its constructor's
    # clean-up of temp files ran before the failure, so only its reads can recover.
    observer = SessionStore(root, durability=durability, lock_timeout=5)  # type: ignore[arg-type]
    lock_path = os.path.join(store.root, KEY + ".lock")
    fds = open_fds()
    raised: BaseException | None = None
    with Injector(kind, n, err=err, persistent=mode == "persistent", torn=mode == "torn") as injector:
        try:
            result = mutation.run(store)
        except Exception as exc:  # noqa: BLE001 - checked below
            raised = exc
    assert lock_holder(lock_path) is None, f"{context}: the session's lock is still held after the call"
    lock_fds = {fd for fd in open_fds() - fds if _target(fd) == lock_path}  # the guard keeps its descriptor
    leaked = open_fds() - fds - lock_fds
    assert not leaked, f"{context}: descriptors leaked: {[os.readlink('/proc/self/fd/' + fd) for fd in leaked]}"
    if injector.injected == 0:
        assert raised is None, f"{context}: failed without an injected error: {raised!r}"
        check_result(result, mutation.returns)
    elif raised is not None:
        assert isinstance(raised, (OSError, SessionStoreError)), f"{context}: surfaced {raised!r}"
        if isinstance(raised, OSError) and not isinstance(raised, SessionStoreError):
            assert raised.errno == err, f"{context}: surfaced {raised!r}, not the injected error"
    committed = name in JOURNALED and any(injector.record_committed(int(fd), durability == "fsync")
                                          for fd in lock_fds | {fd for fd in fds if _target(fd) == lock_path})

    seen_by_observer = view(observer)
    after = SessionStore(root, durability=durability, lock_timeout=5)  # type: ignore[arg-type]
    first = view(after)
    assert first == seen_by_observer, (
        f"{context}: a store opened before the failure saw\n{seen_by_observer}\nbut a fresh one sees\n{first}"
    )
    with after.lock(KEY):  # recovery
        pass
    assert temp_files(root) == [], f"{context}: temp files left after recovery"
    assert view(after) == first, f"{context}: recovery changed what a fresh store had already seen"
    if raised is None or committed:
        why = "the call returned normally" if raised is None else "its roll-forward record was committed"
        assert new.matches(first), f"{context}: {why}, but a fresh store sees\n{first}\nnot the new state\n{new}"
    elif name in ROLLED_BACK:
        assert first == old, f"{context}: the append failed, yet a fresh store sees it:\n{first}"
    else:
        assert first == old or new.matches(first), (
            f"{context}: a fresh store sees\n{first}\nwhich is neither the old state\n{old}\nnor the new one\n{new}"
        )
    probe = after.append(KEY, {"role": "user", "content": "probe"})
    assert view(after).messages == (first.messages if first.exists else ()) + ((probe, "user", "probe"),), (
        f"{context}: the next append did not land cleanly"
    )
    assert temp_files(root) == []
    return injector.injected


CASES = [(name, kind) for name in MUTATIONS for kind in KINDS]


@pytest.fixture(params=sized(["fsync"], ["fsync", "flush"]))
def durability(request: pytest.FixtureRequest) -> str:
    """fsync mode by default: flush mode's calls are fsync mode's minus the fsyncs, and
    test_harness.py runs its fault loop (every call of any kind) on the multi-step
    mutations in flush mode too. ``JSONL_SESSIONS_SOAK=1`` runs both modes here."""
    return request.param  # type: ignore[no-any-return]


@pytest.mark.parametrize(("name", "kind"), CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_io_error_at_every_call(
    tmp_path: pathlib.Path, durability: str, name: str, kind: str, request: pytest.FixtureRequest
) -> None:
    injected = 0
    failing_runs = 0
    for mode in MODES:
        if mode == "torn" and kind not in TORN_KINDS:
            continue
        for n in range(1, MAX_N + 1):
            got = run_case(tmp_path / f"{mode}-{n}", durability, name, kind, mode, n)
            if not got:
                break  # the mutation completed without reaching call n: every failure point covered
            injected += got
            failing_runs += 1
        else:
            pytest.fail(f"{name}: {kind} still failing after {MAX_N} calls")
    record(request.config, "faults: injected I/O errors", injected)
    record(request.config, "faults: mutation runs that met an injected error, checked", failing_runs)
