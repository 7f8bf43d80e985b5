"""The agent SDKs are the ``test-integrations`` extra, not part of ``test``: without them
the suite still collects, and every test that needs one skips naming the extra to install;
with ``JSONL_SESSIONS_REQUIRE_INTEGRATIONS=1`` (CI) a missing SDK fails instead. Checked
in a child pytest whose imports find no SDK (an import finder that hides them)."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap

TESTS = pathlib.Path(__file__).resolve().parent.parent
INTEGRATIONS = TESTS / "integrations"
# The SDKs of the extra, and anyio (the Claude Agent SDK's, not a dependency of the core tests).
HIDDEN = ("agents", "langchain_core", "claude_agent_sdk", "trio", "anyio", "langgraph", "google.adk", "google.genai",
          "llama_index", "agent_framework")
HINT = "pip install '.[test-integrations]'"


def _pytest_without_sdks(*args: str, require: bool) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(f"""
        import sys

        class Hide:  # an import finder that finds the hidden packages nowhere
            def find_spec(self, name, path=None, target=None):
                if any(name == h or name.startswith(h + ".") for h in {HIDDEN!r}):
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
                return None

        sys.meta_path.insert(0, Hide())
        import pytest
        raise SystemExit(pytest.main(sys.argv[1:]))
    """)
    env = {k: v for k, v in os.environ.items() if k != "JSONL_SESSIONS_REQUIRE_INTEGRATIONS"}
    # The hidden packages' own plugins are not loaded (they are installed, only hidden here),
    # and no assertion rewriting: its import hook would find anyio (a pytest plugin) first.
    env["HYPOTHESIS_NO_PLUGINS"] = "1"
    if require:
        env["JSONL_SESSIONS_REQUIRE_INTEGRATIONS"] = "1"
    return subprocess.run([sys.executable, "-c", code, "-p", "no:anyio", "-p", "no:langsmith_plugin",
                           "-p", "no:cacheprovider", "--assert=plain", "-q", "-rs", *args],
                          cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_without_the_sdks_the_suite_collects_and_each_sdk_test_skips_naming_the_extra() -> None:
    # The whole suite is collected (an SDK imported at module level, unguarded, is an error
    # here) and one SDK test of a core module is run.
    done = _pytest_without_sdks(str(TESTS), "-k", "test_openai_agents_session_over_sqlite", require=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    skipped = re.findall(r"^SKIPPED \[1\] tests/integrations/(test_\w+\.py):\d+: needs .*" + re.escape(HINT) + "$",
                         done.stdout, re.MULTILINE)
    integration_modules = sorted(path.name for path in INTEGRATIONS.glob("test_integration_*.py"))
    assert integration_modules and sorted(skipped) == sorted([*integration_modules, "test_sqlite_integrations.py"])
    assert "1 skipped" not in done.stdout and f"{len(skipped)} skipped" in done.stdout  # the modules and the test


def test_with_require_integrations_a_missing_sdk_fails() -> None:
    done = _pytest_without_sdks(f"{INTEGRATIONS}/test_integration_openai_agents.py",
                                f"{INTEGRATIONS}/test_sqlite_integrations.py::test_openai_agents_session_over_sqlite",
                                "--continue-on-collection-errors", require=True)
    assert done.returncode == 1 and "1 failed" in done.stdout and "1 error" in done.stdout, done.stdout[-3000:]
    assert done.stdout.count("required (JSONL_SESSIONS_REQUIRE_INTEGRATIONS=1)") >= 2 and HINT in done.stdout
