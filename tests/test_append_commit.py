"""What an append promises around its commit point: a failure after the line is stored
(releasing the lock) does not fail the call, and a line whose fsync has not succeeded is
never returned to a reader."""

from __future__ import annotations

import errno
import pathlib
import subprocess
import sys
import textwrap

import pytest
from _child import child_env

from jsonl_sessions import SessionStore, _platform

KEY = "k"


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


# -- a failed unlock after the append is stored ------------------------------------------

_OTHER_PROCESS_APPENDS = textwrap.dedent(
    """
    import sys
    from jsonl_sessions import SessionStore
    print(SessionStore(sys.argv[1], lock_timeout=5).append(sys.argv[2], {"role": "user", "content": "other"}))
    """
)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_failed_unlock_after_a_stored_append_does_not_fail_it(
        tmp_path: pathlib.Path, durability: str, warm: bool, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    store = SessionStore(tmp_path, durability=durability)  # type: ignore[arg-type]
    if warm:
        store.append(KEY, user("before"))
    real_unlock = _platform.unlock
    failed: list[int] = []

    def unlock_fails_once(fd: int) -> None:
        if not failed:
            failed.append(fd)
            raise OSError(errno.EIO, "injected: unlock")
        real_unlock(fd)

    monkeypatch.setattr(_platform, "unlock", unlock_fails_once)
    new_id = store.append(KEY, user("once"))  # must not raise: the line is stored
    monkeypatch.setattr(_platform, "unlock", real_unlock)

    assert failed, "the injected unlock failure was not reached"
    assert any("releasing the lock" in r.getMessage() for r in caplog.records)
    contents = [m.content for m in store.try_load(KEY)]
    assert contents.count("once") == 1
    assert store.try_load(KEY)[-1].id == new_id
    # The flock was dropped (its descriptor closed): another process gets the lock at once.
    done = subprocess.run([sys.executable, "-c", _OTHER_PROCESS_APPENDS, str(tmp_path), KEY], env=child_env(),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    # And this store still appends (it reopens the lock file).
    store.append(KEY, user("after"))
    assert [m.content for m in store.try_load(KEY)][-3:] == ["once", "other", "after"]
