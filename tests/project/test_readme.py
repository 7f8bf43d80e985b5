"""The README's example is real code: run it, and check what it promises."""

from __future__ import annotations

import ast
import asyncio
import http.server
import importlib
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from _sdk import require

from jsonl_sessions import SessionStore

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def _first_python_block() -> str:
    match = re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert match, "README has no python example"
    return match.group(1)


def test_readme_example_runs_and_keeps_its_promises(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _first_python_block()
    assert len(code.strip().splitlines()) <= 12
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(README), "exec"), {})  # noqa: S102 - running the README example is the point
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("user What is 2 + 2?")
    assert out[1].startswith("assistant 4 ")
    fresh = SessionStore(tmp_path / "sessions")
    messages = fresh.try_load("chat-42")
    assert [m.content for m in messages] == ["[trimmed]", "What is 2 + 2?"]
    assert fresh.get_session_trim_breadcrumb("chat-42") is True
    assert messages[0].id < messages[1].id


def test_readme_gives_exactly_the_two_setup_commands_and_ci_runs_the_test_and_lint_ones() -> None:
    text = README.read_text(encoding="utf-8")
    commands = re.findall(r"```sh\n(.*?)```", text, re.DOTALL)
    assert len(commands) == 2 and "jsonl-sessions demo" in commands[0]
    assert len(commands[1].strip().splitlines()) == 1  # install and test in one line
    steps = [part.strip() for part in commands[1].split("&&")]
    assert steps[1] == ".venv/bin/pip install '.[test]'" and steps[2] == ".venv/bin/python -m pytest -q"
    lint = re.search(r"Lint, as CI: `\.venv/bin/pip install '\.\[lint\]'`, then\n`(.*?)`", text)
    assert lint
    runs = [step.strip().removeprefix(".venv/bin/python ") for step in [steps[2], *lint.group(1).split("&&")]]
    assert runs == ["-m pytest -q", "-m mypy jsonl_sessions", "-m ruff check jsonl_sessions"]
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    ci_runs = re.findall(r'^"\$venv/bin/python" (-m (?:pytest|mypy|ruff)\b.*)$', ci, re.MULTILINE)
    assert ci_runs == runs  # the same test and lint commands, in the same order
    # CI installs the README's extras plus the SDKs, and a missing SDK fails there instead of skipping.
    assert "pip install '.[test-integrations]'" in text
    assert 'pip install --quiet ".[test,test-integrations,lint]"' in ci
    assert re.search(r"^export JSONL_SESSIONS_REQUIRE_INTEGRATIONS=1\b", ci, re.MULTILINE)


def test_every_install_line_of_the_docs_works_in_a_checkout() -> None:
    """The package is not on PyPI: an install line names the checkout (``.``, with extras
    that exist), never ``jsonl-sessions[...]`` from an index (only as a ``<extra>`` pattern)."""
    root = README.parent
    pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    section = pyproject.split("[project.optional-dependencies]\n", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^([a-z-]+) = \[", section, re.MULTILINE))
    assert {"openai-agents", "postgres", "testing", "test", "test-integrations", "lint"} <= extras
    docs = [README, *sorted((root / "docs").glob("*.md")), root / "benchmarks" / "README.md"]
    lines = [(doc.name, target) for doc in docs
             for target in re.findall(r"pip install (?:-e |--quiet )*('[^']*'|[^\s`)]+)", doc.read_text(encoding="utf-8"))]
    assert len(lines) > 15
    for doc, target in lines:
        target = target.strip("'`")
        if target == "jsonl-sessions[<extra>]":
            continue
        named = re.fullmatch(r"\.(?:\[([\w,<>-]+)\])?", target)
        assert named, f"{doc}: pip install {target} does not install from the checkout"
        for extra in (named.group(1) or "").split(","):
            assert not extra or extra == "<extra>" or extra in extras, f"{doc}: no extra {extra!r}"


def _readme_block(marker: str) -> str:
    """The README's ```py block that contains ``marker``."""
    text = README.read_text(encoding="utf-8")
    blocks: list[str] = [b for b in re.findall(r"```py\n(.*?)```", text, re.DOTALL) if marker in b]
    assert len(blocks) == 1, marker
    return blocks[0]


class _ResponsesApi(http.server.BaseHTTPRequestHandler):
    """The OpenAI Responses endpoint, on loopback: each POST /v1/responses is answered with
    the SDK's own scripted assistant message (``agents.testing.assistant_message``)."""

    requests: ClassVar[list[dict[str, Any]]] = []
    answer = "San Francisco."

    def do_POST(self) -> None:
        from agents.testing import assistant_message

        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, **body})
        usage = {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
                 "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
        response = {"id": f"resp_{len(self.requests)}", "object": "response", "created_at": 0, "model": body["model"],
                    "status": "completed", "output": [assistant_message(self.answer).model_dump(mode="json")],
                    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "usage": usage}
        data = json.dumps(response).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def responses_api() -> Iterator[str]:
    """The base URL of a local Responses API (no network); its requests in ``_ResponsesApi.requests``."""
    _ResponsesApi.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ResponsesApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_readme_openai_agents_script_runs_as_written(tmp_path: pathlib.Path, responses_api: str) -> None:
    """The README's OpenAI Agents SDK script, unchanged, in a child process: the SDK's own
    OpenAI model, pointed by the OpenAI client's environment at a local Responses API."""
    require("agents")
    from jsonl_sessions.integrations.openai_agents import JsonlSession

    script = tmp_path / "example.py"
    script.write_text(_readme_block("from agents import"), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY") and not k.startswith("OPENAI_")}
    env.update(OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=responses_api, OPENAI_AGENTS_DISABLE_TRACING="1",
               NO_PROXY="127.0.0.1")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[0] == _ResponsesApi.answer
    [request] = _ResponsesApi.requests  # one model call, with the question
    assert request["path"] == "/v1/responses" and "Where is the Golden Gate Bridge?" in json.dumps(request["input"])

    items: list[Any] = asyncio.run(JsonlSession("user-42", tmp_path / "sessions").get_items())
    assert [item.get("role") for item in items] == ["user", "assistant"]
    assert items[0]["content"] == "Where is the Golden Gate Bridge?"
    assert items[1]["content"][0]["text"] == _ResponsesApi.answer
    assert str(items) in done.stdout  # what the script printed is what the session holds


ADAPTER_SNIPPETS = {  # the README's adapter examples: the SDK each needs
    "integrations.langchain import": "langchain_core",
    "integrations.claude_agent_sdk import": "claude_agent_sdk",
    "integrations.langgraph import": "langgraph",
    "integrations.google_adk import": "google.adk",
    "integrations.llama_index import": "llama_index.core",
    "integrations.agent_framework import": "agent_framework",
}


@pytest.mark.parametrize("marker", sorted(ADAPTER_SNIPPETS))
def test_readme_adapter_snippet_compiles_and_its_imports_exist(marker: str) -> None:
    """The other adapter examples use the caller's model, graph or agent, so they are not
    run; each compiles (await allowed at top level, as in a notebook) and every name it
    imports exists in the installed framework."""
    require(ADAPTER_SNIPPETS[marker])
    code = _readme_block(marker)
    tree = compile(code, str(README), "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert imports and any(node.module and node.module.startswith("jsonl_sessions.") for node in imports)
    for node in imports:
        assert node.module
        module = importlib.import_module(node.module)
        for alias in node.names:
            assert hasattr(module, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), alias.name
