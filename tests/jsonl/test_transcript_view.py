"""The transcript kept open between mutations: a warm append makes no open() and no tail
read, and whatever another process (or a plain tool) does to the session in between, the
next append here lands in the session's current file, after its current last line."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
from _child import child_env
from syscalls import probe

from jsonl_sessions import CorruptTranscriptError, SessionStore, ids

KEY = "k"


def contents(store: SessionStore, key: str = KEY) -> list[str]:
    messages = store.try_load(key)
    got = [m.id for m in messages]
    assert got == sorted(got) and len(set(got)) == len(got), "ids must strictly increase"
    return [str(m.content) for m in messages]


def fds_on(path: pathlib.Path) -> int:
    """How many of this process's descriptors are open on ``path``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == str(path)
        except OSError:
            continue
    return count


def run_elsewhere(root: pathlib.Path, body: str) -> None:
    """Run ``body`` in another Python process with ``store`` (a SessionStore on ``root``),
    ``root`` and ``key`` defined."""
    script = "import os, sys\nfrom jsonl_sessions import SessionStore\n" \
             f"root = {str(root)!r}\nkey = {KEY!r}\nstore = SessionStore(root)\n" + textwrap.dedent(body)
    subprocess.run([sys.executable, "-c", script], env=child_env(), check=True, timeout=60)


@pytest.fixture
def warm(tmp_path: pathlib.Path, durability: str) -> SessionStore:
    store = SessionStore(str(tmp_path), durability=durability)  # type: ignore[arg-type]
    store.append_many("src", [{"role": "user", "content": "s0"}, {"role": "assistant", "content": "s1"}])
    for i in range(4):
        store.append(KEY, {"role": "user", "content": f"m{i}"})
    return store


def test_a_warm_append_makes_no_open_and_no_tail_read(warm: SessionStore) -> None:
    p = probe(lambda: warm.append(KEY, {"role": "user", "content": "again"}))

    assert p.os["os.open"] == 0 and p.os["os.close"] == 0
    assert p.seam["pread"] == 1, p.sequence("seam")  # the control file's head, nothing of the transcript
    assert p.seam["lstat"] == 1 and p.seam["write"] == 1
    assert p.seam["fsync"] == (warm.durability == "fsync")


def test_an_append_after_a_change_elsewhere_reads_the_tail_again(warm: SessionStore, tmp_path: pathlib.Path) -> None:
    run_elsewhere(tmp_path, "store.append(key, {'role': 'user', 'content': 'theirs'})")

    p = probe(lambda: warm.append(KEY, {"role": "user", "content": "ours"}))

    assert p.os["os.open"] == 0  # same inode: the kept descriptor is still the session's
    assert p.seam["pread"] == 2  # control file, then the transcript's new tail
    assert contents(SessionStore(str(tmp_path)))[-2:] == ["theirs", "ours"]


MID = "store.load(key)[1].id"
# (what another process does, what the session then holds before our append)
FOREIGN: dict[str, tuple[str, list[str]]] = {
    "remove_last": ("store.remove_last(key)", ["m0", "m1", "m2"]),
    "update_last same size": ("store.update_last(key, {'role': 'user', 'content': 'mX'})", ["m0", "m1", "m2", "mX"]),
    "rewrite": ("store.rewrite_messages(key, [{'role': 'user', 'content': 'a'}, {'role': 'user', 'content': 'b'}])",
                ["a", "b"]),
    "replace": ("store.replace_conversation_state(key, [{'role': 'user', 'content': 'a'}], True)", ["a"]),
    "delete": ("store.delete_session(key)", []),
    "delete and copy": ("store.delete_session(key); store.copy_messages('src', key)", ["s0", "s1"]),
    "truncate": (f"store.truncate_messages(key, {MID})", ["m0", "m1"]),
    "clear": ("store.clear_messages(key)", []),
    "append": ("store.append(key, {'role': 'user', 'content': 'x'})", ["m0", "m1", "m2", "m3", "x"]),
    "delete and recreate": ("store.delete_session(key); store.append(key, {'role': 'user', 'content': 'y'})", ["y"]),
}


@pytest.mark.parametrize("case", sorted(FOREIGN))
def test_a_mutation_by_another_process_then_an_append_here(warm: SessionStore, tmp_path: pathlib.Path,
                                                          case: str) -> None:
    body, before = FOREIGN[case]
    run_elsewhere(tmp_path, body)

    new_id = warm.append(KEY, {"role": "user", "content": "new"})

    expected = [*before, "new"]
    assert contents(SessionStore(str(tmp_path))) == expected  # a fresh store: what is on disk
    assert contents(warm) == expected
    assert warm.try_load(KEY)[-1].id == new_id
    assert warm.get_message_count(KEY) == len(expected)


def plain_line(content: str, message_id: str) -> bytes:
    return (f'{{"id":"{message_id}","created_at":1,"role":"user","kind":"message","content":"{content}"}}\n'
            ).encode()


@pytest.mark.parametrize("how", ["rename over", "append a line", "rename over, same size"])
def test_a_plain_tool_changing_the_transcript_then_an_append_here(warm: SessionStore, tmp_path: pathlib.Path,
                                                                 how: str) -> None:
    transcript = tmp_path / f"{KEY}.jsonl"
    last = warm.try_load(KEY)[-1].id
    assert last is not None
    first = ids.next_id(last)
    assert first is not None
    second = ids.next_id(first)
    assert second is not None
    if how == "append a line":
        script = f"open({str(transcript)!r}, 'ab').write({plain_line('plain', first)!r})"
        expected = ["m0", "m1", "m2", "m3", "plain"]
    else:
        data = plain_line("p0", first) + plain_line("p1", second)
        if how.endswith("same size"):  # the same bytes but one letter: same size, new inode
            data = transcript.read_bytes()[:-5] + b'mZ"}\n'
            expected = ["m0", "m1", "m2", "mZ"]
        else:
            expected = ["p0", "p1"]
        script = (f"tmp = {str(transcript) + '.new'!r}\nopen(tmp, 'wb').write({data!r})\n"
                  f"os.replace(tmp, {str(transcript)!r})")
    subprocess.run([sys.executable, "-c", "import os\n" + script], check=True, timeout=60)

    warm.append(KEY, {"role": "user", "content": "new"})

    assert contents(SessionStore(str(tmp_path))) == [*expected, "new"]


def test_kept_descriptors_are_closed_by_delete_and_by_close(warm: SessionStore, tmp_path: pathlib.Path) -> None:
    transcript = tmp_path / f"{KEY}.jsonl"
    assert fds_on(transcript) == 1  # kept since the last append

    warm.close()
    assert fds_on(transcript) == 0
    warm.append(KEY, {"role": "user", "content": "after close"})  # still usable
    assert fds_on(transcript) == 1

    warm.delete_session(KEY)
    assert fds_on(transcript) == 0 and not transcript.exists()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_use_the_parents_descriptor(warm: SessionStore, tmp_path: pathlib.Path) -> None:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 1
        try:
            status = 0 if fds_on(tmp_path / f"{KEY}.jsonl") == 0 else 3
            warm.append(KEY, {"role": "user", "content": "child"})
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    warm.append(KEY, {"role": "user", "content": "parent"})
    assert contents(SessionStore(str(tmp_path))) == ["m0", "m1", "m2", "m3", "child", "parent"]


def test_a_rewrite_of_a_transcript_this_process_wrote_does_not_read_it_again(warm: SessionStore) -> None:
    warm.rewrite_messages(KEY, [{"role": "user", "content": "r0"}])
    warm.append(KEY, {"role": "user", "content": "r1"})

    p = probe(lambda: warm.rewrite_messages(KEY, [{"role": "user", "content": "r2"}]))

    assert p.seam["pread"] == 1, p.sequence("seam")  # the control file only: the old lines are known to parse
    assert contents(warm) == ["r2"]


@pytest.mark.parametrize("how", ["append", "rename over"])
def test_a_corrupt_line_from_a_plain_tool_still_stops_a_rewrite(warm: SessionStore, tmp_path: pathlib.Path,
                                                               how: str) -> None:
    transcript = tmp_path / f"{KEY}.jsonl"
    warm.rewrite_messages(KEY, [{"role": "user", "content": "r0"}])
    if how == "append":
        with open(transcript, "ab") as f:
            f.write(b"not json\n")
    else:
        (tmp_path / "new").write_bytes(transcript.read_bytes() + b"not json\n")
        os.replace(tmp_path / "new", transcript)
    before = transcript.read_bytes()

    with pytest.raises(CorruptTranscriptError):
        warm.rewrite_messages(KEY, [{"role": "user", "content": "lost"}])
    with pytest.raises(CorruptTranscriptError):
        warm.replace_conversation_state(KEY, [{"role": "user", "content": "lost"}], True)

    assert transcript.read_bytes() == before


def test_at_most_max_views_transcripts_stay_open_and_the_newest_is_kept(tmp_path: pathlib.Path) -> None:
    script = textwrap.dedent(f"""
        import os
        from jsonl_sessions import SessionStore
        from jsonl_sessions.jsonl import guard
        guard.MAX_VIEWS = 2
        root = {str(tmp_path)!r}
        store = SessionStore(root, durability="flush")

        def open_transcripts():
            names = []
            for fd in os.listdir("/proc/self/fd"):
                try:
                    target = os.readlink("/proc/self/fd/" + fd)
                except OSError:
                    continue
                if target.endswith(".jsonl"):
                    names.append(os.path.basename(target))
            return sorted(names)

        for key in ["a", "b", "c", "d", "a"]:
            store.append(key, {{"role": "user", "content": key}})
            store.append(key, {{"role": "user", "content": key}})  # the second append is warm
            kept = open_transcripts()
            assert len(kept) <= 2 and key + ".jsonl" in kept, (key, kept)
        assert [m.content for m in store.load("a")] == ["a"] * 4
    """)
    subprocess.run([sys.executable, "-c", script], env=child_env(), check=True, timeout=60)
