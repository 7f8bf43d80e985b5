"""The shape of the costs at scale, checked structurally (module imports, bytes held, system
calls per session, lines decoded), never by timing: what ``benchmarks/scale.py`` measures."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from syscalls import SyscallProbe

from jsonl_sessions import ChatMessage, CorruptTranscriptError, SessionStore, transcript
from jsonl_sessions.keys import key_to_stem
from jsonl_sessions.lines import BOM, CHUNK_BYTES


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ), check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_the_package_does_not_import_asyncio() -> None:
    out = run_python(
        "import sys, jsonl_sessions\n"
        "print(sorted(m for m in sys.modules if m == 'asyncio' or m.startswith('asyncio.')))\n"
        "store = jsonl_sessions.SessionStore\n"
        "print('asyncio' in sys.modules)\n"
        "from jsonl_sessions import AsyncSessionStore, AsyncSessionBackend, SessionBackend\n"
        "print('asyncio' in sys.modules, AsyncSessionStore.__name__, AsyncSessionBackend.__name__,"
        " SessionBackend.__name__)\n"
    )
    lines = out.splitlines()
    assert lines[0] == "[]"
    assert lines[1] == "False"
    assert lines[2] == "True AsyncSessionStore AsyncSessionBackend SessionBackend"


def test_the_lazy_names_are_the_real_ones_and_unknown_names_raise() -> None:
    import jsonl_sessions
    from jsonl_sessions import aio, protocol

    assert jsonl_sessions.AsyncSessionStore is aio.AsyncSessionStore
    assert jsonl_sessions.SessionBackend is protocol.SessionBackend
    assert jsonl_sessions.AsyncSessionBackend is protocol.AsyncSessionBackend
    assert set(jsonl_sessions.__all__) <= set(dir(jsonl_sessions)) | {"AsyncSessionStore", "SessionBackend",
                                                                       "AsyncSessionBackend"}
    try:
        jsonl_sessions.NoSuchName  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchName" in str(exc)
    else:
        raise AssertionError("an unknown attribute must raise AttributeError")


# -- try_load / load: streamed in bounded blocks ------------------------------------------
def _session_of(tmp_path: pathlib.Path, n: int, text: str) -> tuple[SessionStore, pathlib.Path]:
    store = SessionStore(str(tmp_path / "store"), durability="flush")
    store.rewrite_messages("k", [ChatMessage("user", f"{i} {text}") for i in range(n)])
    path = tmp_path / "store" / (key_to_stem("k") + ".jsonl")
    return store, path


@pytest.mark.parametrize("strict", [True, False])
def test_loading_a_large_transcript_reads_it_in_bounded_blocks(tmp_path: pathlib.Path, strict: bool) -> None:
    store, path = _session_of(tmp_path, 3000, "x" * 1200)
    size = path.stat().st_size
    assert size > 3 * CHUNK_BYTES

    with SyscallProbe() as p:
        got = store.try_load("k") if strict else store.load("k")

    assert [m.content for m in got] == [f"{i} {'x' * 1200}" for i in range(3000)]
    assert max(p.read_sizes) <= CHUNK_BYTES  # never the whole file in one buffer
    assert sum(p.read_sizes) < size + 64 * 1024  # each byte read once (plus the control file's head)


def test_corrupt_lines_past_the_first_block_keep_their_line_and_offset(tmp_path: pathlib.Path) -> None:
    store, path = _session_of(tmp_path, 3000, "y" * 1200)
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    bad_at = 2500  # 0-based index of the line made corrupt, well past the first 1 MiB
    offset = sum(map(len, lines[:bad_at]))
    long_line = lines[10].rstrip(b"\n")[:-1] + b', "pad":"' + b"z" * (3 * CHUNK_BYTES) + b'"}\n'
    lines[bad_at] = b'{"id": broken\n'
    lines[10] = long_line  # a line longer than a block, before the corrupt one
    offset += len(long_line) - len(data.splitlines(keepends=True)[10])
    path.write_bytes(lines_bytes := b"".join(lines) + b'{"id":"torn')

    with pytest.raises(CorruptTranscriptError) as info:
        store.try_load("k")
    assert (info.value.line, info.value.offset) == (bad_at + 1, offset)
    assert lines_bytes[offset:].startswith(b'{"id": broken\n')
    loaded = store.load("k")
    assert len(loaded) == 2999 and loaded[10].extra["pad"] == "z" * (3 * CHUNK_BYTES)


_LINE = st.one_of(
    st.builds(lambda i, t: orjson.dumps({"id": f"{i:04d}", "created_at": 1, "role": "user", "kind": "message",
                                         "content": t}), st.integers(0, 9999), st.text(max_size=30)),
    st.sampled_from([b"", b"garbage", b"[1,2]", b'{"id":1}', b'{"role":"user"}', b"\xff\xfe", b"\r", b"{}"]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(_LINE, max_size=12), bom=st.booleans(), torn=st.binary(max_size=20).filter(lambda b: b"\n" not in b),
       block=st.integers(1, 64))
def test_streamed_parse_equals_the_whole_buffer_parse(tmp_path_factory: pytest.TempPathFactory, lines: list[bytes],
                                                      bom: bool, torn: bytes, block: int) -> None:
    data = (BOM if bom else b"") + b"".join(line + b"\n" for line in lines) + torn
    path = tmp_path_factory.mktemp("p") / "t.jsonl"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        for strict in (False, True):
            try:
                want: object = transcript.parse(data, strict=strict, key="k", path="p")
            except CorruptTranscriptError as exc:
                want = (exc.line, exc.offset, exc.reason)
            try:
                got: object = transcript.parse_file(fd, len(data), strict=strict, key="k", path="p", block=block)
            except CorruptTranscriptError as exc:
                got = (exc.line, exc.offset, exc.reason)
            assert got == want
    finally:
        os.close(fd)
