"""Lenient ``load`` never shows an intact session as empty because of its lock file.

When ``<stem>.lock`` is a directory, a symlink or a FIFO, the store cannot use it: every
mutation and strict read raises ``UnsafePathError``. Readers need no lock, though, and
``load`` reads the transcript (with a warning naming the lock file); it returns ``[]``
only for a session that holds no message.
"""

from __future__ import annotations

import logging
import os
import pathlib
import sys

import pytest

from jsonl_sessions import SessionStore, UnsafePathError
from jsonl_sessions.jsonl.layout import SessionFiles

KEY = "chat/1"
KINDS = ["directory", "symlink", "fifo"]


def _snapshot(root: pathlib.Path) -> dict[str, bytes | str]:
    """Every name in root: a regular file's bytes, else what it is."""
    out: dict[str, bytes | str] = {}
    for entry in os.scandir(root):
        if entry.is_symlink():
            out[entry.name] = "symlink -> " + os.readlink(entry.path)
        elif entry.is_file(follow_symlinks=False):
            out[entry.name] = pathlib.Path(entry.path).read_bytes()
        else:
            out[entry.name] = "other"
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_load_reads_the_transcript_past_a_lock_file_it_cannot_use(
        tmp_path: pathlib.Path, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    if kind == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    if kind == "symlink" and sys.platform == "win32":
        pytest.skip("symlinks need privileges on Windows")
    root = tmp_path / "store"
    with SessionStore(root) as store:
        ids = store.append_many(KEY, [{"role": "user", "content": i} for i in range(3)])
        store.append(KEY, {"role": "assistant", "content": "last"})
    with open(SessionFiles.of(str(root), KEY).transcript, "ab") as f:
        f.write(b'{"role":"user","content":"a torn')  # another tool's line in progress: still ignored
    lock = SessionFiles.of(str(root), KEY).lock
    os.unlink(lock)
    if kind == "directory":
        os.mkdir(lock, 0o700)
    elif kind == "symlink":
        target = tmp_path / "elsewhere.lock"
        target.write_bytes(bytes(56))
        os.symlink(target, lock)
    else:
        os.mkfifo(lock, 0o600)
    before = _snapshot(root)
    store = SessionStore(root)
    with caplog.at_level(logging.WARNING, logger="jsonl_sessions"):
        loaded = store.load(KEY)
    assert [m.content for m in loaded] == [0, 1, 2, "last"] and [m.id for m in loaded][:3] == ids
    assert any(lock in r.getMessage() for r in caplog.records), caplog.text
    with pytest.raises(UnsafePathError):
        store.try_load(KEY)  # strict reads say why they cannot vouch for it
    with pytest.raises(UnsafePathError):
        store.append(KEY, {"role": "user", "content": "no"})
    assert store.load("never-written") == []
    assert _snapshot(root) == before  # nothing read or refused changed a file
    store.close()
