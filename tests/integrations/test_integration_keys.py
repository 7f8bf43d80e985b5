"""What every adapter shares, checked on all seven with their real frameworks: one key
scheme (``<namespace>/<the framework's id>``, so one id used by two frameworks is two
sessions of one store) and one default store, the command line's.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
from _sdk import require

# skips without the test-integrations extra (fails in CI)
require("agents", "langchain_core", "claude_agent_sdk", "langgraph", "google.adk", "llama_index.core", "agent_framework")

from agent_framework import Message
from google.adk.sessions import BaseSessionService
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.base.id import uuid6
from llama_index.core.llms import ChatMessage as LlamaMessage

from jsonl_sessions import SessionStore
from jsonl_sessions.cli import default_root, main, resolve_root
from jsonl_sessions.integrations._common import NAMESPACES, SEPARATOR
from jsonl_sessions.integrations.agent_framework import JsonlHistoryProvider
from jsonl_sessions.integrations.claude_agent_sdk import JsonlSessionStore
from jsonl_sessions.integrations.google_adk import JsonlSessionService
from jsonl_sessions.integrations.langchain import JsonlChatMessageHistory
from jsonl_sessions.integrations.langgraph import JsonlCheckpointSaver
from jsonl_sessions.integrations.llama_index import JsonlChatStore
from jsonl_sessions.integrations.openai_agents import JsonlSession

ID = "user-42"


def write_openai(store: Any) -> None:
    asyncio.run(JsonlSession(ID, store).add_items([{"role": "user", "content": "from openai-agents"}]))


def write_langchain(store: Any) -> None:
    JsonlChatMessageHistory(ID, store).add_messages([HumanMessage("from langchain")])


def write_claude(store: Any) -> None:
    entry = {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "from claude"}}
    asyncio.run(JsonlSessionStore(store).append({"project_key": ID, "session_id": ID}, [entry]))


def write_langgraph(store: Any) -> None:
    checkpoint = Checkpoint(v=1, id=str(uuid6(clock_seq=-1)), ts="", channel_values={"a": 1},
                            channel_versions={"a": "1"}, versions_seen={}, updated_channels=None)
    JsonlCheckpointSaver(store).put({"configurable": {"thread_id": ID, "checkpoint_ns": ""}}, checkpoint, {},
                                    {"a": "1"})


def write_adk(store: Any) -> None:
    service: BaseSessionService = JsonlSessionService(store)
    asyncio.run(service.create_session(app_name=ID, user_id=ID, session_id=ID))


def write_llama_index(store: Any) -> None:
    JsonlChatStore(store).add_message(ID, LlamaMessage(role="user", content="from llama-index"))


def write_agent_framework(store: Any) -> None:
    asyncio.run(JsonlHistoryProvider(store).save_messages(ID, [Message(role="user", contents=["from agent-framework"])]))


# framework -> (a write of id ID through its adapter, the store key that write must land in)
WRITERS: dict[str, tuple[Callable[[Any], None], str]] = {
    "openai-agents": (write_openai, f"openai-agents/{ID}"),
    "langchain": (write_langchain, f"langchain/{ID}"),
    "claude-agent-sdk": (write_claude, f"claude/{ID}/{ID}"),
    "langgraph": (write_langgraph, f"langgraph/{ID}"),
    "google-adk": (write_adk, f"adk/{ID}/{ID}/{ID}"),
    "llama-index": (write_llama_index, f"llamaindex/{ID}"),
    "agent-framework": (write_agent_framework, f"agent-framework/{ID}"),
}

# Each adapter made with no store at all.
DEFAULT_STORES: dict[str, Callable[[], Any]] = {
    "openai-agents": lambda: JsonlSession(ID).store,
    "langchain": lambda: JsonlChatMessageHistory(ID).store,
    "claude-agent-sdk": lambda: JsonlSessionStore().store,
    "langgraph": lambda: JsonlCheckpointSaver().store,
    "google-adk": lambda: JsonlSessionService().store,
    "llama-index": lambda: JsonlChatStore().store,
    "agent-framework": lambda: JsonlHistoryProvider().store,
}


def test_every_adapter_is_covered() -> None:
    assert set(WRITERS) == set(DEFAULT_STORES) == set(NAMESPACES)


def test_every_adapter_keys_its_sessions_namespace_slash_id(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "store", durability="flush")
    for framework, (write, key) in WRITERS.items():
        write(store)
        assert key.startswith(NAMESPACES[framework] + SEPARATOR)
    assert sorted(store.list_sessions()) == sorted(key for _, key in WRITERS.values())  # seven, none shared


def test_the_same_id_from_two_frameworks_is_two_sessions(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "store", durability="flush")
    openai, langchain = JsonlSession(ID, store), JsonlChatMessageHistory(ID, store)
    asyncio.run(openai.add_items([{"role": "user", "content": "for the agent"}]))
    langchain.add_messages([HumanMessage("for the chain")])
    assert openai.key != langchain.key
    assert asyncio.run(openai.get_items()) == [{"role": "user", "content": "for the agent"}]
    assert [m.content for m in langchain.messages] == ["for the chain"]
    asyncio.run(openai.clear_session())  # clearing one leaves the other
    assert [m.content for m in langchain.messages] == ["for the chain"]


def test_key_prefix_reaches_sessions_written_under_another_scheme(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "store", durability="flush")
    store.append(ID, {"role": "user", "content": "written under the bare id"})
    assert asyncio.run(JsonlSession(ID, store).get_items()) == []
    assert asyncio.run(JsonlSession(ID, store, key_prefix="").get_items()) == [
        {"role": "user", "content": "written under the bare id"}]
    assert [m.content for m in JsonlChatMessageHistory(ID, store, key_prefix="").messages] == [
        "written under the bare id"]
    with pytest.raises(TypeError):
        JsonlSession(ID, store, key_prefix=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("framework", sorted(DEFAULT_STORES))
def test_default_store_is_the_command_lines(framework: str, tmp_path: pathlib.Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a default relative to the working directory would show here
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.delenv("JSONL_SESSIONS_ROOT", raising=False)
    assert DEFAULT_STORES[framework]().root == resolve_root() == os.path.abspath(default_root())
    assert resolve_root().startswith(str(tmp_path / "home"))

    monkeypatch.setenv("JSONL_SESSIONS_ROOT", str(tmp_path / "env"))  # the command line's override
    assert DEFAULT_STORES[framework]().root == resolve_root() == str(tmp_path / "env")


def test_what_an_adapter_writes_with_no_store_the_command_line_shows(tmp_path: pathlib.Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("JSONL_SESSIONS_ROOT", raising=False)
    write_openai(None)
    write_langchain(None)
    capsys.readouterr()
    assert main(["ls", "--json"]) == 0  # no --root: the same store
    listed = capsys.readouterr().out
    assert f"openai-agents/{ID}" in listed and f"langchain/{ID}" in listed


def test_the_documented_migration_moves_old_keys_to_the_new_scheme(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "store", durability="flush")
    JsonlChatStore(store, key_prefix="llamaindex:").add_message(ID, LlamaMessage(role="user", content="old"))
    asyncio.run(JsonlHistoryProvider(store, key_prefix="agent-framework:").save_messages(
        ID, [Message(role="user", contents=["old"])]))
    for key in store.list_sessions():  # the loop of docs/integrations.md
        for old, new in [("langgraph:", "langgraph/"), ("llamaindex:", "llamaindex/"),
                         ("agent-framework:", "agent-framework/")]:
            if key.startswith(old):
                store.copy_messages(key, new + key[len(old):])
                store.delete_session(key)
    assert sorted(store.list_sessions()) == [f"agent-framework/{ID}", f"llamaindex/{ID}"]
    assert [m.content for m in JsonlChatStore(store).get_messages(ID)] == ["old"]
    assert [m.text for m in asyncio.run(JsonlHistoryProvider(store).get_messages(ID))] == ["old"]
