"""AsyncSessionStore: every public SessionStore method as a coroutine in a worker thread;
hundreds of concurrent coroutines on one session stay correct; the loop never waits."""

from __future__ import annotations

import asyncio
import inspect
import pathlib
import threading
import time

import pytest

from jsonl_sessions import AsyncSessionStore, ChatMessage, Page, SessionNotFoundError, SessionStore
from jsonl_sessions.protocol import AsyncSessionBackend, backend_methods


def test_every_backend_method_is_a_coroutine_with_the_same_signature() -> None:
    """Every method of the backend contract is a coroutine of AsyncSessionStore with the
    store's signature and docstring; AsyncSessionStore satisfies the async contract."""
    names = backend_methods()
    assert {"append", "page", "copy_messages", "search"} <= set(names)  # the listing sees the contract
    for name in names:
        method = getattr(AsyncSessionStore, name)
        assert inspect.iscoroutinefunction(method), name
        assert inspect.signature(method) == inspect.signature(getattr(SessionStore, name)), name
        assert method.__doc__ and method.__doc__ == inspect.getdoc(getattr(SessionStore, name)), name
        assert inspect.iscoroutinefunction(getattr(AsyncSessionBackend, name)), name
    # A guard is bound to the thread holding it: it cannot be held across awaits.
    assert not hasattr(AsyncSessionStore, "lock")


def test_every_coroutine_runs_its_method_off_the_event_loop_thread(tmp_path: pathlib.Path) -> None:
    """Each coroutine calls the store's method of the same name in a worker thread, with
    the caller's arguments unchanged, and returns its result or raises its exception."""
    store = SessionStore(tmp_path / "s", durability="flush")
    calls: dict[str, tuple[int, tuple[object, ...], dict[str, object]]] = {}

    def spy(name: str) -> object:
        def method(*args: object, **kwargs: object) -> object:
            calls[name] = (threading.get_ident(), args, kwargs)
            if name == "delete_session":
                raise SessionNotFoundError(key=str(args[0]))
            return (name, args)
        return method

    names = backend_methods()
    for name in names:
        setattr(store, name, spy(name))  # instance attributes shadow the real methods

    async def main() -> int:
        astore = AsyncSessionStore.wrapping(store)
        for name in names:
            if name == "delete_session":
                with pytest.raises(SessionNotFoundError):
                    await astore.delete_session("k", 1, flag=True)
            else:
                assert await getattr(astore, name)("k", 1, flag=True) == (name, ("k", 1))
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert sorted(calls) == sorted(names), "a coroutine did not call its method"
    for name, (thread, args, kwargs) in calls.items():
        assert thread != loop_thread, f"{name} ran on the event loop's thread"
        assert (args, kwargs) == (("k", 1), {"flag": True}), name


def test_calls_return_and_raise_like_the_store(tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        astore = await AsyncSessionStore.open(tmp_path / "s", durability="flush")
        assert astore.durability == "flush" and astore.root == str(tmp_path / "s")
        first = await astore.append("k", {"role": "user", "content": "hi"})
        ids = await astore.append_many("k", [{"role": "assistant", "content": str(i)} for i in range(5)])
        assert await astore.get_message_count("k") == 6
        got = await astore.get_message("k", ids[2])
        assert isinstance(got, ChatMessage) and got.content == "2"
        page = await astore.page("k", limit=2)
        assert isinstance(page, Page) and [m.id for m in page.messages] == ids[-2:]
        assert await astore.copy_messages("k", "fork", up_to_message_id=first) == first
        assert await astore.truncate_messages("k", ids[0]) == 4
        assert [m.content for m in await astore.load("k")] == ["hi", "0"]
        with pytest.raises(SessionNotFoundError):
            await astore.get_messages("missing")
        assert astore.sync.load("fork") == (await astore.load("fork"))

        def unit(store: SessionStore, key: str) -> int:
            with store.lock(key):  # several calls as one unit, in one worker thread
                n = len(store.try_load(key))
                store.append(key, {"role": "user", "content": f"after {n}"})
                return n

        assert await astore.run(unit, "k") == 2

    asyncio.run(main())


def test_hundreds_of_concurrent_appends_and_reads_on_one_session(tmp_path: pathlib.Path, durability: str) -> None:
    n = 300

    async def main() -> None:
        astore = AsyncSessionStore(tmp_path / "s", durability=durability)
        await astore.append("k", {"role": "system", "content": "start"})

        async def reader(i: int) -> tuple[str, object]:
            if i % 3 == 0:
                return "page", [m.id for m in (await astore.page("k", limit=10)).messages]
            if i % 3 == 1:
                return "count", await astore.get_message_count("k")
            return "load", [m.id for m in await astore.load("k")]

        appends = [astore.append("k", {"role": "user", "content": f"c{i}"}) for i in range(n)]
        results = await asyncio.gather(*appends, *[reader(i) for i in range(n)])
        ids = results[:n]
        final = await astore.load("k")
        full = [m.id for m in final]
        assert len(final) == n + 1
        assert full == sorted(set(full)), "ids strictly increase"
        assert sorted(ids) == full[1:], "every acknowledged id is there, once"  # type: ignore[type-var]
        by_id = {m.id: m.content for m in final}
        assert all(by_id[mid] == f"c{i}" for i, mid in enumerate(ids)), "each id is its own message"
        for kind, seen in results[n:]:  # type: ignore[misc]
            if kind == "count":
                assert 1 <= seen <= n + 1
            elif kind == "load":
                assert seen == full[: len(seen)], "a load is a prefix of the history"
            else:
                first = full.index(seen[0])
                assert seen == full[first : first + len(seen)] and len(seen) == min(10, first + len(seen))

    asyncio.run(main())


def test_the_event_loop_keeps_running_while_a_call_waits_for_the_guard(tmp_path: pathlib.Path) -> None:
    """A call blocked on a session's guard (held by another thread) must not stop the loop."""
    store = SessionStore(tmp_path / "s", durability="flush")
    store.append("k", {"role": "user", "content": "x"})
    holding, release = threading.Event(), threading.Event()

    def holder() -> None:
        with store.lock("k"):
            holding.set()
            release.wait(30)

    thread = threading.Thread(target=holder)
    thread.start()
    holding.wait(30)

    async def main() -> int:
        astore = AsyncSessionStore.wrapping(store)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                if ticks == 5:
                    release.set()  # only a running loop gets here: then let the append through
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        started = time.monotonic()
        await astore.append("k", {"role": "user", "content": "y"})
        assert time.monotonic() - started < 30
        task.cancel()
        return ticks

    try:
        assert asyncio.run(main()) >= 5
    finally:
        release.set()
        thread.join()
    assert [m.content for m in store.load("k")] == ["x", "y"]
