"""``export --format markdown|html``: documents for people that share the viewer's
rendering. Markdown keeps every message's content exactly, inside fences nothing in the
content can close; HTML is one self-contained file that runs no script and loads nothing.
``--format jsonl`` is the default and today's output."""

from __future__ import annotations

import base64
import hashlib
import html.parser
import pathlib
import re
from typing import Any

import pytest

from jsonl_sessions import SessionStore
from jsonl_sessions.cli import main

markdown_it = pytest.importorskip("markdown_it", reason="the viewer extra: pip install '.[viewer]'")

TRICKY = [
    "plain **bold** text",
    "a fence inside:\n```python\nprint('x')\n```\nand four ````backticks```` in a row",
    "### user · a heading that is not a message\n\n---\n",
    "<script>alert(1)</script> <img src=x onerror=alert(1)>",
    "ESC \x1b[31m and NUL \x00",
    "`" * 9,
]


@pytest.fixture
def root(tmp_path: pathlib.Path) -> pathlib.Path:
    store = SessionStore(tmp_path / "store")
    store.append_many("s", [{"role": "user", "content": text} for text in TRICKY])
    store.append_many("s", [
        {"role": "assistant", "content": "calling", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "grep", "arguments": '{"q": "```"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "found ``` here"},
        {"role": "system", "kind": "compaction", "content": "the summary"},
    ])
    store.set_session_name("s", "Name with `ticks`")
    return tmp_path / "store"


def _export(root: pathlib.Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["--root", str(root), "export", "s", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_markdown_keeps_each_content_exactly_inside_a_fence_it_cannot_close(root: pathlib.Path, capsys: Any) -> None:
    code, out, _ = _export(root, capsys, "--format", "markdown")
    assert code == 0
    tokens = markdown_it.MarkdownIt("commonmark").parse(out)
    fences = [t.content for t in tokens if t.type == "fence"]
    for text in TRICKY[:4] + TRICKY[5:]:
        assert text + ("" if text.endswith("\n") else "\n") in fences
    # the colour sequence taken out, the other control characters shown, as the viewer shows them
    assert "ESC  and NUL \\x00\n" in fences
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings[0] == "Name with `ticks`"
    roles = [h.split(" ")[0] for h in headings[1:]]
    assert roles == ["user"] * len(TRICKY) + ["assistant", "tool", "system"]  # no heading came from content
    assert '{\n  "q": "```"\n}\n' in fences and "found ``` here\n" in fences
    assert "(compaction summary)" in headings[-1]
    assert "Result of tool call `call_1`" in out


class _Elements(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.style = ""
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.style += data


def test_html_is_one_self_contained_page_that_runs_and_loads_nothing(root: pathlib.Path, capsys: Any) -> None:
    code, out, _ = _export(root, capsys, "--format", "html")
    assert code == 0
    parsed = _Elements()
    parsed.feed(out)
    names = [tag for tag, _ in parsed.tags]
    assert "script" not in names and "img" not in names and "link" not in names and "iframe" not in names
    assert not [a for _, attrs in parsed.tags for a in attrs if a.startswith("on")]
    assert not [v for _, attrs in parsed.tags for k, v in attrs.items() if k in ("src", "href") and v
                and not v.startswith("#")]  # only links inside the page
    csp = next(attrs["content"] for tag, attrs in parsed.tags if tag == "meta"
               and attrs.get("http-equiv") == "Content-Security-Policy")
    assert csp is not None and csp.startswith("default-src 'none';")
    digest = base64.b64encode(hashlib.sha256(parsed.style.encode()).digest()).decode()
    assert f"style-src 'sha256-{digest}'" in csp  # the inline stylesheet is the one the policy allows
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out
    call = re.search(r'<details class="tool-call"[^>]*data-call-id="call_1">.*?</details>', out, re.DOTALL)
    assert call is not None and "found ``` here" in call.group()  # the result inside its call
    assert out.count('<details class="raw-json">') == len(TRICKY) + 3


def test_jsonl_stays_the_default(root: pathlib.Path, capsys: Any) -> None:
    assert _export(root, capsys) == _export(root, capsys, "--format", "jsonl")


def test_a_readable_format_refuses_the_options_of_other_formats(root: pathlib.Path, capsys: Any) -> None:
    for extra in (["--to", "claude-code"], ["--json"], ["-o", str(root / "x")]):
        code, out, err = _export(root, capsys, "--format", "markdown", *extra)
        assert code == 2 and out == "" and "--format markdown" in err


def test_a_missing_session_is_an_error(root: pathlib.Path, capsys: Any) -> None:
    capsys.readouterr()
    assert main(["--root", str(root), "export", "nope", "--format", "html"]) == 1
    assert "nope" in capsys.readouterr().err


def test_markdown_shows_anthropic_tool_blocks_as_calls_with_their_results(tmp_path: pathlib.Path, capsys: Any) -> None:
    store = SessionStore(tmp_path / "blocks")
    store.append_many("s", [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                           "input": {"command": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": "\x1b[34mREADME.md\x1b[0m"}]},
    ])
    capsys.readouterr()
    assert main(["--root", str(tmp_path / "blocks"), "export", "s", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    tokens = markdown_it.MarkdownIt("commonmark").parse(out)
    fences = [t.content for t in tokens if t.type == "fence"]
    assert "**Tool call** `Bash` `toolu_1`" in out and '{\n  "command": "ls"\n}\n' in fences
    assert "README.md\n" in fences and "Result of tool call `toolu_1`" in out  # the result under its call
    assert len(re.findall(r"^### ", out, re.MULTILINE)) == 1 and "tool_use" not in out  # no block as JSON
