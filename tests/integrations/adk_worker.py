"""Workers of tests/integrations/test_integration_google_adk.py, and the events both use.

Usage: ``python adk_worker.py append ROOT`` (fsync mode: appends events numbered 0, 1, ...
to one session, each setting session, ``app:`` and ``user:`` state, printing each number
once ``append_event`` returned), ``concurrent ROOT NAME COUNT`` (COUNT events to session
NAME of a shared user, with shared state keys of its own).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.genai import types

from jsonl_sessions.integrations.google_adk import JsonlSessionService


def event_of(event_id: str, text: str, delta: dict[str, Any], timestamp: float, partial: bool = False,
             **fields: Any) -> Event:
    return Event(id=event_id, invocation_id="inv", author="user", timestamp=timestamp, partial=partial,
                 content=types.Content(role="user", parts=[types.Part(text=text)]),
                 actions=EventActions(state_delta=dict(delta)), **fields)


async def append_worker(root: str) -> None:
    service = JsonlSessionService(root)  # fsync: acknowledged means on stable storage
    session = await service.create_session(app_name="app", user_id="u", session_id="crash")
    n = 0
    while True:
        delta = {"n": n, "app:last": n, "user:last": n, "temp:scratch": n}
        await service.append_event(session, event_of(f"e{n}", "x" * (n % 5 * 200), delta, float(n + 1),
                                                     custom_metadata={"n": n}))
        sys.stdout.write(f"{n}\n")
        sys.stdout.flush()
        n += 1


async def concurrent_worker(root: str, name: str, count: int) -> None:
    service = JsonlSessionService(root, durability="flush")
    session = await service.create_session(app_name="app", user_id="u", session_id=name)
    for n in range(count):
        delta = {"n": n, f"app:{name}": n, f"user:{name}": n}
        await service.append_event(session, event_of(f"{name}-{n}", name, delta, float(n + 1), custom_metadata={"n": n}))


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    if mode == "append":
        asyncio.run(append_worker(rest[0]))
    elif mode == "concurrent":
        asyncio.run(concurrent_worker(rest[0], rest[1], int(rest[2])))
