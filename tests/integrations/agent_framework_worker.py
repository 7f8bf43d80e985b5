"""Workers of tests/integrations/test_integration_agent_framework.py.

Usage: ``python agent_framework_worker.py save ROOT`` (fsync mode: saves turns numbered 0,
1, ... of two messages each to session "crash", printing each number once
``save_messages`` returned), ``concurrent ROOT NAME COUNT`` (COUNT one-message saves from
NAME to the shared session "shared").
"""

from __future__ import annotations

import asyncio
import sys

from agent_framework import Message

from jsonl_sessions.integrations.agent_framework import JsonlHistoryProvider


def turn(n: int, name: str = "w") -> list[Message]:
    return [Message(role="user", contents=[f"{name} asks {n}"], message_id=f"{name}-q{n}"),
            Message(role="assistant", contents=[f"{name} answers {n} " + "x" * (n % 5 * 200)],
                    message_id=f"{name}-a{n}", additional_properties={"n": n})]


async def save_worker(root: str) -> None:
    history = JsonlHistoryProvider(root)  # fsync: acknowledged means on stable storage
    n = 0
    while True:
        await history.save_messages("crash", turn(n))
        sys.stdout.write(f"{n}\n")
        sys.stdout.flush()
        n += 1


async def concurrent_worker(root: str, name: str, count: int) -> None:
    history = JsonlHistoryProvider(root, durability="flush")
    for n in range(count):
        await history.save_messages("shared", turn(n, name)[:1])


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    if mode == "save":
        asyncio.run(save_worker(rest[0]))
    elif mode == "concurrent":
        asyncio.run(concurrent_worker(rest[0], rest[1], int(rest[2])))
