"""Workers of tests/integrations/test_integration_llama_index.py.

Usage: ``python llama_index_worker.py add ROOT`` (fsync mode: adds messages numbered 0, 1,
... to chat "crash", printing each number once ``add_message`` returned), ``concurrent
ROOT NAME COUNT`` (COUNT messages from NAME to the shared chat "shared").
"""

from __future__ import annotations

import sys

from llama_index.core.llms import ChatMessage

from jsonl_sessions.integrations.llama_index import JsonlChatStore


def message(n: int, name: str = "w") -> ChatMessage:
    role = "user" if n % 2 == 0 else "assistant"
    return ChatMessage(role=role, content=f"{name} {n} " + "x" * (n % 5 * 200), additional_kwargs={"n": n, "name": name})


def add_worker(root: str) -> None:
    chats = JsonlChatStore(root)  # fsync: acknowledged means on stable storage
    n = 0
    while True:
        chats.add_message("crash", message(n))
        sys.stdout.write(f"{n}\n")
        sys.stdout.flush()
        n += 1


def concurrent_worker(root: str, name: str, count: int) -> None:
    chats = JsonlChatStore(root, durability="flush")
    for n in range(count):
        chats.add_message("shared", message(n, name))


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    if mode == "add":
        add_worker(rest[0])
    elif mode == "concurrent":
        concurrent_worker(rest[0], rest[1], int(rest[2]))
