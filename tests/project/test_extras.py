"""The optional extras, as the documents and the import guards name them: every extra a
document or an install hint names exists in pyproject.toml, tests/README.md names each
one, the LangGraph extra installs what the README's LangGraph example needs (the graph,
not only the checkpoint interface), and each import guard says how to install its extra
from the package index and from a checkout."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None  # type: ignore[assignment]

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", ROOT / "tests" / "README.md", ROOT / "benchmarks" / "README.md",
             *sorted((ROOT / "docs").glob("*.md"))]
#: The modules behind an import guard, the extra each names, and a package to hide for it.
GUARDED = {
    "jsonl_sessions.postgres": ("postgres", "psycopg"),
    "jsonl_sessions.testing": ("testing", "hypothesis"),
    "jsonl_sessions.integrations.openai_agents": ("openai-agents", "agents"),
    "jsonl_sessions.integrations.langchain": ("langchain", "langchain_core"),
    "jsonl_sessions.integrations.claude_agent_sdk": ("claude-agent-sdk", "claude_agent_sdk"),
    "jsonl_sessions.integrations.langgraph": ("langgraph", "langgraph"),
    "jsonl_sessions.integrations.google_adk": ("google-adk", "google.adk"),
    "jsonl_sessions.integrations.llama_index": ("llama-index", "llama_index"),
    "jsonl_sessions.integrations.agent_framework": ("agent-framework", "agent_framework"),
}


def extras() -> dict[str, list[str]]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    if tomllib is not None:
        return tomllib.loads(text)["project"]["optional-dependencies"]  # type: ignore[no-any-return]
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    found: dict[str, list[str]] = {}
    for name, body in re.findall(r"^([a-z-]+) = \[(.*?)\]$", section, re.MULTILINE | re.DOTALL):
        found[name] = re.findall(r'"([^"]+)"', body)
    return found


def test_every_extra_named_in_a_document_or_a_hint_exists() -> None:
    known = set(extras())
    named: dict[str, set[str]] = {}
    sources = [*DOCUMENTS, *sorted((ROOT / "jsonl_sessions").rglob("*.py"))]
    for path in sources:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"(?:jsonl-sessions|'\.)\[([a-z,-]+)\]", text):
            for name in match.group(1).split(","):
                named.setdefault(name, set()).add(path.name)
    unknown = {name: where for name, where in named.items() if name not in known}
    assert not unknown, unknown


def test_tests_readme_names_every_extra() -> None:
    text = (ROOT / "tests" / "README.md").read_text(encoding="utf-8")
    missing = [name for name in extras() if f"`{name}`" not in text]
    assert not missing, missing


def test_the_langgraph_extra_installs_the_graph_the_readme_example_compiles() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    example = readme.split("LangGraph (a checkpointer", 1)[1].split("```py", 1)[1].split("```", 1)[0]
    assert "pip install '.[langgraph]'" in example and "StateGraph" in example
    names = {re.split(r"[<>=\[ ;]", req, maxsplit=1)[0] for req in extras()["langgraph"]}
    assert "langgraph" in names, names  # the distribution of langgraph.graph.StateGraph
    assert "langgraph-checkpoint" in names or "langgraph" in names


@pytest.mark.parametrize("module", sorted(GUARDED))
def test_each_import_guard_says_how_to_install_its_extra_from_the_index_and_from_a_checkout(module: str) -> None:
    extra, hidden = GUARDED[module]
    code = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name == {hidden!r} or name.startswith({hidden!r} + '.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "try:\n"
        f"    import {module}\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    print('imported')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          check=False)
    message = done.stdout
    assert f"pip install 'jsonl-sessions[{extra}]'" in message, message + done.stderr
    assert f"pip install -e '.[{extra}]'" in message, message
