"""Session files that are not what the store made: a FIFO or a directory where a
transcript, sidecar or lock file belongs, and files the process may not read.

No operation may hang on them (a FIFO without a writer blocks a plain open(2) forever):
each returns or raises a typed error within seconds, and listings (API and command line)
report the odd session with a warning and go on with the others."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import pathlib
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from _child import child_env

from jsonl_sessions import SessionQuery, SessionStore
from jsonl_sessions.cli import main
from jsonl_sessions.errors import CorruptMetadataError, SessionStoreError, UnsafePathError
from jsonl_sessions.jsonl.layout import SessionFiles

#: Seconds an operation may take before it counts as hung (each takes milliseconds).
HANG = 5.0
ROLES = ("transcript", "sidecar", "lock")


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def build(root: pathlib.Path) -> None:
    """Sessions "a" and "b", one message each; nothing of them left open in this process."""
    with SessionStore(root) as store:
        store.append("a", user("hello a"))
        store.append("b", user("hello b"))


def plant(root: pathlib.Path, role: str, kind: str) -> str:
    """Put a FIFO or a directory in place of session "a"'s ``role`` file; its path."""
    files = SessionFiles.of(str(root), "a")
    path: str = getattr(files, role)
    os.unlink(path)
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    else:
        os.mkdir(path, 0o700)
    return path


@pytest.fixture
def unblock() -> Iterator[list[str]]:
    """FIFOs to open for writing at the end, so a reader a failing test left blocked in
    open(2) wakes up instead of hanging on for the rest of the run."""
    fifos: list[str] = []
    yield fifos
    for path in fifos:
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK))


def within(seconds: float, op: Callable[[], Any]) -> Any:
    """``op()``'s result (or its exception) if it ends within ``seconds``; fails the test
    when it hangs (the thread is left blocked: a daemon)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = op()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"hung for {seconds}s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def keys(found: list[Any]) -> list[str]:
    return [md.key for md in found]


# What each operation on session "a" gives with a non-regular file in each role: a value,
# or the type of the error it raises ("b" is untouched throughout).
EXPECTED: dict[str, dict[str, Any]] = {
    "transcript": {"load": [], "try_load": UnsafePathError, "append": UnsafePathError, "count": UnsafePathError,
                   "metadata": None, "exists": False, "list": ["b"], "listed": ["b"], "search": ["b"]},
    "sidecar": {"load": ["hello a"], "try_load": ["hello a"], "append": str, "count": 1,
                "metadata": CorruptMetadataError, "exists": True, "list": ["a", "b"], "listed": ["a", "b"],
                "search": ["a", "b"]},
    "lock": {"load": ["hello a"], "try_load": UnsafePathError, "append": UnsafePathError, "count": UnsafePathError,
             "metadata": UnsafePathError, "exists": True, "list": ["a", "b"], "listed": ["a", "b"],
             "search": ["b"]},
}


#: The listings that name session "a"'s odd file in a warning (``list_sessions`` reads
#: only the directory, so it sees only an odd transcript).
WARNED = {"transcript": {"list", "listed", "search"}, "sidecar": {"listed", "search"},
          "lock": {"load", "listed", "search"}}


@pytest.mark.parametrize("kind", ["fifo", "directory"])
@pytest.mark.parametrize("role", ROLES)
def test_a_non_regular_session_file_never_hangs_an_operation(
        tmp_path: pathlib.Path, role: str, kind: str, unblock: list[str], caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "store"
    build(root)
    path = plant(root, role, kind)
    unblock.append(path)
    store = SessionStore(root)
    ops: dict[str, Callable[[], Any]] = {
        "load": lambda: [m.content for m in store.load("a")],
        "try_load": lambda: [m.content for m in store.try_load("a")],
        "count": lambda: store.get_message_count("a"),
        "metadata": lambda: store.get_session_metadata("a"),
        "exists": lambda: store.session_exists("a"),
        "list": store.list_sessions,
        "listed": lambda: keys(store.list_sessions_with_metadata()),
        "search": lambda: keys(sorted(store.search(SessionQuery("hello")), key=lambda md: md.key)),
        "append": lambda: store.append("a", user("more")),
    }
    for name, op in ops.items():
        want = EXPECTED[role][name]
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="jsonl_sessions"):
            if isinstance(want, type) and issubclass(want, SessionStoreError):
                with pytest.raises(want):
                    within(HANG, op)
                continue
            got = within(HANG, op)
        if want is str:
            assert isinstance(got, str), (name, got)
        elif name == "metadata" and want is None:
            assert got is None
        else:
            assert got == want, name
        if name in WARNED[role]:
            assert any(path in r.getMessage() for r in caplog.records), (name, caplog.text)
    listed = {md.key: md for md in within(HANG, store.list_sessions_with_metadata)}
    assert listed["b"].message_count == 1  # the other session is intact
    if role == "sidecar":
        assert listed["a"].message_count >= 1 and listed["a"].name is None


def test_a_store_opens_and_cleans_up_past_a_session_whose_lock_file_is_a_fifo(tmp_path: pathlib.Path,
                                                                              unblock: list[str]) -> None:
    root = tmp_path / "store"
    build(root)
    unblock.append(plant(root, "lock", "fifo"))
    files = SessionFiles.of(str(root), "a")
    with open(files.tmp_transcript, "wb"):  # a temp file, as an interrupted write leaves: opening cleans those up
        pass
    store = within(HANG, lambda: SessionStore(root))
    assert within(HANG, store.list_sessions) == ["a", "b"]
    assert within(HANG, lambda: store.cleanup_stale(0)) == 1  # "b"; "a" cannot be locked, so it stays
    assert within(HANG, store.list_sessions) == ["a"]


@pytest.mark.parametrize("role", ROLES)
def test_the_command_line_never_hangs_on_a_fifo(tmp_path: pathlib.Path, role: str, unblock: list[str]) -> None:
    root = tmp_path / "store"
    build(root)
    unblock.append(plant(root, role, "fifo"))
    base = [sys.executable, "-m", "jsonl_sessions", "--root", str(root)]
    for argv in (["ls", "--json"], ["stats", "--json"], ["search", "-l", "--json", "hello"], ["verify", "--json"],
                 ["show", "a"]):
        try:
            done = subprocess.run(base + argv, capture_output=True, text=True, timeout=20, env=child_env(),
                                  check=False)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{argv} hung")
        assert "Traceback" not in done.stderr, (argv, done.stderr)
        if argv[0] == "verify":
            assert done.returncode == 1 and "not-regular" in done.stdout, (argv, done.stdout)
            continue
        if argv[0] == "show":
            assert done.returncode in (0, 1), (argv, done.stderr)
            continue
        assert done.returncode == 0, (argv, done.stderr)
        result = orjson.loads(done.stdout)
        if argv[0] == "stats":
            assert result["sessions"] == (1 if role == "transcript" else 2)
        else:
            assert "b" in [md["key"] for md in result]
        if not (role == "sidecar" and argv[0] == "search"):
            assert "warning" in done.stderr, (argv, done.stderr)


# -- files this process may not read ---------------------------------------------------------
def _as_unprivileged(root: str, work: Callable[[], int]) -> tuple[int, str, str]:
    """Run ``work`` in a forked child with root's privileges dropped (as ``nobody``, who
    owns the store), or as is when not root; its exit status, stdout and stderr."""
    nobody = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
    if nobody is not None:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                os.chown(name, nobody.pw_uid, nobody.pw_gid, follow_symlinks=False)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # the child: no pytest machinery from here on
            code = 99
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
                sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
                if nobody is not None:
                    os.setgroups([])
                    os.setgid(nobody.pw_gid)
                    os.setuid(nobody.pw_uid)
                code = work()
            except BaseException as exc:  # noqa: BLE001 - reported by the exit status
                sys.stderr.write(f"child failed: {exc!r}\n")
            finally:
                os._exit(code)
        deadline = time.monotonic() + 30
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail("the unprivileged child hung")
            time.sleep(0.01)
        out.seek(0)
        err.seek(0)
        return os.waitstatus_to_exitcode(status), out.read().decode(), err.read().decode()


def test_an_unreadable_session_file_is_listed_with_a_warning_by_api_and_cli() -> None:
    # Not under pytest's tmp_path: its parents are private to root, the child is not.
    root = tempfile.mkdtemp(prefix="jsonl-unreadable-")
    try:
        store_root = os.path.join(root, "store")
        with SessionStore(store_root) as store:
            for key in ("sidecar", "transcript", "lock", "fine"):
                store.append(key, user(f"hello {key}"))
                store.set_session_name(key, f"name {key}")
        unreadable = {role: getattr(SessionFiles.of(store_root, role), role) for role in ROLES}
        for path in unreadable.values():
            os.chmod(path, 0)
        os.chmod(root, 0o755)

        def work() -> int:
            api = SessionStore(store_root)
            report: dict[str, Any] = {
                "euid": os.geteuid(),
                "listed": {md.key: [md.name, md.message_count] for md in api.list_sessions_with_metadata()},
                "search": sorted(md.key for md in api.search(SessionQuery("hello"))),
            }
            sys.stdout.write(orjson.dumps(report).decode() + "\n")
            for argv in (["ls", "--json"], ["stats", "--json"], ["search", "-l", "--json", "hello"]):
                sys.stdout.write(f"{main(['--root', store_root, *argv])}\n")
            return 0

        with _unprivileged_logging():
            code, out, err = _as_unprivileged(root, work)
        assert code == 0, err
        lines = out.splitlines()
        report = orjson.loads(lines[0])
        assert report["euid"] != 0  # really without root's privileges, which ignore file modes
        listed = report["listed"]
        assert sorted(listed) == ["fine", "lock", "sidecar", "transcript"]
        assert listed["fine"] == ["name fine", 1]
        assert listed["sidecar"] == [None, 1]  # listed; its fields unknown
        assert listed["transcript"][0] == "name transcript" and listed["lock"][0] == "name lock"
        assert report["search"] == ["fine", "sidecar"]  # the others' text cannot be read
        for path in unreadable.values():
            assert path in err, err  # each named in a warning
        # The command line: ls, stats and search each end with status 0 after their JSON.
        rest = "\n".join(lines[1:])
        assert [line for line in lines[1:] if line.strip().isdigit()] == ["0", "0", "0"], (rest, err)
        assert '"sessions": 4' in rest and rest.count('"key": "fine"') == 2
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def _unprivileged_logging() -> Iterator[None]:
    """The child writes warnings to its stderr: a plain handler for the library's logger
    outside the command line (pytest's capture handlers write to the parent's buffers)."""
    logger = logging.getLogger("jsonl_sessions")
    handler = logging.StreamHandler(_StderrNow())
    handler.setLevel(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


class _StderrNow(io.TextIOBase):
    """Writes to whatever ``sys.stderr`` is at the time of the write."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)
