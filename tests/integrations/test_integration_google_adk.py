"""JsonlSessionService against the real google-adk: a Hypothesis comparison with ADK's own
``InMemorySessionService`` as the reference model (create, get with ``num_recent_events``
/ ``after_timestamp``, list, delete, append with app/user/session/temp state and partial
events, get_user_state), lossless events (bytes, grounding, usage...), a real ``Runner``
with an agent that needs no model, SIGKILL in the middle of appends (fsync mode, checked
against the worker's acknowledgements, shared state included), several processes at
once, and values with no JSON form.

Workers: tests/integrations/adk_worker.py.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import signal
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from _sdk import require

require("google.adk")  # skips without the test-integrations extra (fails in CI)

from adk_worker import event_of
from google.adk.agents.base_agent import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError as AdkSessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.platform import time as platform_time
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.in_memory_session_service import InMemorySessionService
from google.genai import types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from missing_package import assert_missing_framework_error
from sigkill import kill_after, run_workers

from jsonl_sessions import SerializationError
from jsonl_sessions.integrations import google_adk as adapter
from jsonl_sessions.integrations.google_adk import JsonlSessionService

SOAK = os.environ.get("JSONL_SESSIONS_SOAK") == "1"
WORKER = str(pathlib.Path(__file__).with_name("adk_worker.py"))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def service(tmp_path: pathlib.Path) -> JsonlSessionService:
    return JsonlSessionService(tmp_path / "store", durability="flush")


# -- InMemorySessionService as the reference model ---------------------------------------------
APPS, USERS, SIDS = ["a1", "a/2"], ["u1", "u 2"], ["s1", " s2 ", "s3"]
#: Few owners, so that most steps meet a session an earlier step made: two users of one app,
#: two sessions of one user, an app of its own; " s2 " is stored as "s2".
OWNERS = [("a1", "u1", "s1"), ("a1", "u1", " s2 "), ("a1", "u 2", "s1"), ("a/2", "u1", "s3")]
state_key = st.sampled_from(["k", "n", "app:k", "app:n", "user:k", "temp:k", "temp:n"])
state_value = st.one_of(st.integers(-5, 5), st.text(max_size=4), st.lists(st.booleans(), max_size=2), st.none())
state = st.dictionaries(state_key, state_value, max_size=3)
owner = st.sampled_from(OWNERS)
append = st.tuples(st.just("append"), owner, state, st.text(max_size=6), st.booleans(), st.integers(0, 3))
op = st.one_of(
    st.tuples(st.just("create"), owner, state),
    append, append, append,  # the step most worth varying
    st.tuples(st.just("get"), owner, st.none() | st.integers(0, 4), st.none() | st.integers(0, 20)),
    st.tuples(st.just("list"), st.sampled_from(APPS), st.none() | st.sampled_from(USERS)),
    st.tuples(st.just("delete"), owner),
    st.tuples(st.just("user_state"), st.sampled_from(APPS), st.sampled_from(USERS)),
)


async def _do(service: Any, step: tuple[Any, ...], clock: int) -> Any:
    """Run ``step`` on ``service``; what a caller can observe of it (the result or the error type)."""
    kind, *args = step
    try:
        if kind == "create":
            (app, user, sid), initial = args
            return await service.create_session(app_name=app, user_id=user, session_id=sid, state=initial)
        if kind == "append":
            (app, user, sid), delta, text, partial, repeat = args
            session = await service.get_session(app_name=app, user_id=user, session_id=sid)
            if session is None:
                return None
            for _ in range(1 + (repeat == 3)):  # sometimes a re-delivery of the same event
                returned = await service.append_event(session, event_of(f"e{clock}", text, delta, float(clock), partial))
            return returned, session
        if kind == "get":
            (app, user, sid), recent, after = args
            config = None if recent is None and after is None else GetSessionConfig(
                num_recent_events=recent, after_timestamp=None if after is None else float(after))
            return await service.get_session(app_name=app, user_id=user, session_id=sid, config=config)
        if kind == "list":
            app, user = args
            return await service.list_sessions(app_name=app, user_id=user)
        if kind == "delete":
            (app, user, sid), = args
            return await service.delete_session(app_name=app, user_id=user, session_id=sid)
        app, user = args
        return await service.get_user_state(app_name=app, user_id=user)
    except (AlreadyExistsError, AdkSessionNotFoundError) as exc:
        return type(exc)


@settings(max_examples=400 if SOAK else 40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(initial=st.lists(state, min_size=len(OWNERS), max_size=len(OWNERS)), steps=st.lists(op, max_size=25))
def test_agrees_with_in_memory_session_service(
    tmp_path_factory: pytest.TempPathFactory, initial: list[dict[str, Any]], steps: list[Any]
) -> None:
    root = tmp_path_factory.mktemp("store")
    steps = [("create", who, first) for who, first in zip(OWNERS, initial)] + steps  # every owner has a session

    async def main() -> None:
        model, ours = InMemorySessionService(), JsonlSessionService(root, durability="flush")
        for clock, step in enumerate(steps, start=1):
            platform_time.set_time_provider(lambda now=float(clock): now)  # both services read ADK's clock
            try:
                assert await _do(ours, step, clock) == await _do(model, step, clock), step
            finally:
                platform_time.reset_time_provider()
        reopened = JsonlSessionService(root, durability="flush")  # nothing lives in the object
        for app in APPS:
            assert await reopened.list_sessions(app_name=app) == await model.list_sessions(app_name=app)
            for user in USERS:
                for sid in SIDS:
                    assert (await reopened.get_session(app_name=app, user_id=user, session_id=sid)
                            == await model.get_session(app_name=app, user_id=user, session_id=sid))

    run(main())


# -- events and state -----------------------------------------------------------------------------
def test_get_session_config_edges_as_in_memory(service: JsonlSessionService) -> None:
    async def main() -> None:
        model = InMemorySessionService()
        for svc in (model, service):
            session = await svc.create_session(app_name="app", user_id="u", session_id="s")
            for n in range(1, 6):
                await svc.append_event(session, event_of(f"e{n}", f"t{n}", {}, float(n)))
        for recent in (None, 0, 1, 3, 9):
            for after in (None, 0.5, 4.0, 4.5, 5.0, 50.0):
                config = GetSessionConfig(num_recent_events=recent, after_timestamp=after)
                got = await service.get_session(app_name="app", user_id="u", session_id="s", config=config)
                want = await model.get_session(app_name="app", user_id="u", session_id="s", config=config)
                assert got is not None and want is not None and got.events == want.events, (recent, after)
        got = await service.get_session(app_name="app", user_id="u", session_id="s",
                                        config=GetSessionConfig(after_timestamp=4.0))
        assert got is not None and [e.timestamp for e in got.events] == [4.0, 5.0]  # inclusive

    run(main())


def test_every_event_field_round_trips(service: JsonlSessionService) -> None:
    async def main() -> None:
        session = await service.create_session(app_name="app", user_id="u")
        event = Event(
            invocation_id="inv", author="model", branch="root.child",
            content=types.Content(role="model", parts=[
                types.Part(text="see the picture"),
                types.Part.from_bytes(data=b"\xff\x00\x89PNG", mime_type="image/png"),
                types.Part.from_function_call(name="lookup", args={"q": "x", "n": [1, 2]}),
            ]),
            grounding_metadata=types.GroundingMetadata(search_entry_point=types.SearchEntryPoint(sdk_blob=b"\x01\xfe")),
            usage_metadata=types.GenerateContentResponseUsageMetadata(prompt_token_count=3, total_token_count=5),
            actions=EventActions(state_delta={"k": {"nested": [1, None]}}, artifact_delta={"f.txt": 2},
                                 transfer_to_agent="other", escalate=True),
            long_running_tool_ids={"t1", "t2"}, turn_complete=True, error_code="E", interrupted=True,
            custom_metadata={"trace": ["a", 1.5]},
        )
        await service.append_event(session, event)
        got = await service.get_session(app_name="app", user_id="u", session_id=session.id)
        assert got == session and got.events == [event]
        line = service.store.load(service.keys.session("app", "u", session.id))[-1]
        assert line.content == "see the picture"  # the event's text: what search and the CLI show

    run(main())


def test_temp_state_reaches_the_session_object_only(service: JsonlSessionService) -> None:
    async def main() -> None:
        session = await service.create_session(app_name="app", user_id="u", state={"temp:t": 0, "k": 1})
        assert session.state == {"k": 1}
        await service.append_event(session, Event(author="a", actions=EventActions(
            state_delta={"temp:t": 2, "app:a": 3, "user:b": 4, "k": 5})))
        assert session.state == {"k": 5, "temp:t": 2, "app:a": 3, "user:b": 4}
        got = await service.get_session(app_name="app", user_id="u", session_id=session.id)
        assert got is not None and got.state == {"k": 5, "app:a": 3, "user:b": 4}
        assert got.events[0].actions.state_delta == {"app:a": 3, "user:b": 4, "k": 5}
        assert await service.get_user_state(app_name="app", user_id="u") == {"b": 4}
        other = await service.create_session(app_name="app", user_id="v")
        assert other.state == {"app:a": 3}

    run(main())


def test_bad_values_raise_and_write_nothing(service: JsonlSessionService) -> None:
    async def main() -> None:
        with pytest.raises(SerializationError):
            await service.create_session(app_name="app", user_id="u", session_id="s", state={"k": object()})
        assert service.store.list_sessions() == []
        session = await service.create_session(app_name="app", user_id="u", session_id="s", state={"k": 1})
        before = {key: service.store.load(key) for key in service.store.list_sessions()}
        for delta in ({"app:x": 1, "k": lambda: 0}, {"user:y": float("nan")}):
            with pytest.raises(SerializationError):
                await service.append_event(session, Event(author="a", actions=EventActions(state_delta=delta)))
        with pytest.raises(TypeError):  # SerializationError is a TypeError too
            await service.append_event(session, Event(author="a", custom_metadata={"x": object()}))
        assert {key: service.store.load(key) for key in service.store.list_sessions()} == before
        assert session.events == [] and session.state == {"k": 1}  # the caller's object is unchanged too

    run(main())


def test_an_unstored_session_is_refused(service: JsonlSessionService) -> None:
    async def main() -> None:
        session = await service.create_session(app_name="app", user_id="u", session_id="s")
        await service.delete_session(app_name="app", user_id="u", session_id="s")
        with pytest.raises(AdkSessionNotFoundError):
            await service.append_event(session, Event(author="a"))
        assert service.store.list_sessions() == []

    run(main())


def test_a_step_cut_after_its_event_line_is_completed_once(service: JsonlSessionService) -> None:
    """The files a SIGKILL leaves after an event line with app/user changes was written and
    before (or while) those changes reached the shared state: the next call completes it."""
    from jsonl_sessions import ChatMessage

    async def main() -> None:
        session = await service.create_session(app_name="app", user_id="u", session_id="s")
        key, app_key, user_key = service.keys.session("app", "u", "s"), service.keys.app("app"), service.keys.user("app", "u")
        for n, app_done in ((1, False), (2, True)):  # cut before any shared line / after the app line
            event = event_of(f"e{n}", "t", {"app:x": n, "user:y": n, "k": n}, float(n))
            line_id = service.store.append(key, ChatMessage("event", "t", extra={
                "event": event.model_dump(mode="json", exclude_none=True, by_alias=True), "session_delta": {"k": n},
                "shared": {"app": {"x": n}, "user": {"y": n}}}))
            if app_done:
                service.store.append(app_key, {"role": "delta", "delta": {"x": n}, "source": key, "line": line_id})
            if n == 1:  # completed by a read
                got = await service.get_session(app_name="app", user_id="u", session_id="s")
            else:  # completed by the next append
                await service.append_event(session, event_of("e3", "t", {"k": 3}, 3.0))
                got = await service.get_session(app_name="app", user_id="u", session_id="s")
            assert got is not None and got.state == {"k": got.state["k"], "app:x": n, "user:y": n}
            assert [m.extra["delta"] for m in service.store.load(app_key)] == [{"x": m} for m in range(1, n + 1)]
            assert [m.extra["delta"] for m in service.store.load(user_key)] == [{"y": m} for m in range(1, n + 1)]
        assert [e.id for e in got.events] == ["e1", "e2", "e3"]

    run(main())


# -- a real Runner ------------------------------------------------------------------------------------
class Counter(BaseAgent):
    """Answers each message with a count kept in session, user and app state (no model)."""

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        n = int(ctx.session.state.get("n", 0)) + 1
        yield Event(author=self.name, invocation_id=ctx.invocation_id,
                    content=types.Content(role="model", parts=[types.Part(text=f"message {n}")]),
                    actions=EventActions(state_delta={"n": n, "user:seen": n, "app:total": n, "temp:scratch": n}))


def test_a_runner_keeps_its_conversation_across_service_objects(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"

    async def turn(text: str) -> list[str]:
        runner = Runner(app_name="app", agent=Counter(name="counter"),
                        session_service=JsonlSessionService(root, durability="flush"), auto_create_session=True)
        message = types.Content(role="user", parts=[types.Part(text=text)])
        return [e.content.parts[0].text or "" async for e in runner.run_async(user_id="u", session_id="chat",
                                                                              new_message=message)
                if e.content and e.content.parts]

    async def main() -> None:
        assert await turn("hi") == ["message 1"]
        assert await turn("again") == ["message 2"]
        got = await JsonlSessionService(root).get_session(app_name="app", user_id="u", session_id="chat")
        assert got is not None
        assert [e.content.parts[0].text for e in got.events if e.content and e.content.parts] == [
            "hi", "message 1", "again", "message 2"]
        assert got.state == {"n": 2, "user:seen": 2, "app:total": 2}

    run(main())


# -- SIGKILL ------------------------------------------------------------------------------------------
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.parametrize("trial", range(10 if SOAK else 1))
def test_sigkill_while_appending_loses_no_acknowledged_event(tmp_path: pathlib.Path, trial: int) -> None:
    root, rng = str(tmp_path / "store"), random.Random(trial)
    acked = kill_after([WORKER, "append", root], rng.randint(5, 40), rng, jitter=0.01)

    async def check() -> None:
        service = JsonlSessionService(root)
        got = await service.get_session(app_name="app", user_id="u", session_id="crash")  # completes a cut step
        assert got is not None
        numbers = [e.custom_metadata["n"] for e in got.events]  # type: ignore[index]
        assert numbers in (list(range(acked + 1)), list(range(acked + 2)))  # the one in flight: whole or absent
        last = numbers[-1]
        assert got.state == {"n": last, "app:last": last, "user:last": last}
        assert await service.get_user_state(app_name="app", user_id="u") == {"last": last}

    run(check())


# -- several processes ----------------------------------------------------------------------------
def test_processes_appending_at_once_lose_nothing(tmp_path: pathlib.Path) -> None:
    root, count, names = str(tmp_path / "store"), 20, ["p0", "p1"]
    run_workers([[WORKER, "concurrent", root, name, str(count)] for name in names])

    async def check() -> None:
        service = JsonlSessionService(root)
        listed = await service.list_sessions(app_name="app", user_id="u")
        assert sorted(s.id for s in listed.sessions) == names
        for name in names:
            got = await service.get_session(app_name="app", user_id="u", session_id=name)
            assert got is not None and [e.custom_metadata["n"] for e in got.events] == list(range(count))  # type: ignore[index]
            assert got.state[f"user:{name}"] == count - 1 and got.state[f"app:{name}"] == count - 1
        assert await service.get_user_state(app_name="app", user_id="u") == {name: count - 1 for name in names}

    run(check())


# -- packaging ------------------------------------------------------------------------------------------
def test_missing_adk_gives_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    assert_missing_framework_error(monkeypatch, "google.adk", adapter, "google-adk")
