"""Proof that the harness has teeth: bugs planted in subclasses of SessionStore, each of
which the harness must catch.

Each planted bug is run through the tool meant to catch it (derandomized and without
shrinking, so the run is repeatable and cheap) and must fail there:

- the state machine (``make_state_machine``): wrong results and wrong state;
- the contract mixin (``SessionStoreContract``, the group of its tests aimed at the bug,
  run in a pytest subprocess): wrong errors and calls that fail half-done;
- the I/O-error loop (``fault_loop``): a failed append that is not rolled back, and
  (SIGKILL at every call) an in-place update without its roll-forward record;
- the power-loss simulator (``check_power_loss``): missing fsyncs.

The catch rate (planted / caught, and by which tool) is in the run's summary; every bug
must be caught (an uncaught one fails its own test).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson
import pytest
from _budget import sized
from _child import CHECKOUT, HELPERS
from _summary import record
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from jsonl_sessions import SessionQuery, SessionStore, codec
from jsonl_sessions.jsonl import append as appending
from jsonl_sessions.jsonl._atomic import unlink_quietly, write_temp
from jsonl_sessions.jsonl.control import rename_over
from jsonl_sessions.jsonl.guard import SessionGuard
from jsonl_sessions.jsonl.txn import Root, Tx
from jsonl_sessions.testing import check_power_loss, fault_loop, make_state_machine
from jsonl_sessions.testing.faults import no_temp_files, observer
from jsonl_sessions.types import Page, SessionMetadata

# -- the planted bugs -----------------------------------------------------------------------


class RemoveLastRemovesFirst(SessionStore):
    """remove_last removes the first message instead of the last."""

    def remove_last(self, key: str, *, expected_id: str | None = None) -> bool:
        with self.lock(key):
            msgs = self.try_load(key)
            if not msgs or (expected_id is not None and msgs[-1].id != expected_id):
                return False
            self.rewrite_messages(key, msgs[1:])
            return True


class UpdateLastDoesNothing(SessionStore):
    """update_last reports success and changes nothing."""

    def update_last(self, key: str, message: Any, *, expected_id: str | None = None) -> bool:
        msgs = self.try_load(key)
        return bool(msgs) and (expected_id is None or msgs[-1].id == expected_id)


class TruncateKeepsOneTooFew(SessionStore):
    """truncate_messages also removes the message it was told to keep (and still reports
    the right count)."""

    def truncate_messages(self, key: str, up_to_message_id: str) -> int:
        removed = super().truncate_messages(key, up_to_message_id)
        self.remove_last(key)
        return removed


class StaleCount(SessionStore):
    """get_message_count caches per instance and only follows appends: stale after a
    removal, truncation, rewrite, clear or delete."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._counts: dict[str, int] = {}

    def get_message_count(self, key: str) -> int:
        if key not in self._counts:
            self._counts[key] = super().get_message_count(key)
        return self._counts[key]

    def append_many(self, key: str, messages: Iterable[Any]) -> list[str]:
        ids = super().append_many(key, messages)
        if key in self._counts:
            self._counts[key] += len(ids)
        return ids


class ForkDropsLast(SessionStore):
    """copy_messages loses the fork's last message (and still reports it as the fork point)."""

    def copy_messages(self, source: str, target: str, *, up_to_message_id: str | None = None) -> str | None:
        point = super().copy_messages(source, target, up_to_message_id=up_to_message_id)
        self.remove_last(target)
        return point


class DeleteOwnedIgnoresOwner(SessionStore):
    """delete_session_owned deletes whatever owner is named (fails open)."""

    def delete_session_owned(self, key: str, owner_principal_id: str) -> bool:
        if not isinstance(owner_principal_id, str):
            raise TypeError("owner must be a str")
        return bool(owner_principal_id) and self.delete_session(key)


class PageDropsOldest(SessionStore):
    """page loses the oldest message of every full page (an off-by-one)."""

    def page(self, key: str, **options: Any) -> Page:
        got = super().page(key, **options)
        if len(got.messages) >= options.get("limit", 100) > 1:
            return Page(got.messages[1:], got.has_more, got.messages[1].id if got.before else None, got.after)
        return got


class SearchIsCaseSensitive(SessionStore):
    """search drops matches that differ only in case."""

    def search(self, query: SessionQuery) -> list[SessionMetadata]:
        found = super().search(query)
        return [md for md in found if query.keyword in (md.name or "") or any(
            query.keyword in str(m.content) for m in self.load(md.key))]


def _encode_without_checks(records: Iterable[dict[str, Any]], key: str, limit: int) -> list[bytes]:
    return [orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in records]


class NaNBecomesNull(SessionStore):
    """A NaN in content is written as null instead of being refused."""

    def append_many(self, key: str, messages: Iterable[Any]) -> list[str]:
        with _patched(codec, "encode_records", _encode_without_checks):
            return super().append_many(key, messages)

    def rewrite_messages(self, key: str, messages: Iterable[Any]) -> None:
        with _patched(codec, "encode_records", _encode_without_checks):
            super().rewrite_messages(key, messages)


class RewriteClearsFirst(SessionStore):
    """rewrite_messages empties the session before checking the new messages, so a
    refused rewrite still destroys the history."""

    def rewrite_messages(self, key: str, messages: Iterable[Any]) -> None:
        msgs = list(messages)
        self.clear_messages(key)
        super().rewrite_messages(key, msgs)


def _roll_back_nothing(guard: SessionGuard, files: Any, fd: int, at: int) -> str:
    """control.roll_back that cuts nothing and says it did: the lines of a failed append
    stay, visible."""
    return "cut"


class AppendNotRolledBack(SessionStore):
    """A failed append is not rolled back: the line written before the failing fsync stays,
    so a retry duplicates it."""

    def append(self, key: str, message: Any) -> str:
        with _patched(appending, "roll_back", _roll_back_nothing):
            return super().append(key, message)

    def append_many(self, key: str, messages: Iterable[Any]) -> list[str]:
        with _patched(appending, "roll_back", _roll_back_nothing):
            return super().append_many(key, messages)


class UpdateLastWithoutRecord(SessionStore):
    """update_last rewrites the last line in place without first committing its
    roll-forward record: a crash between the truncate and the write loses the message."""

    def update_last(self, key: str, message: Any, *, expected_id: str | None = None) -> bool:
        with _no_records():
            return super().update_last(key, message, expected_id=expected_id)


_real_write = appending._write


def _write_without_fsync(root: Root, *args: Any) -> list[str]:
    return _real_write(dataclasses.replace(root, durable=False), *args)


class AppendWithoutFsync(SessionStore):
    """Appends are not fsynced, even in fsync mode."""

    def append(self, key: str, message: Any) -> str:
        with _patched(appending, "_write", _write_without_fsync):
            return super().append(key, message)

    def append_many(self, key: str, messages: Iterable[Any]) -> list[str]:
        with _patched(appending, "_write", _write_without_fsync):
            return super().append_many(key, messages)


def _install_without_dir_fsync(tx: Tx, chunks: Iterable[bytes]) -> None:
    """Tx.install minus the directory fsync after the rename."""
    tx.close()
    write_temp(tx.files.tmp_transcript, chunks, tx.durable)
    try:
        rename_over(tx.guard, tx.files.tmp_transcript, tx.files.transcript)
    except BaseException:
        unlink_quietly(tx.files.tmp_transcript)
        raise


class RewriteWithoutDirFsync(SessionStore):
    """rewrite_messages renames the new transcript into place without the directory fsync."""

    def rewrite_messages(self, key: str, messages: Iterable[Any]) -> None:
        with _patched(Tx, "install", _install_without_dir_fsync):
            super().rewrite_messages(key, messages)


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    """While active, ``owner.name`` is ``value``."""
    real = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, real)


@contextlib.contextmanager
def _no_records() -> Iterator[None]:
    """While active, committing a roll-forward record does nothing."""
    real_write, real_clear = SessionGuard.write_record, SessionGuard.clear_record
    SessionGuard.write_record = lambda self, record, durable: None  # type: ignore[method-assign,assignment]
    SessionGuard.clear_record = lambda self, durable: None  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        SessionGuard.write_record, SessionGuard.clear_record = real_write, real_clear  # type: ignore[method-assign]


# -- running the tools ----------------------------------------------------------------------
def machine_catches(cls: type[SessionStore], examples: int = 200) -> str:
    """Run the state machine on ``cls`` (derandomized, no shrinking); the failure message."""
    machine = make_state_machine(lambda p, c: cls(p, durability="flush", clock=c), manual_clock=True,
                                 name=f"Teeth_{cls.__name__}")
    config = settings(max_examples=examples, stateful_step_count=50, deadline=None, derandomize=True,
                      database=None, phases=[Phase.explicit, Phase.generate], print_blob=False,
                      suppress_health_check=list(HealthCheck))
    try:
        run_state_machine_as_test(machine, settings=config)
    except (Exception, pytest.fail.Exception) as exc:  # noqa: BLE001 - any failure of the run is a catch
        return f"{type(exc).__name__} after {machine.stats['steps']} steps: {str(exc)[:300]}"
    raise AssertionError(f"the state machine did not catch {cls.__name__} in {examples} examples "
                         f"({machine.stats['steps']} steps)")


CONTRACT_HEADER = textwrap.dedent('''
    import pytest
    from jsonl_sessions.testing import SessionStoreContract
    from jsonl_sessions.testing.contract import JsonlFileDamage
    import test_harness_teeth as planted
''')
CONTRACT_CLASS = textwrap.dedent('''
    class Test{name}(SessionStoreContract):
        @pytest.fixture
        def store(self, tmp_path):
            return planted.{name}(tmp_path / "store", durability="flush", lock_timeout=5)

        @pytest.fixture
        def damage(self, store):
            return JsonlFileDamage(store)
''')
#: The contract tests run against each planted contract bug: the group of checks meant to
#: catch it (a ``-k`` expression), not the whole contract.
CONTRACT_SELECTION = {
    "DeleteOwnedIgnoresOwner": "delete_session_owned",
    "NaNBecomesNull": "bad_message",
    "RewriteClearsFirst": "bad_message",
}


@pytest.fixture(scope="module")
def contract_failures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Run the selected contract tests on every planted contract bug in one pytest
    subprocess (one start-up instead of one per bug); the failed tests of each bug."""
    tmp = tmp_path_factory.mktemp("contract")
    module = tmp / "test_contract_planted.py"
    module.write_text(CONTRACT_HEADER + "".join(CONTRACT_CLASS.format(name=n) for n in CONTRACT_SELECTION))
    select = " or ".join(f"(Test{n} and {k})" for n, k in CONTRACT_SELECTION.items())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([CHECKOUT, str(pathlib.Path(__file__).parent), str(HELPERS),
                                                        os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", "-W", "error",
                           "-k", select, str(module)], capture_output=True, text=True, cwd=tmp, env=env,
                          timeout=600, check=False)
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    assert done.returncode in (0, 1) and "error" not in done.stdout.splitlines()[-1], (
        f"the contract run broke (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return {n: [line for line in failed if f"::Test{n}::" in line] for n in CONTRACT_SELECTION}


def contract_catches(cls: type[SessionStore], failures: dict[str, list[str]]) -> str:
    """The first contract test that failed on ``cls`` (run by ``contract_failures``)."""
    if failures[cls.__name__]:
        return failures[cls.__name__][0]
    raise AssertionError(f"the contract did not catch {cls.__name__}")


K = "teeth"


def faults_catch(cls: type[SessionStore], tmp_path: pathlib.Path, mode: str) -> str:
    setup: Callable[[Any], Any] = lambda s: s.append_many(K, [{"role": "user", "content": "a"},
                                                           {"role": "assistant", "content": "b" * 3000}])
    if mode == "kill":
        mutation: Callable[[Any], Any] = lambda s: s.update_last(K, {"role": "assistant", "content": "c" * 100})
        rolled_back = False
    else:
        mutation = lambda s: s.append(K, {"role": "user", "content": "new"})
        rolled_back = True
    try:
        fault_loop(lambda p: cls(p, durability="fsync", lock_timeout=5), setup, mutation, key=K,
                   observe=observer(K), modes=(mode,), rolled_back=rolled_back, check_dir=no_temp_files,  # type: ignore[arg-type]
                   base=str(tmp_path))
    except AssertionError as exc:
        return str(exc)[:300]
    raise AssertionError(f"the fault loop ({mode}) did not catch {cls.__name__}")


def power_loss_catches(cls: type[SessionStore], tmp_path: pathlib.Path) -> str:
    steps = [("append", lambda s: s.append(K, {"role": "user", "content": "two"})),
             ("rewrite", lambda s: s.rewrite_messages(K, [{"role": "user", "content": "r"}])),
             ("append again", lambda s: s.append(K, {"role": "user", "content": "three"}))]
    report = check_power_loss(lambda p: cls(p, durability="fsync"), [K], steps,
                              setup=lambda s: s.append(K, {"role": "user", "content": "one"}),
                              base=str(tmp_path), raise_on_violation=False)
    if report.violations:
        return f"{len(report.violations)} of {report.states_checked} crash states: {report.violations[0][:300]}"
    raise AssertionError(f"the power-loss simulator did not catch {cls.__name__} "
                         f"({report.states_checked} crash states checked)")


# bug -> the tool that must catch it
PLANTED: dict[str, tuple[type[SessionStore], str]] = {
    "remove_last removes the first message": (RemoveLastRemovesFirst, "machine"),
    "update_last does nothing": (UpdateLastDoesNothing, "machine"),
    "truncate keeps one too few": (TruncateKeepsOneTooFew, "machine"),
    "a stale cached count": (StaleCount, "machine"),
    "a fork that drops its last message": (ForkDropsLast, "machine"),
    "page drops the oldest message": (PageDropsOldest, "machine"),
    "search is case-sensitive": (SearchIsCaseSensitive, "machine"),
    "delete_session_owned ignores the owner": (DeleteOwnedIgnoresOwner, "contract"),
    "NaN written as null": (NaNBecomesNull, "contract"),
    "a refused rewrite clears the session first": (RewriteClearsFirst, "contract"),
    "a failed append not rolled back": (AppendNotRolledBack, "faults-transient"),
    "update_last without its roll-forward record": (UpdateLastWithoutRecord, "faults-kill"),
    "an append without fsync in fsync mode": (AppendWithoutFsync, "power-loss"),
    "a rewrite without directory fsync": (RewriteWithoutDirFsync, "power-loss"),
}


@pytest.mark.parametrize("bug", list(PLANTED))
def test_harness_catches(bug: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> None:
    """The catch rate is in the run's summary: "planted" vs "caught" (an uncaught bug
    also fails here)."""
    cls, tool = PLANTED[bug]
    record(request.config, "harness teeth: planted bugs run", 1)
    if tool == "machine":
        how = machine_catches(cls)
    elif tool == "contract":
        how = contract_catches(cls, request.getfixturevalue("contract_failures"))
    elif tool.startswith("faults"):
        if tool == "faults-kill" and not hasattr(os, "fork"):
            pytest.skip("needs fork")
        how = faults_catch(cls, tmp_path, tool.split("-")[1])
    else:
        how = power_loss_catches(cls, tmp_path)
    assert how
    record(request.config, "harness teeth: planted bugs caught", 1)
    record(request.config, f"harness teeth: caught by {tool.split('-')[0]}", 1)


def test_the_real_store_passes_the_same_tools(tmp_path: pathlib.Path) -> None:
    """Control: the derandomized machine settings (10 programs; 100 in a soak), the fault
    loops and the power-loss workload used above do not fail on SessionStore itself (so a
    catch above is the planted bug, not the harness). The machine's longer runs on
    SessionStore are in test_state_machine.py."""
    machine = make_state_machine(lambda p, c: SessionStore(p, durability="flush", clock=c), manual_clock=True)
    run_state_machine_as_test(machine, settings=settings(
        max_examples=sized(10, 100), stateful_step_count=50, deadline=None, derandomize=True, database=None,
        phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck)))
    for mode in ("transient", "kill") if hasattr(os, "fork") else ("transient",):
        with pytest.raises(AssertionError, match="did not catch"):
            faults_catch(SessionStore, tmp_path, mode)
    with pytest.raises(AssertionError, match="did not catch"):
        power_loss_catches(SessionStore, tmp_path)
