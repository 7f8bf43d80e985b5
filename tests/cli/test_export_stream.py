"""``export`` in all three formats reads the session a page at a time and writes as it goes:
the output equals the rendering of the whole session at once, byte for byte (tool calls
and results of both formats, across page boundaries, compaction, escape sequences,
non-ASCII); the memory it needs does not grow with the session; a corrupt transcript is
still refused before anything is written, with the error ``try_load`` gives."""

from __future__ import annotations

import io
import logging
import os
import pathlib
import re
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from jsonl_sessions import SessionStore, display
from jsonl_sessions.cli import main, reading
from jsonl_sessions.jsonl import transcript
from jsonl_sessions.viewer.markdown_export import to_markdown

Run = Callable[..., tuple[int, str, str]]
EXPORTED = re.compile(r"<dt>exported</dt><dd>[^<]*</dd>")


def _turn(n: int) -> list[dict[str, Any]]:
    """One varied turn: OpenAI parallel calls and their results, Anthropic blocks, compaction,
    colours, non-ASCII, an image part, a call never answered and a result without its call."""
    return [
        {"role": "user", "content": f"tâche {n}: \x1b[1mfaites\x1b[0m ça 🚀 — \u202eevil"},
        {"role": "assistant", "content": "je regarde", "tool_calls": [
            {"id": f"call_{n}a", "type": "function", "function": {"name": "grep", "arguments": '{"q": "é"}'}},
            {"id": f"call_{n}b", "type": "function", "function": {"name": "ls", "arguments": "not json"}}]},
        {"role": "tool", "tool_call_id": f"call_{n}a", "content": "\x1b[31mred\x1b[0m line\r\nnext ```"},
        {"role": "tool", "tool_call_id": f"call_{n}b", "content": "a\x00b"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Reading it"},
            {"type": "tool_use", "id": f"toolu_{n}", "name": "Read", "input": {"path": f"/src/ü{n}.py"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": [{"type": "text", "text": "print(1)"}]}]},
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "AAAA"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"never_{n}", "type": "function", "function": {"name": "wait", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": f"orphan_{n}", "content": "no call"},
        {"role": "system", "kind": "compaction", "content": f"summary {n}"},
    ]


@pytest.fixture
def rich(store: SessionStore) -> str:
    store.append_many("rich", [m for n in range(6) for m in _turn(n)])
    store.set_session_name("rich", "Révision `x`")
    return "rich"


def _reference(store: SessionStore, key: str, fmt: str) -> str:
    """The whole session rendered at once, as the exports did before they streamed."""
    meta = store.get_session_metadata(key)
    assert meta is not None
    if fmt == "markdown":
        return to_markdown(meta, store.try_load(key))
    from jsonl_sessions.viewer.html_export import to_html

    return to_html(meta, store.try_load(key))


@pytest.mark.parametrize("page", [2, 5, 7, 500])
def test_streamed_exports_equal_the_whole_session_rendering(run: Run, store: SessionStore, rich: str, page: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("jinja2", reason="the viewer extra: pip install '.[viewer]'")
    monkeypatch.setattr(reading, "PAGE", page)
    messages = store.try_load(rich)
    # a call ends the first page, its result starts the next: an OpenAI call (the page is
    # widened over its results), an Anthropic tool_use block (its view waits for the result)
    if page == 2:
        assert messages[1].extra["tool_calls"] and messages[2].extra["tool_call_id"] == "call_0a"
    if page == 5:
        assert messages[4].content[1]["type"] == "tool_use" and messages[5].content[0]["type"] == "tool_result"
    for fmt in ("markdown", "html"):
        code, out, err = run("export", rich, "--format", fmt)
        assert code == 0 and err == ""
        expected = _reference(store, rich, fmt)
        assert EXPORTED.sub("", out) == EXPORTED.sub("", expected)
    code, out, _ = run("export", rich)
    assert code == 0 and [orjson.loads(line) for line in out.splitlines()] == [m.to_dict() for m in messages]
    assert "toolu_0" in out


def _session(store: SessionStore, key: str, n: int) -> None:
    store.append_many(key, [m for i in range(n // 10) for m in _turn(i)])


def _peak(argv: list[str]) -> int:
    """Peak traced memory of the command, its output written to /dev/null (not kept)."""
    with open(os.devnull, "wb") as sink, io.TextIOWrapper(sink, encoding="utf-8") as text, \
            pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdout", text)
        assert main(argv) == 0  # warm: imports, compiled templates
        tracemalloc.start()
        try:
            assert main(argv) == 0
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()


@pytest.mark.parametrize("fmt", ["jsonl", "markdown", "html"])
def test_export_memory_does_not_grow_with_the_session(root: pathlib.Path, store: SessionStore, fmt: str) -> None:
    """Peak traced memory of exporting N (600) and 4N messages: pages of 20, 40 views held at most,
    the strict check in 16 KiB blocks. A whole-session export needs about four times as much
    for 4N (every message, its view and the text at once); a streamed one the same."""
    if fmt == "html":
        pytest.importorskip("jinja2", reason="the viewer extra: pip install '.[viewer]'")
    _session(store, "n", 600)
    _session(store, "4n", 2400)
    with pytest.MonkeyPatch.context() as sizes:
        sizes.setattr(reading, "PAGE", 20)
        sizes.setattr(display, "HOLD", 40)
        sizes.setattr(transcript, "CHUNK_BYTES", 16 * 1024)
        small = _peak(["--root", str(root), "export", "n", "--format", fmt])
        big = _peak(["--root", str(root), "export", "4n", "--format", fmt])
    assert big < 1.5 * small, (small, big)


@pytest.mark.parametrize("fmt", ["jsonl", "markdown", "html"])
@pytest.mark.parametrize("damage", ["corrupt", "repeated id"])
def test_a_damaged_transcript_is_refused_before_a_byte_is_written(run: Run, store: SessionStore, root: pathlib.Path,
                                                                  fmt: str, damage: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    if fmt == "html":
        pytest.importorskip("jinja2", reason="the viewer extra: pip install '.[viewer]'")
    monkeypatch.setattr(reading, "PAGE", 20)
    monkeypatch.setattr(transcript, "CHUNK_BYTES", 4096)  # the damage several blocks in
    _session(store, "d", 100)
    path = pathlib.Path(store.root) / "d.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[77] = b'{"id": "broken\n' if damage == "corrupt" else lines[30]
    path.write_bytes(b"".join(lines))
    with pytest.raises(Exception) as refused:
        store.try_load("d")
    code, out, err = run("export", "d", "--format", fmt)
    assert code == 1 and out == ""
    assert str(refused.value).splitlines()[0] in err
    assert f"{path}" in err and "line 78, byte offset" in err


def test_lenient_export_skips_corrupt_lines_with_the_warning(run: Run, store: SessionStore,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    _session(store, "l", 40)
    path = pathlib.Path(store.root) / "l.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[12] = b"not json\n"
    path.write_bytes(b"".join(lines))
    with caplog.at_level(logging.WARNING, logger="jsonl_sessions"):
        code, out, _ = run("export", "l", "--lenient", "--format", "markdown")
    assert code == 0
    meta = store.get_session_metadata("l")
    assert meta is not None and out == to_markdown(meta, store.load("l"))
    assert [r for r in caplog.records if "skipped 1 corrupt line(s)" in r.getMessage() and "line 13" in r.getMessage()]


def test_export_of_a_missing_or_empty_session(run: Run, store: SessionStore) -> None:
    for fmt in ("jsonl", "markdown"):
        code, out, err = run("export", "nope", "--format", fmt)
        assert code == 1 and out == "" and "nope" in err
    store.append("e", {"role": "user", "content": "x"})
    store.clear_messages("e")
    code, out, _ = run("export", "e")
    assert code == 0 and out == ""
