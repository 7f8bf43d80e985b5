"""The descriptors a process keeps open for its sessions (a lock file per guard, a
transcript per warm session) stay within the process's descriptor limit, and
``SessionStore.close()`` releases all of them."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

from _child import child_env

from jsonl_sessions import SessionQuery, SessionStore


def descriptors_under(root: pathlib.Path) -> set[str]:
    """What this process's open descriptors name inside ``root`` (by path, so descriptors
    that other tests' leftovers open or close meanwhile do not count)."""
    named = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed meanwhile (the listing's own descriptor, among others)
            continue
        if target.startswith(str(root) + os.sep):
            named.add(target)
    return named


_LOW_LIMIT = textwrap.dedent(
    """
    import resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    from jsonl_sessions import SessionStore
    store = SessionStore(sys.argv[1], durability=sys.argv[2])
    for i in range(int(sys.argv[3])):
        store.append(f"s{i}", {"role": "user", "content": f"m{i}"})
        store.append(f"s{i}", {"role": "user", "content": f"m{i} again"})  # warm: the transcript kept open
    print(len(store.list_sessions()))
    """
)


def test_appends_to_a_thousand_sessions_under_a_limit_of_256_descriptors(tmp_path: pathlib.Path) -> None:
    done = subprocess.run([sys.executable, "-c", _LOW_LIMIT, str(tmp_path), "flush", "1000"], env=child_env(),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1000"]
    store = SessionStore(tmp_path)
    assert [m.content for m in store.load("s999")] == ["m999", "m999 again"]


def test_close_releases_every_descriptor_the_store_kept(tmp_path: pathlib.Path) -> None:
    for durability in ("fsync", "flush"):
        root = tmp_path / durability
        store = SessionStore(root, durability=durability)
        for i in range(40):
            key = f"s{i}"
            store.append(key, {"role": "user", "content": "hello"})
            store.append_many(key, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
            store.set_session_name(key, f"name {i}")
            store.load(key)
            store.get_message_count(key)
        store.list_sessions_with_metadata()
        store.search(SessionQuery("hello"))
        assert descriptors_under(root)  # it did keep some between calls
        store.close()
        assert descriptors_under(root) == set(), durability
        store.append("s0", {"role": "user", "content": "after close"})  # still usable
        store.close()
        assert descriptors_under(root) == set()
