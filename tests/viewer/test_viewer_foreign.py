"""``serve --from claude-code|codex FOLDER``: another tool's session folder shown read-only
from memory. Every page is rendered with ``serve --get`` (no server needed); the folder,
and everything around it, is byte for byte the same afterwards."""

from __future__ import annotations

import hashlib
import json
import pathlib
from typing import Any

import pytest

from jsonl_sessions.cli import main

pytest.importorskip("hypothesis", reason="the in-memory store of --from needs the testing extra")

SID = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
CODEX_ID = "0199a213-81c0-7800-8aa1-bbab2a035a53"


def _claude(uuid: str, kind: str, content: Any, parent: str | None, second: int) -> dict[str, Any]:
    return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/work/app",
            "sessionId": SID, "version": "2.1.3", "type": kind, "message": {"role": kind, "content": content},
            "uuid": uuid, "timestamp": f"2026-01-05T10:00:0{second}.000Z"}


def _write(path: pathlib.Path, objects: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(o) + "\n" for o in objects), encoding="utf-8")


@pytest.fixture
def folders(tmp_path: pathlib.Path) -> pathlib.Path:
    projects = tmp_path / "claude" / "projects"
    _write(projects / "-work-app" / f"{SID}.jsonl", [
        _claude("u1", "user", "Rename parse() to **parse_line()**", None, 1),
        _claude("a1", "assistant", [{"type": "text", "text": "Renamed <script>window.x=1</script>."}], "u1", 2),
    ])
    _write(projects / "-work-lib" / "11111111-2222-4333-8444-555555555555.jsonl", [
        _claude("u9", "user", "Another project", None, 3),
    ])
    (projects / "not-a-project").mkdir()
    line = {"timestamp": "2026-01-05T10:00:01.250Z", "type": "response_item",
            "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list the files"}]}}
    meta = {"timestamp": "2026-01-05T10:00:00.000Z", "type": "session_meta", "payload": {"id": CODEX_ID}}
    _write(tmp_path / "codex" / "sessions" / "2026" / "01" / "05" / f"rollout-{CODEX_ID}.jsonl", [meta, line])
    _write(tmp_path / "codex" / "sessions" / "2026" / "01" / "06" / "rollout-empty.jsonl", [meta | {"payload": {}}])
    return tmp_path


def _tree(root: pathlib.Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def _get(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["serve", *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_a_claude_code_projects_folder_is_shown_from_memory(folders: pathlib.Path, capsys: Any) -> None:
    before = _tree(folders)
    where = str(folders / "claude" / "projects")
    code, page = _get(capsys, where, "--from", "claude-code", "--get", "/")
    assert code == 0 and page["status"] == 200
    assert f"claude/-work-app/{SID}" in page["body"] and "claude/-work-lib/" in page["body"]
    code, page = _get(capsys, where, "--from", "claude-code", "--get", f"/session?key=claude%2F-work-app%2F{SID}")
    assert code == 0
    assert "<strong>parse_line()</strong>" in page["body"]
    assert "Renamed &lt;script&gt;window.x=1&lt;/script&gt;." in page["body"]
    # each message shows when it was said in Claude Code, not when the folder was read
    assert "2026-01-05 10:00:01 UTC" in page["body"] and "2026-01-05 10:00:02 UTC" in page["body"]
    code, page = _get(capsys, where, "--from", "claude-code", "--get", "/search?q=another")
    assert code == 0 and "claude/-work-lib/" in page["body"]
    assert _tree(folders) == before  # nothing written, in the folder or next to it


def test_a_codex_sessions_folder_is_shown_from_memory(folders: pathlib.Path, capsys: Any) -> None:
    before = _tree(folders)
    where = str(folders / "codex" / "sessions")
    code, page = _get(capsys, where, "--from", "codex", "--get", f"/session?key=codex%2F{CODEX_ID}")
    assert code == 0 and "list the files" in page["body"]
    code, page = _get(capsys, where, "--from", "codex", "--get", "/")
    assert page["body"].count('<tr class="session"') == 1  # the rollout without a conversation is left out
    assert _tree(folders) == before


def test_a_folder_without_sessions_is_a_usage_error(tmp_path: pathlib.Path, capsys: Any) -> None:
    for kind in ("claude-code", "codex"):
        capsys.readouterr()
        assert main(["serve", str(tmp_path), "--from", kind, "--get", "/"]) == 2
        assert "no " in capsys.readouterr().err
