"""Real I/O failures under the SQLite backend, where the JSONL backend's fault seam cannot
reach (SQLite writes through its own VFS, in C).

- The kernel refuses writes past a file-size limit (``RLIMIT_FSIZE``, ``SIGXFSZ``
  ignored, so ``write`` fails with ``EFBIG``): a child process runs a fixed mix of every
  mutation under limits that cut SQLite's WAL at different byte offsets (inside a frame,
  between frames, at a commit). Every call either succeeds or raises ``OSError``; a
  fresh store then holds exactly what the calls that succeeded did (the same calls
  replayed on a JSONL store), and ``verify()`` (``PRAGMA integrity_check`` included)
  finds nothing.
- A full database (``PRAGMA max_page_count``): ``OSError(ENOSPC)``, nothing written; inside
  ``lock()`` too, where it undoes only the call that failed (each call is its own
  transaction: what the block's earlier calls did stays committed).
"""

from __future__ import annotations

import errno
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from jsonl_sessions import SessionStore
from jsonl_sessions.sqlite import SqliteSessionStore

pytestmark = pytest.mark.skipif(sys.platform == "win32" or not hasattr(os, "fork"), reason="needs RLIMIT_FSIZE")

REPO = pathlib.Path(__file__).resolve().parents[2]
SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"
OPS = 40


def run_op(store: Any, i: int) -> Any:
    """Mutation ``i`` of the fixed mix (the same on every backend)."""
    pad = "p" * (300 + 700 * (i % 5))
    kind = i % 8
    if kind in (0, 1, 5):
        store.append("k", {"role": "user", "content": f"m{i}", "pad": pad})
        return None
    if kind == 2:
        store.append_many("k", [{"role": "assistant", "content": f"m{i}.{j}", "pad": pad} for j in range(3)])
        return None
    if kind == 3:
        return store.update_last("k", {"role": "assistant", "content": f"u{i}", "pad": pad})
    if kind == 4:
        return store.remove_last("k")
    if kind == 6:
        store.set_session_name("k", f"name {i}")
        return None
    if store.session_exists("fork"):
        return store.delete_session("fork")
    return store.copy_messages("k", "fork") is not None


WORKER = """
import json, os, resource, signal, sys
sys.path.insert(0, {tests!r})
from test_sqlite_faults import run_op
from jsonl_sessions.sqlite import SqliteSessionStore
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
store = SqliteSessionStore(sys.argv[1], durability=sys.argv[3])
store.append("k", {{"role": "system", "content": "start"}})
biggest = max(os.path.getsize(sys.argv[1] + suffix) for suffix in ("", "-wal") if os.path.exists(sys.argv[1] + suffix))
limit = biggest + int(sys.argv[2])  # the first write past it fails
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
log = []
for i in range({ops}):
    try:
        log.append(["ok", i, run_op(store, i)])
    except OSError as exc:
        log.append(["err", i, exc.errno])
print(json.dumps(log))
"""


def outcome(store: Any) -> dict[str, Any]:
    return {key: ([(m.role, m.content) for m in store.load(key)], store.get_session_name(key))
            for key in store.list_sessions()}


#: Bytes the files may grow past their size after the first append (4 KiB pages, 24-byte
#: frame headers: the cuts land inside frames, between them and at commits).
HEADROOM = [4300, 5000, 14_000, 33_000, 70_000, 120_000, 200_000, 350_000] if not SOAK else list(range(100, 120_000, 1_700))


@pytest.mark.parametrize("headroom", HEADROOM)
def test_writes_failing_at_a_file_size_limit_change_nothing(tmp_path: pathlib.Path, headroom: int) -> None:
    path = tmp_path / "s.db"
    worker = WORKER.format(tests=str(pathlib.Path(__file__).resolve().parent), ops=OPS)
    done = subprocess.run([sys.executable, "-c", worker, str(path), str(headroom), "fsync"], capture_output=True,
                          text=True, timeout=120, check=False, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    log = json.loads(done.stdout)
    failed = [entry for entry in log if entry[0] == "err"]
    assert failed, f"no write failed with {headroom} bytes of headroom: the limit does not bite"
    assert {entry[2] for entry in failed} <= {errno.EFBIG, errno.ENOSPC, errno.EIO}
    assert any(status == "ok" for status, _i, _r in log), "no write succeeded: nothing to check against the model"
    # The same calls that succeeded, on a JSONL store: the model of what must be stored.
    model = SessionStore(tmp_path / "model", durability="flush")
    model.append("k", {"role": "system", "content": "start"})
    for status, i, result in log:
        if status == "ok":
            assert run_op(model, i) == result, f"call {i} answered differently than on the model"
    store = SqliteSessionStore(path)
    assert outcome(store) == outcome(model)
    report = store.verify()
    assert report.ok, report.findings
    store.append("k", {"role": "user", "content": "after"})  # the store goes on working without the limit
    assert store.load("k")[-1].content == "after"
    store.close()


def test_a_full_database_raises_enospc_and_changes_nothing(tmp_path: pathlib.Path) -> None:
    store = SqliteSessionStore(tmp_path / "s.db")
    store.append("k", {"role": "user", "content": "a"})
    store._db.conn().execute("PRAGMA max_page_count = 12")  # this thread's connection: a size cap
    big = [{"role": "user", "content": "x" * 5000} for _ in range(20)]
    with pytest.raises(OSError) as info:
        store.append_many("k", big)
    assert info.value.errno == errno.ENOSPC
    assert [m.content for m in store.load("k")] == ["a"] and store.verify().ok
    with store.lock("k"):
        store.append("k", {"role": "user", "content": "inside the block"})
        with pytest.raises(OSError) as info:
            store.append("k", {"role": "user", "content": "y" * 90_000})
        assert info.value.errno == errno.ENOSPC
        assert [m.content for m in store.load("k")] == ["a", "inside the block"]
        store.append("k", {"role": "user", "content": "later in the block"})
    assert [m.content for m in store.load("k")] == ["a", "inside the block", "later in the block"]
    assert store.verify().ok
    store.append("k", {"role": "user", "content": "b"})
    assert [m.content for m in store.load("k")][-1] == "b"
    store.close()
