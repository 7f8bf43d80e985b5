"""``import --from claude-code|codex`` and ``export --to claude-code``, on fixtures made by
hand in the documented shapes of those tools' session files: a Claude Code project
directory (``<project>/<session>.jsonl`` + ``<session>/subagents/agent-*.jsonl``) and Codex
CLI rollouts (``{"timestamp", "type", "payload"}`` lines, and the older bare shape). Each
fixture carries the damage those readers must tolerate: a UTF-8 byte order mark, a torn
last line, a line that is not JSON, line types nobody here knows. The exported transcript
is read back by the Claude Agent SDK's own reader (``get_session_messages``), which is
what resuming a session reads.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from _sdk import require

from jsonl_sessions import SessionExistsError, SessionQuery, SessionStore
from jsonl_sessions.cli import main
from jsonl_sessions.foreign.claude_code import ClaudeKey
from jsonl_sessions.foreign.files import parse_jsonl, read_jsonl, write_jsonl
from jsonl_sessions.foreign.transfer import export_claude_code, import_claude_code, import_codex

SID = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
BOM = b"\xef\xbb\xbf"


def claude_user(uuid: str, content: Any, parent: str | None) -> dict[str, Any]:
    return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/work/app",
            "sessionId": SID, "version": "2.1.3", "gitBranch": "main", "type": "user",
            "message": {"role": "user", "content": content}, "uuid": uuid, "timestamp": "2026-01-05T10:00:00.000Z"}


def claude_assistant(uuid: str, blocks: list[dict[str, Any]], parent: str) -> dict[str, Any]:
    return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/work/app",
            "sessionId": SID, "version": "2.1.3", "type": "assistant",
            "message": {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                        "content": blocks, "stop_reason": None, "usage": {"input_tokens": 3, "output_tokens": 9}},
            "requestId": "req_01", "uuid": uuid, "timestamp": "2026-01-05T10:00:02.000Z"}


CLAUDE = [
    {"type": "file-history-snapshot", "messageId": "m0", "snapshot": {"trackedFileBackups": {}}},  # unknown here
    claude_user("u1", "Rename parse() to parse_line()", None),
    claude_assistant("a1", [{"type": "thinking", "thinking": "grep first", "signature": "sig"}], "u1"),
    claude_assistant("a2", [{"type": "tool_use", "id": "toolu_1", "name": "Grep", "input": {"pattern": "parse"}}],
                     "a1"),
    claude_user("u2", [{"tool_use_id": "toolu_1", "type": "tool_result", "content": "parser.py:3"}], "a2"),
    claude_assistant("a3", [{"type": "text", "text": "Renamed in parser.py."}], "u2"),
    {"type": "summary", "summary": "Rename parse", "leafUuid": "a3"},
]
AGENT_META = {"agentType": "Explore", "description": "find callers"}
SUBAGENT = [claude_user("s1", "Find callers of parse", None) | {"isSidechain": True, "agentId": "1"}]


def lines(objects: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(o).encode() + b"\n" for o in objects)


@pytest.fixture
def claude_project(tmp_path: pathlib.Path) -> pathlib.Path:
    """A Claude Code project directory: BOM, a line that is not JSON, a torn last line."""
    project = tmp_path / "projects" / "-work-app"
    (project / SID / "subagents").mkdir(parents=True)
    body = lines(CLAUDE[:3]) + b"{oops\n" + lines(CLAUDE[3:]) + b'{"type":"user","uuid":"u9","mess'
    (project / f"{SID}.jsonl").write_bytes(BOM + body)
    (project / SID / "subagents" / "agent-1.jsonl").write_bytes(lines(SUBAGENT))
    (project / SID / "subagents" / "agent-1.meta.json").write_text(json.dumps(AGENT_META))
    return project


@pytest.fixture
def store(tmp_path: pathlib.Path) -> SessionStore:
    return SessionStore(tmp_path / "store", durability="flush")


def main_key() -> str:
    return ClaudeKey("-work-app", SID).store_key()


# -- the tolerant reader -----------------------------------------------------------------------
def test_reader_tolerates_bom_crlf_blank_and_bad_lines_and_a_torn_tail() -> None:
    read = parse_jsonl(BOM + b'{"a":1}\r\n\n[1,2]\n{bad\n{"b":2}\n{"c":')
    assert read.objects == [{"a": 1}, {"b": 2}]
    assert read.bad_lines == [3, 4] and read.torn
    whole = parse_jsonl(b'{"a":1}\n{"b":2}')  # a last line without its newline that parses is kept
    assert whole.objects == [{"a": 1}, {"b": 2}] and not whole.torn and not whole.bad_lines


def test_write_jsonl_is_all_or_nothing(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "out.jsonl"
    write_jsonl(target, [{"a": 1}])
    with pytest.raises(TypeError):  # SerializationError: the old file stays
        write_jsonl(target, [{"a": 2}, {"b": {1, 2}}])
    with pytest.raises(TypeError):
        write_jsonl(target, [{"a": float("nan")}])
    assert read_jsonl(target).objects == [{"a": 1}]
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no temp file left


# -- Claude Code --------------------------------------------------------------------------------
def test_import_claude_code_project_with_subagents(store: SessionStore, claude_project: pathlib.Path) -> None:
    done = import_claude_code(store, claude_project)
    assert [(d.key, d.written, d.left_out, d.bad_lines, d.torn) for d in done] == [
        (main_key(), len(CLAUDE), 0, (4,), True),
        (ClaudeKey("-work-app", SID, "subagents/agent-1").store_key(), 2, 0, (), False),
    ]
    again = import_claude_code(store, claude_project / f"{SID}.jsonl")  # idempotent: uuids already there
    assert [d.written for d in again] == [2, 1]  # only the entries without a uuid come again
    assert store.get_message_count(main_key()) == len(CLAUDE) + 2
    assert [md.key for md in store.search(SessionQuery("parse_line"))] == [main_key()]


def test_import_claude_code_takes_the_directory_of_projects(store: SessionStore, claude_project: pathlib.Path) -> None:
    other = claude_project.parent / "-work-lib"
    other.mkdir()
    (other / "a.jsonl").write_bytes(lines(SUBAGENT))
    (claude_project.parent / "notes.txt").write_text("not a project")
    done = import_claude_code(store, claude_project.parent)  # ~/.claude/projects
    assert [d.key for d in done] == [ClaudeKey("-work-app", SID).store_key(),
                                     ClaudeKey("-work-app", SID, "subagents/agent-1").store_key(),
                                     ClaudeKey("-work-lib", "a").store_key()]
    assert store.get_message_count(ClaudeKey("-work-lib", "a").store_key()) == len(SUBAGENT)
    (claude_project.parent / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="project directories"):
        import_claude_code(store, claude_project.parent / "empty")


def test_imported_claude_session_is_what_the_sdk_adapter_resumes(store: SessionStore,
                                                                 claude_project: pathlib.Path) -> None:
    require("claude_agent_sdk")
    import asyncio

    from claude_agent_sdk import get_session_messages_from_store

    from jsonl_sessions.integrations.claude_agent_sdk import JsonlSessionStore

    import_claude_code(store, claude_project)
    adapter = JsonlSessionStore(store)
    key = {"project_key": "-work-app", "session_id": SID}
    assert asyncio.run(adapter.load(key)) == CLAUDE  # type: ignore[arg-type]
    assert asyncio.run(adapter.list_subkeys(key)) == ["subagents/agent-1"]  # type: ignore[arg-type]
    subagent = {**key, "subpath": "subagents/agent-1"}
    assert asyncio.run(adapter.load(subagent)) == [*SUBAGENT, {**AGENT_META, "type": "agent_metadata"}]  # type: ignore[arg-type]
    chain = asyncio.run(get_session_messages_from_store(adapter, SID, directory="/work/app"))
    assert [m.uuid for m in chain] == ["u1", "a1", "a2", "u2", "a3"]


def test_import_stores_what_the_sdks_own_import_stores(tmp_path: pathlib.Path, claude_project: pathlib.Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    require("claude_agent_sdk")
    import asyncio

    from claude_agent_sdk import import_session_to_store

    from jsonl_sessions.integrations.claude_agent_sdk import JsonlSessionStore

    (claude_project / f"{SID}.jsonl").write_bytes(lines(CLAUDE))  # the SDK's import reads clean files only
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude_project.parent.parent))
    by_sdk = JsonlSessionStore(tmp_path / "by-sdk", durability="flush")
    asyncio.run(import_session_to_store(SID, by_sdk))
    ours = SessionStore(tmp_path / "ours", durability="flush")
    import_claude_code(ours, claude_project)
    for key in (main_key(), ClaudeKey("-work-app", SID, "subagents/agent-1").store_key()):
        assert [m.to_dict() | {"id": "", "created_at": 0} for m in ours.load(key)] == [
            m.to_dict() | {"id": "", "created_at": 0} for m in by_sdk.store.load(key)]


def sdk_read(config: pathlib.Path, monkeypatch: pytest.MonkeyPatch, session_id: str) -> list[Any]:
    """What the Claude Agent SDK reads (as on resume) from ``config``'s project -work-app."""
    require("claude_agent_sdk")
    from claude_agent_sdk import get_session_messages

    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    return list(get_session_messages(session_id, directory="/work/app"))


def test_export_round_trips_an_imported_transcript(tmp_path: pathlib.Path, claude_project: pathlib.Path,
                                                   monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    root = str(tmp_path / "store")
    assert main(["--root", root, "import", "--from", "claude-code", str(claude_project)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"imported {len(CLAUDE)} lines into {main_key()!r} "
                      "(1 unreadable line(s) skipped (line 4...); a torn last line ignored)")
    target = tmp_path / "config" / "projects" / "-work-app"
    target.mkdir(parents=True)
    assert main(["--root", root, "export", main_key(), "--to", "claude-code", "-o", str(target)]) == 0
    written = target / f"{SID}.jsonl"
    assert read_jsonl(written).objects == CLAUDE  # every entry as Claude Code wrote it
    chain = sdk_read(tmp_path / "config", monkeypatch, SID)
    assert [m.uuid for m in chain] == ["u1", "a1", "a2", "u2", "a3"]


def test_export_turns_plain_and_agents_sdk_messages_into_a_resumable_transcript(
        store: SessionStore, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store.append_many("chat", [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
        # as the OpenAI Agents SDK adapter stores a message item and a function call
        {"role": "user", "content": [{"type": "input_text", "text": "And now?"}], "item": {"role": "user"},
         "content_at": 1},
        {"role": "function_call", "content": None, "item": {"type": "function_call", "name": "f", "call_id": "c"}},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
         "item": {"type": "message", "role": "assistant", "id": "msg_1"}, "content_at": 3},
    ])
    export = export_claude_code(store, "chat", cwd="/work/app")
    assert export.left_out == 3  # system, tool result, function call: no Claude Code form
    assert [e["type"] for e in export.entries] == ["user", "assistant", "user", "assistant"]
    assert export.entries[0]["parentUuid"] is None
    assert [e["parentUuid"] for e in export.entries[1:]] == [e["uuid"] for e in export.entries[:-1]]
    assert export_claude_code(store, "chat").entries[2]["uuid"] == export.entries[2]["uuid"]  # stable
    project = tmp_path / "config" / "projects" / "-work-app"
    project.mkdir(parents=True)
    write_jsonl(project / f"{export.session_id}.jsonl", export.entries)
    chain = sdk_read(tmp_path / "config", monkeypatch, export.session_id)
    assert [(m.type, m.message["content"]) for m in chain] == [
        ("user", "Hi"),
        ("assistant", [{"type": "text", "text": "Hello!"}]),
        ("user", [{"type": "text", "text": "And now?"}]),
        ("assistant", [{"type": "text", "text": "Done."}]),
    ]


def test_export_of_times_no_datetime_holds(store: SessionStore) -> None:
    """A stored created_at may be any 64-bit integer; one outside years 1-9999 exports with
    the epoch's timestamp instead of failing the whole export."""
    store.append_many("t", [{"role": "user", "content": "far", "created_at": 2**64 - 1},
                            {"role": "assistant", "content": "before", "created_at": -2**63},
                            {"role": "user", "content": "now", "created_at": 1_700_000_000_123}])
    stamps = [e["timestamp"] for e in export_claude_code(store, "t").entries]
    assert stamps == ["1970-01-01T00:00:00.000Z", "1970-01-01T00:00:00.000Z", "2023-11-14T22:13:20.123Z"]


def test_export_errors(store: SessionStore, tmp_path: pathlib.Path, capsys: Any) -> None:
    root = str(tmp_path / "store")
    assert main(["--root", root, "export", "missing", "--to", "claude-code"]) == 1
    assert "missing" in capsys.readouterr().err
    store.append("s", {"role": "user", "content": "hi"})
    assert main(["--root", root, "export", "s", "-o", str(tmp_path / "x.jsonl")]) == 2  # -o needs --to
    assert not (tmp_path / "x.jsonl").exists()
    assert main(["--root", root, "export", "s", "--to", "claude-code", "--session-id", SID]) == 0
    [entry] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert entry["sessionId"] == SID and entry["message"] == {"role": "user", "content": "hi"}


# -- Codex --------------------------------------------------------------------------------------
CODEX_ID = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
USER_ITEM = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list the files"}]}
CALL = {"type": "function_call", "name": "shell", "arguments": "{\"command\":[\"ls\"]}", "call_id": "call_1"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "{\"output\":\"a.py\\n\"}"}
REASONING = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "run ls"}], "encrypted_content": "x"}
ANSWER = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a.py"}], "id": "m1"}


def codex_line(kind: str, payload: dict[str, Any], second: int = 0) -> dict[str, Any]:
    return {"timestamp": f"2026-01-05T10:00:{second:02d}.250Z", "type": kind, "payload": payload}


def rollout(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "sessions" / "2026" / "01" / "05" / f"rollout-2026-01-05T10-00-00-{CODEX_ID}.jsonl"
    path.parent.mkdir(parents=True)
    body = lines([
        codex_line("session_meta", {"id": CODEX_ID, "timestamp": "2026-01-05T10:00:00.000Z", "cwd": "/work/app",
                                    "originator": "codex_cli_rs", "cli_version": "0.65.0", "instructions": None}),
        codex_line("turn_context", {"cwd": "/work/app", "model": "gpt-5-codex"}),
        codex_line("response_item", USER_ITEM, 1),
        codex_line("event_msg", {"type": "user_message", "message": "list the files"}, 1),
        codex_line("response_item", REASONING, 2),
        codex_line("response_item", CALL, 3),
        codex_line("response_item", OUTPUT, 4),
        codex_line("ghost_snapshot", {"commit": "abc"}, 4),  # a type nobody here knows
        codex_line("response_item", ANSWER, 5),
        codex_line("compacted", {"message": "The user listed files; a.py exists."}, 6),
    ])
    path.write_bytes(BOM + body + b'{"timestamp":"2026-01-05T10:00:07.000Z","type":"respo')
    return path


def test_import_codex_rollout(store: SessionStore, tmp_path: pathlib.Path) -> None:
    done = import_codex(store, rollout(tmp_path))
    key = f"codex/{CODEX_ID}"
    assert (done.key, done.written, done.left_out, done.torn) == (key, 6, 3, True)
    lines_ = store.load(key)
    assert [m.role for m in lines_] == ["user", "reasoning", "function_call", "function_call_output", "assistant",
                                        "user"]
    assert lines_[0].created_at == 1767607201250  # the rollout's own times
    assert [m.kind for m in lines_][-1] == "compaction"
    meta = store.get_session_metadata(key)
    assert meta is not None and meta.context["codex.cwd"] == "/work/app"
    assert meta.context["codex.cli_version"] == "0.65.0"
    assert [md.key for md in store.search(SessionQuery("list the files"))] == [key]
    with pytest.raises(SessionExistsError):
        import_codex(store, rollout(tmp_path / "again"))
    assert store.get_message_count(key) == 6  # refused: nothing added


def test_imported_codex_items_read_back_exactly_through_the_agents_sdk_adapter(store: SessionStore,
                                                                                tmp_path: pathlib.Path) -> None:
    require("agents")
    import asyncio

    from jsonl_sessions.integrations.openai_agents import JsonlSession

    import_codex(store, rollout(tmp_path))
    items = asyncio.run(JsonlSession(CODEX_ID, store, key_prefix="codex/").get_items())
    summary = {"role": "user", "content": "The user listed files; a.py exists."}
    assert items == [USER_ITEM, REASONING, CALL, OUTPUT, ANSWER, summary]


def test_import_codex_older_bare_shape(store: SessionStore, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "rollout-2025-05-01-old.jsonl"
    path.write_bytes(lines([
        {"id": CODEX_ID, "timestamp": "2025-05-01T09:00:00.000Z", "instructions": ""},
        {"record_type": "state"},
        USER_ITEM, CALL, OUTPUT, {"record_type": "state"}, ANSWER,
    ]))
    done = import_codex(store, path)
    assert (done.key, done.written, done.left_out) == (f"codex/{CODEX_ID}", 4, 2)
    assert [m.role for m in store.load(done.key)] == ["user", "function_call", "function_call_output", "assistant"]


def test_codex_cli_directory_import_and_errors(tmp_path: pathlib.Path, capsys: Any) -> None:
    root = str(tmp_path / "store")
    path = rollout(tmp_path)
    empty = path.parent / "rollout-empty.jsonl"
    empty.write_bytes(lines([codex_line("session_meta", {"id": "e"}), codex_line("event_msg", {})]))
    assert main(["--root", root, "import", "--from", "codex", str(tmp_path / "sessions")]) == 1
    captured = capsys.readouterr()
    assert f"imported 6 lines into 'codex/{CODEX_ID}' (3 left out; a torn last line ignored)" in captured.out
    assert "holds no Codex conversation item" in captured.err
    assert SessionStore(root).list_sessions() == [f"codex/{CODEX_ID}"]  # the empty rollout created nothing
    assert main(["--root", root, "import", "--from", "codex", str(path)]) == 1  # exists: refused
    assert "already exists" in capsys.readouterr().err
    assert main(["--root", root, "import", "--from", "codex", "--append", str(path)]) == 0
    assert SessionStore(root).get_message_count(f"codex/{CODEX_ID}") == 12
    assert main(["--root", root, "import", "--from", "codex", str(path), "extra"]) == 2
    assert main(["--root", root, "import", "only-a-key"]) == 2
    assert main(["--root", root, "import", "--from", "codex", str(tmp_path / "nope")]) == 1


def test_import_from_with_json_prints_one_object_a_file(tmp_path: pathlib.Path, claude_project: pathlib.Path,
                                                        capsys: Any) -> None:
    root = str(tmp_path / "store")
    assert main(["--root", root, "import", "--from", "claude-code", str(claude_project), "--json"]) == 0
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert first == {"key": main_key(), "written": len(CLAUDE), "left_out": 0, "bad_lines": [4], "torn": True}
