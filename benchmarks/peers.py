"""jsonl_sessions against the stores an agent developer would use instead, in one run:
LangChain ``FileChatMessageHistory``, openai-agents ``SQLiteSession``, llama-index
``SimpleChatStore``, stdlib sqlite3 (WAL, the fair schema of ``benchmarks/run.py``) and the
raw-file floor. Then the same SIGKILL-at-random-moments workload over each of them.

Run from the repository root (``pip install -e '.[bench]'`` installs the peers)::

    python -m benchmarks.peers                     # full run (~3.5 min)
    python -m benchmarks.peers --quick             # smaller sessions, fewer kills (~1 min)
    python -m benchmarks.peers --markdown --json benchmarks/results/peers.json \\
        --chart benchmarks/results/peers.png | tee benchmarks/results/peers.txt

Workload, the same for every implementation, one after another in this process: append
1,000 messages one by one into a new session; then, on sessions of 1k, 5k, 20k and 100k
messages: load the whole session, read the newest 50, count the messages, remove the last
one. Each implementation runs in its default configuration (the durable one where it has a
choice) through its most efficient public API; where it has no call for an operation the
row says what it does instead. A peer that is not installed is skipped with a note.

Conventions of ``benchmarks/run.py``: every call timed alone with ``perf_counter_ns``,
garbage collector paused, a warm-up call first, implementations taking turns, medians and
p95, ratios of medians measured in the same run, an environment header; exit status 0
(a measurement, never a gate). See the "Peers" section of benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib
import importlib.metadata
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar

if __package__ in (None, ""):  # `python benchmarks/peers.py` (also the SIGKILL worker): import from this checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import orjson

from benchmarks.environ import environment, header_lines, load_average
from benchmarks.history import floor_lines_before, label
from benchmarks.measure import Group, Row, gc_paused, interleaved, settle, time_calls
from benchmarks.table import fmt_ns, fmt_ratio, groups_text, header_text, to_json
from benchmarks.workload import MessageFactory, Msg, SqlitePeer, encoded_lines, orjson_floor_load
from jsonl_sessions import SessionStore
from jsonl_sessions.keys import key_to_stem

_pc = time.perf_counter_ns
_loads = orjson.loads
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
PAGE = 50  # "the newest page"
APPEND_KEY = "append"
KILL_KEY = "killed"
WARMUP_APPENDS = 10
APPEND_BLOCK = 50  # appends per turn in the append benchmark
ROUNDS = 5  # turns per implementation in the other benchmarks
BENCH_EXTRA = "pip install 'jsonl-sessions[bench]'"


# -- sizes --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sizes:
    appends: int = 1_000  # messages appended one by one into a new session
    sessions: tuple[int, ...] = (1_000, 5_000, 20_000, 100_000)  # messages per session
    budget_s: float = 0.4  # timed seconds per operation, size and implementation (after one warm-up call)
    min_calls: int = 3
    max_calls: int = 300
    kill_seed: int = 500  # messages in the session when the SIGKILL workload starts appending
    kill_delay: tuple[float, float] = (0.05, 0.6)  # kill this many seconds (uniform) after the worker is ready

    def scaled(self, factor: float) -> Sizes:
        return replace(
            self,
            appends=max(20, round(self.appends * factor)),
            sessions=tuple(max(60 * 2**i, round(n * factor)) for i, n in enumerate(self.sessions)),
            budget_s=self.budget_s * factor,
            max_calls=max(self.min_calls, round(self.max_calls * factor)),
            kill_seed=max(10, round(self.kill_seed * factor)),
            kill_delay=(self.kill_delay[0], max(self.kill_delay[0] + 0.01, self.kill_delay[1] * factor)),
        )


FULL = Sizes()
QUICK = Sizes(appends=300, sessions=(1_000, 5_000, 20_000), budget_s=0.1, max_calls=100, kill_seed=200,
              kill_delay=(0.02, 0.3))
#: The sizes the README tables show (all sizes are in the text output and the JSON).
TABLE_SIZES = (5_000, 100_000)
OPS = ("load", "newest", "count", "remove_last")
OP_TITLES = {"load": "load the whole session", "newest": f"newest {PAGE} messages", "count": "message count",
             "remove_last": "remove the last message"}


# -- importing peers ----------------------------------------------------------------------
@contextlib.contextmanager
def quiet() -> Iterator[list[warnings.WarningMessage]]:
    """Third-party code runs with its warnings recorded, not printed (nor raised under
    pytest's filterwarnings=error): langchain-community warns on import that it is sunset."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def version_of(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


# -- messages in each peer's own types ----------------------------------------------------
def tool_args(call: Msg) -> dict[str, Any]:
    args = orjson.loads(call["function"]["arguments"])
    return args if isinstance(args, dict) else {"value": args}


def to_langchain(msgs: Sequence[Msg]) -> list[Any]:
    """OpenAI-style dicts as LangChain messages (tool calls in LangChain's own form)."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[Any] = []
    for m in msgs:
        role = m["role"]
        if role == "user":
            out.append(HumanMessage(content=m["content"]))
        elif role == "system":
            out.append(SystemMessage(content=m["content"]))
        elif role == "assistant":
            calls = [{"name": c["function"]["name"], "args": tool_args(c), "id": c["id"], "type": "tool_call"}
                     for c in m.get("tool_calls", ())]
            out.append(AIMessage(content=m["content"], tool_calls=calls))
        else:
            out.append(ToolMessage(content=m["content"], tool_call_id=m["tool_call_id"], name=m["name"]))
    return out


def to_llama(msgs: Sequence[Msg]) -> list[Any]:
    """OpenAI-style dicts as llama-index ChatMessages (extras in additional_kwargs, as its
    OpenAI integration keeps them)."""
    from llama_index.core.llms import ChatMessage

    return [ChatMessage(role=m["role"], content=m["content"],
                        additional_kwargs={k: v for k, v in m.items() if k not in ("role", "content")})
            for m in msgs]


# -- the implementations ------------------------------------------------------------------
class Impl:
    """One implementation doing the workload through its own public API. ``native`` turns
    the shared message dicts into its own types (untimed); the other methods are timed."""

    id: ClassVar[str]
    name: ClassVar[str]
    modules: ClassVar[tuple[str, ...]] = ()  # imported by probe(); missing -> skipped
    dists: ClassVar[tuple[str, ...]] = ()  # distributions whose versions are reported
    reads: ClassVar[bool] = True  # timed on load / newest / count (not only on writes)
    rewrites: ClassVar[bool] = False  # every write rewrites the whole file (without fsync)
    api: ClassVar[dict[str, str]]
    config: str = ""
    import_warnings: ClassVar[list[str]] = []

    def __init__(self, directory: str) -> None:
        self.dir = directory

    @classmethod
    def probe(cls) -> str | None:
        """None when usable here, else why not."""
        with quiet() as caught:
            for name in cls.modules:
                try:
                    importlib.import_module(name)
                except ImportError as exc:
                    return f"not installed ({exc}); {BENCH_EXTRA}"
                except Exception as exc:  # noqa: BLE001 - a peer that cannot even be imported is skipped too
                    return f"import of {name} fails ({type(exc).__name__}: {str(exc)[:160]})"
        cls.import_warnings = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
        return None

    @classmethod
    def versions(cls) -> str:
        return ", ".join(f"{d} {version_of(d)}" for d in cls.dists)

    def native(self, msgs: Sequence[Msg]) -> list[Any]:
        return list(msgs)

    def build(self, key: str, items: list[Any]) -> None:
        raise NotImplementedError

    def append(self, key: str, item: Any) -> None:
        raise NotImplementedError

    def load(self, key: str) -> Sequence[Any]:
        raise NotImplementedError

    def newest(self, key: str) -> Sequence[Any]:
        raise NotImplementedError

    def count(self, key: str) -> int | None:
        raise NotImplementedError

    def remove_last(self, key: str) -> None:
        raise NotImplementedError

    def release(self, key: str) -> None:
        """Drop what is kept in memory for ``key`` (after its benchmarks)."""

    def close(self) -> None:
        pass

    @classmethod
    def read_back(cls, directory: str, key: str) -> list[Any]:
        """The contents of every message, read from disk by a fresh instance (as a restarted
        process would): the SIGKILL check. Raises whatever the implementation raises."""
        raise NotImplementedError


class Floor(Impl):
    id = "floor"
    name = "floor (raw file)"
    api: ClassVar[dict[str, str]] = {
        "append": "os.write of the encoded line (O_APPEND) + fsync",
        "load": "for line in f: orjson.loads(line)",
        "newest": "64 KiB preads back from the end + orjson.loads of 50",
        "count": "os.stat of the file (the least a file-based answer costs)",
        "remove_last": "ftruncate at the known line start + fsync",
    }
    config = ("one JSONL file per session, O_APPEND descriptor kept open, fsync per write, an in-memory "
              "index of line lengths; no ids, no validation, no lock; its reader is a strict line loop")

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.files: dict[str, tuple[int, list[int]]] = {}  # key -> (fd, length of each line)
        self.size: dict[str, int] = {}

    def path(self, key: str) -> str:
        return os.path.join(self.dir, key + ".jsonl")

    def _file(self, key: str) -> tuple[int, list[int]]:
        f = self.files.get(key)
        if f is None:
            fd = os.open(self.path(key), os.O_RDWR | os.O_CREAT | os.O_APPEND | _O_CLOEXEC, 0o600)
            f = self.files[key] = (fd, [])
            self.size[key] = 0
        return f

    def native(self, msgs: Sequence[Msg]) -> list[Any]:
        return encoded_lines(msgs)

    def build(self, key: str, items: list[Any]) -> None:
        fd, lengths = self._file(key)
        data = b"".join(items)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        lengths.extend(len(line) for line in items)
        self.size[key] += len(data)

    def append(self, key: str, item: Any) -> None:
        fd, lengths = self._file(key)
        os.write(fd, item)
        os.fsync(fd)
        lengths.append(len(item))
        self.size[key] += len(item)

    def load(self, key: str) -> Sequence[Any]:
        return orjson_floor_load(self.path(key))

    def newest(self, key: str) -> Sequence[Any]:
        return floor_lines_before(self.files[key][0], self.size[key], PAGE)

    def count(self, key: str) -> int | None:
        os.stat(self.path(key))
        return None

    def remove_last(self, key: str) -> None:
        fd, lengths = self.files[key]
        self.size[key] -= lengths.pop()
        os.ftruncate(fd, self.size[key])
        os.fsync(fd)

    def close(self) -> None:
        for fd, _ in self.files.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.files.clear()

    @classmethod
    def read_back(cls, directory: str, key: str) -> list[Any]:
        return [m["content"] for m in orjson_floor_load(os.path.join(directory, key + ".jsonl"))]


class Ours(Impl):
    id = "jsonl_sessions"
    name = "jsonl_sessions"
    durability = "fsync"
    api: ClassVar[dict[str, str]] = {
        "append": 'append(key, msg), durability="fsync"',
        "load": "load(key)",
        "newest": f"page(key, limit={PAGE})",
        "count": "get_message_count(key)",
        "remove_last": 'remove_last(key), durability="fsync"',
    }
    config = 'SessionStore(root), default durability="fsync": every append and remove_last fsyncs before returning'

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.store = SessionStore(os.path.join(directory, "store"), durability=self.durability)  # type: ignore[arg-type]

    def build(self, key: str, items: list[Any]) -> None:
        self.store.rewrite_messages(key, items)

    def append(self, key: str, item: Any) -> None:
        self.store.append(key, item)

    def load(self, key: str) -> Sequence[Any]:
        return self.store.load(key)

    def newest(self, key: str) -> Sequence[Any]:
        return self.store.page(key, limit=PAGE).messages

    def count(self, key: str) -> int | None:
        return self.store.get_message_count(key)

    def remove_last(self, key: str) -> None:
        if not self.store.remove_last(key):
            raise RuntimeError("remove_last removed nothing")

    @classmethod
    def read_back(cls, directory: str, key: str) -> list[Any]:
        store = SessionStore(os.path.join(directory, "store"), durability=cls.durability)  # type: ignore[arg-type]
        return [m.content for m in store.try_load(key)]  # strict: a corrupt line raises


class OursFlush(Ours):
    id = "jsonl_sessions_flush"
    name = "jsonl_sessions (flush)"
    durability = "flush"
    reads = False  # reads do not depend on the durability mode
    api: ClassVar[dict[str, str]] = dict(Ours.api, append='append(key, msg), durability="flush"',
               remove_last='remove_last(key), durability="flush"')
    config = ('SessionStore(root, durability="flush"): no fsync (survives a crash of the process, not of the '
              "machine), shown next to the peers that do not fsync")


class Sqlite(Impl):
    id = "sqlite3"
    name = "sqlite3 WAL"
    api: ClassVar[dict[str, str]] = {
        "append": "INSERT, autocommit, synchronous=FULL",
        "load": "SELECT body ORDER BY id + orjson.loads",
        "newest": f"SELECT body ORDER BY id DESC LIMIT {PAGE}",
        "count": "SELECT count(*) WHERE session=?",
        "remove_last": "DELETE the newest (max(id)), synchronous=FULL",
    }
    config = ("stdlib sqlite3, the fair schema of benchmarks/run.py: WAL, synchronous=FULL (fsync per commit, the "
              "promise of durability=\"fsync\"), autocommit, one row per message keyed by (session, ULID id)")

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.peer = SqlitePeer(os.path.join(directory, "peer.sqlite"), "FULL")

    def build(self, key: str, items: list[Any]) -> None:
        self.peer.append_many(key, items)

    def append(self, key: str, item: Any) -> None:
        self.peer.append(key, item)

    def load(self, key: str) -> Sequence[Any]:
        return self.peer.load(key)

    def newest(self, key: str) -> Sequence[Any]:
        rows = self.peer.conn.execute("SELECT body FROM messages WHERE session = ? ORDER BY id DESC LIMIT ?",
                                      (key, PAGE)).fetchall()
        return [_loads(body) for (body,) in reversed(rows)]

    def count(self, key: str) -> int | None:
        return int(self.peer.conn.execute("SELECT count(*) FROM messages WHERE session = ?", (key,)).fetchone()[0])

    def remove_last(self, key: str) -> None:
        if not self.peer.remove_last(key):
            raise RuntimeError("sqlite3 removed nothing")

    def close(self) -> None:
        self.peer.close()

    @classmethod
    def read_back(cls, directory: str, key: str) -> list[Any]:
        conn = sqlite3.connect(os.path.join(directory, "peer.sqlite"))
        try:
            rows = conn.execute("SELECT body FROM messages WHERE session = ? ORDER BY id", (key,)).fetchall()
        finally:
            conn.close()
        return [_loads(body)["content"] for (body,) in rows]


class OpenAIAgents(Impl):
    id = "openai_agents"
    name = "openai-agents SQLiteSession"
    modules = ("agents.memory.sqlite_session",)
    dists = ("openai-agents",)
    api: ClassVar[dict[str, str]] = {
        "append": "add_items([item])",
        "load": "get_items()",
        "newest": f"get_items(limit={PAGE})",
        "count": "len(get_items()) (no count call: loads every item)",
        "remove_last": "pop_item()",
    }

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        from agents.memory.sqlite_session import SQLiteSession

        self.cls = SQLiteSession
        self.path = os.path.join(directory, "agents.sqlite")
        self.sessions: dict[str, Any] = {}
        # One long-lived event loop; each call hops to the loop's worker thread (asyncio.to_thread), as the SDK does.
        self.loop = asyncio.new_event_loop()
        self.run = self.loop.run_until_complete
        self.session(APPEND_KEY)
        conn = sqlite3.connect(self.path)
        try:
            journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
            sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(conn.execute("PRAGMA synchronous").fetchone()[0])
        finally:
            conn.close()
        self.config = (f"SQLiteSession(session_id, db_path): its defaults, journal_mode={journal} (set by the SDK), "
                       f"synchronous={sync} (SQLite's default: fsync per commit); one database file for every "
                       "session; items are the same message dicts (it stores any JSON object); async API driven "
                       "from one event loop (run_until_complete per call)")

    def session(self, key: str) -> Any:
        s = self.sessions.get(key)
        if s is None:
            s = self.sessions[key] = self.cls(key, self.path)
        return s

    def build(self, key: str, items: list[Any]) -> None:
        self.run(self.session(key).add_items(items))

    def append(self, key: str, item: Any) -> None:
        self.run(self.session(key).add_items([item]))

    def load(self, key: str) -> Sequence[Any]:
        return self.run(self.session(key).get_items())

    def newest(self, key: str) -> Sequence[Any]:
        return self.run(self.session(key).get_items(limit=PAGE))

    def count(self, key: str) -> int | None:
        return len(self.run(self.session(key).get_items()))

    def remove_last(self, key: str) -> None:
        if self.run(self.session(key).pop_item()) is None:
            raise RuntimeError("pop_item removed nothing")

    def close(self) -> None:
        for s in self.sessions.values():
            with contextlib.suppress(Exception):
                s.close()
        self.sessions.clear()
        with contextlib.suppress(Exception):
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()

    @classmethod
    def read_back(cls, directory: str, key: str) -> list[Any]:
        from agents.memory.sqlite_session import SQLiteSession

        s = SQLiteSession(key, os.path.join(directory, "agents.sqlite"))
        try:
            items: list[Any] = asyncio.run(s.get_items())
            return [item["content"] for item in items]
        finally:
            s.close()


class LangChain(Impl):
    id = "langchain"
    name = "LangChain FileChatMessageHistory"
    modules = ("langchain_community.chat_message_histories.file", "langchain_core.messages")
    dists = ("langchain-community", "langchain-core")
    rewrites = True
    api: ClassVar[dict[str, str]] = {
        "append": "add_message(m) (reads, parses and rewrites the whole file)",
        "load": ".messages",
        "newest": f".messages[-{PAGE}:] (no paging call: parses the whole file)",
        "count": "len(.messages) (no count call: parses the whole file)",
        "remove_last": "no remove call: .messages[:-1] written back the way add_message writes",
    }
    config = ("FileChatMessageHistory(path), its only configuration: one JSON array per session (ensure_ascii=True), "
              "rewritten in place by every add_message (open with truncation, then write; no fsync, no lock)")

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        from langchain_community.chat_message_histories.file import FileChatMessageHistory
        from langchain_core.messages import messages_to_dict

        self.cls = FileChatMessageHistory
        self.to_dict = messages_to_dict
        self.histories: dict[str, Any] = {}

    def history(self, key: str) -> Any:
        h = self.histories.get(key)
        if h is None:
            h = self.histories[key] = self.cls(os.path.join(self.dir, key + ".json"))
        return h

    def native(self, msgs: Sequence[Msg]) -> list[Any]:
        return to_langchain(msgs)

    def _write(self, h: Any, messages: Sequence[Any]) -> None:
        # add_message's own last step: the message list as JSON, written over the file
        h.file_path.write_text(json.dumps(self.to_dict(messages), ensure_ascii=h.ensure_ascii), encoding=h.encoding)

    def build(self, key: str, items: list[Any]) -> None:
        # What add_messages ends with, in one write (add_messages calls add_message per message: O(n^2)).
        self._write(self.history(key), items)

    def append(self, key: str, item: Any) -> None:
        self.history(key).add_message(item)

    def load(self, key: str) -> Sequence[Any]:
        return self.history(key).messages  # type: ignore[no-any-return]

    def newest(self, key: str) -> Sequence[Any]:
        return self.history(key).messages[-PAGE:]  # type: ignore[no-any-return]

    def count(self, key: str) -> int | None:
        return len(self.history(key).messages)

    def remove_last(self, key: str) -> None:
        h = self.history(key)
        messages = h.messages
        if not messages:
            raise RuntimeError("nothing to remove")
        self._write(h, messages[:-1])

    @classmethod
    def read_back(cls, directory: str, key: str) -> list[Any]:
        from langchain_community.chat_message_histories.file import FileChatMessageHistory

        return [m.content for m in FileChatMessageHistory(os.path.join(directory, key + ".json")).messages]


class LlamaIndex(Impl):
    id = "llama_index"
    name = "llama-index SimpleChatStore"
    modules = ("llama_index.core.storage.chat_store.simple_chat_store", "llama_index.core.llms")
    dists = ("llama-index-core",)
    rewrites = True
    api: ClassVar[dict[str, str]] = {
        "append": "add_message(key, m) + persist(path) (serialises and writes the whole store)",
        "load": "SimpleChatStore.from_persist_path(path).get_messages(key)",
        "newest": f"from_persist_path(path).get_messages(key)[-{PAGE}:] (parses the whole file)",
        "count": "len(from_persist_path(path).get_messages(key)) (parses the whole file)",
        "remove_last": "delete_last_message(key) + persist(path)",
    }
    config = ("SimpleChatStore kept in memory by the writer, persist(path) after every write, as a durable user "
              "would (open with truncation, serialise, write; no fsync, no lock); one file per session (the usual "
              "single chat_store.json would rewrite every session on each persist); readers load the file")

    @classmethod
    def probe(cls) -> str | None:
        reason = super().probe()
        if reason is not None:
            return reason
        # persist() of llama-index-core 0.14.x fails with pydantic >= 2.14 (its wrap serializer passes `info` as
        # pydantic's `index_key`): check that it works here before timing it.
        with quiet(), tempfile.TemporaryDirectory() as tmp:
            try:
                from llama_index.core.storage.chat_store.simple_chat_store import SimpleChatStore

                store = SimpleChatStore()
                store.add_message("k", to_llama([{"role": "user", "content": "x"}])[0])
                store.persist(os.path.join(tmp, "probe.json"))
            except Exception as exc:  # noqa: BLE001 - any failure means "cannot run here"
                return (f"persist() fails here ({type(exc).__name__}: {str(exc)[:160]}...) with llama-index-core "
                        f"{version_of('llama-index-core')} and pydantic {version_of('pydantic')}; "
                        f"pydantic<2.14 works ({BENCH_EXTRA} pins it)")
        return None

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        from llama_index.core.storage.chat_store.simple_chat_store import SimpleChatStore

        self.cls = SimpleChatStore
        self.writers: dict[str, Any] = {}

    def path(self, key: str) -> str:
        return os.path.join(self.dir, key + ".json")

    def writer(self, key: str) -> Any:
        w = self.writers.get(key)
        if w is None:
            w = self.writers[key] = self.cls.from_persist_path(self.path(key))
        return w

    def native(self, msgs: Sequence[Msg]) -> list[Any]:
        return to_llama(msgs)

    def build(self, key: str, items: list[Any]) -> None:
        w = self.writer(key)
        w.set_messages(key, list(items))
        w.persist(self.path(key))

    def append(self, key: str, item: Any) -> None:
        w = self.writer(key)
        w.add_message(key, item)
        w.persist(self.path(key))

    def load(self, key: str) -> Sequence[Any]:
        return self.cls.from_persist_path(self.path(key)).get_messages(key)

    def newest(self, key: str) -> Sequence[Any]:
        return self.cls.from_persist_path(self.path(key)).get_messages(key)[-PAGE:]

    def count(self, key: str) -> int | None:
        return len(self.cls.from_persist_path(self.path(key)).get_messages(key))

    def remove_last(self, key: str) -> None:
        w = self.writer(key)
        if w.delete_last_message(key) is None:
            raise RuntimeError("nothing to remove")
        w.persist(self.path(key))

    def release(self, key: str) -> None:
        self.writers.pop(key, None)

    @classmethod
    def read_back(cls, directory: str, key: str) -> list[Any]:
        from llama_index.core.storage.chat_store.simple_chat_store import SimpleChatStore

        return [m.content for m in SimpleChatStore.from_persist_path(os.path.join(directory, key + ".json"))
                .get_messages(key)]


IMPLS: dict[str, type[Impl]] = {cls.id: cls for cls in (Floor, Ours, OursFlush, Sqlite, OpenAIAgents, LangChain,
                                                         LlamaIndex)}


# -- timing -------------------------------------------------------------------------------
def measure(ops: Mapping[str, Callable[[int], object]], sizes: Sizes, *,
            after: Mapping[str, Callable[[int], object]] | None = None,
            check: Callable[[str, object], None] | None = None) -> dict[str, list[int]]:
    """Per-call samples of each op. One untimed warm-up call each (checked by ``check``; its
    time decides how many calls fit ``sizes.budget_s``, between min_calls and max_calls),
    then ROUNDS turns in which each op makes its share of calls, the order rotated per turn,
    the collector paused in each turn. ``after[name](i)`` runs untimed after every call."""
    settle()
    names = list(ops)
    post = {name: after.get(name) if after else None for name in names}
    counts: dict[str, int] = {}
    for name in names:
        with gc_paused():
            t0 = _pc()
            result = ops[name](0)
            t1 = _pc()
        if check is not None:
            check(name, result)
        del result
        if post[name] is not None:
            post[name](0)  # type: ignore[misc]
        counts[name] = min(sizes.max_calls, max(sizes.min_calls, int(sizes.budget_s * 1e9 / max(1, t1 - t0))))
    samples: dict[str, list[int]] = {name: [] for name in names}
    done = dict.fromkeys(names, 0)
    for r in range(ROUNDS):
        for name in names[r % len(names):] + names[: r % len(names)]:
            k = counts[name] * (r + 1) // ROUNDS - done[name]
            if k > 0:
                with gc_paused():
                    samples[name] += time_calls(ops[name], 1 + done[name], k, post[name])
                done[name] += k
    return samples


def appender(impl: Impl, key: str, items: Sequence[Any]) -> Callable[[int], object]:
    """``op(i)``: append the i-th item (cycling) to ``key``."""
    m = len(items)
    return lambda i: impl.append(key, items[i % m])


def after_write(impl: Impl, refill: Callable[[int], object] | None = None) -> Callable[[int], object] | None:
    """What runs untimed after each timed write: the refill (if any), then, for an
    implementation that rewrites whole files without fsync, os.sync(): otherwise the
    write-back of its megabytes of dirty pages would be charged to the next implementation
    that fsyncs (ext4 in data=ordered mode writes them back with that fsync's journal
    commit). This favours it a little (its next truncation never waits for a write-back)."""
    if not impl.rewrites:
        return refill

    def after(i: int) -> None:
        if refill is not None:
            refill(i)
        settle()

    return after


def caller(method: Callable[[str], object], key: str) -> Callable[[int], object]:
    return lambda i: method(key)


class PeerBench:
    """The timed workload over every usable implementation, each in its own subdirectory."""

    def __init__(self, base: str, sizes: Sizes, impls: Sequence[type[Impl]], progress: Callable[[str], None]) -> None:
        self.sizes = sizes
        self.progress = progress
        self.factory = MessageFactory()
        self.impls: dict[str, Impl] = {}
        with quiet():
            for cls in impls:
                d = os.path.join(base, cls.id)
                os.makedirs(d)
                self.impls[cls.id] = cls(d)

    def close(self) -> None:
        for impl in self.impls.values():
            with contextlib.suppress(Exception):
                impl.close()

    def row(self, impl: Impl, op: str, samples: list[int]) -> Row:
        return Row(impl.id, f"{impl.name}: {impl.api[op]}", samples)

    def run(self) -> list[Group]:
        with quiet():
            started = time.monotonic()
            self.progress(f"append {self.sizes.appends:,} messages one by one ...")
            groups = [self.append()]
            self.progress(f"append done in {time.monotonic() - started:.1f} s")
            for i, n in enumerate(self.sizes.sessions):
                started = time.monotonic()
                groups += self.session_ops(n, salt=100 + i)
                self.progress(f"{label(n)}-message session done in {time.monotonic() - started:.1f} s")
        return groups

    def append(self) -> Group:
        pool = self.factory.make(1000, salt=1)
        ops = {impl.id: appender(impl, APPEND_KEY, impl.native(pool)) for impl in self.impls.values()}
        n = self.sizes.appends
        after = {impl.id: f for impl in self.impls.values() if (f := after_write(impl)) is not None}
        samples = interleaved(ops, count=n, block=APPEND_BLOCK, warmup=WARMUP_APPENDS, after=after)
        for impl in self.impls.values():
            self.verify_count(impl, APPEND_KEY, n + WARMUP_APPENDS)
            impl.release(APPEND_KEY)
        return Group("append", f"append one message ({n:,} one by one into a new session)",
                     f"per message; {WARMUP_APPENDS} warm-up + {n:,} appends, the session growing to "
                     f"{n + WARMUP_APPENDS:,} messages; turns every {APPEND_BLOCK} calls",
                     [self.row(impl, "append", samples[impl.id]) for impl in self.impls.values()]).finish()

    def verify_count(self, impl: Impl, key: str, expected: int) -> None:
        got = len(impl.files[key][1]) if isinstance(impl, Floor) else impl.count(key)
        if got != expected:
            raise RuntimeError(f"{impl.id}: {got} messages in {key!r}, expected {expected}")

    def session_ops(self, n: int, salt: int) -> list[Group]:
        key = f"s{label(n)}"
        self.progress(f"building a {label(n)}-message session in each implementation ...")
        msgs = self.factory.make(n, salt=salt)
        for impl in self.impls.values():
            impl.build(key, impl.native(msgs))
        del msgs
        pool = self.factory.make(200, salt=salt + 50)
        refill = {impl.id: impl.native(pool) for impl in self.impls.values()}
        ours = self.impls[Ours.id]
        assert isinstance(ours, Ours)
        mb = os.path.getsize(os.path.join(ours.store.root, key_to_stem(key) + ".jsonl")) / 1e6
        gc.collect()
        gc.freeze()  # the data just built stays alive: keep it out of every collection while timing
        groups = []
        try:
            readers = [impl for impl in self.impls.values() if impl.reads]
            expected = {"load": n, "newest": min(PAGE, n), "count": n}
            for op in OPS:
                self.progress(f"{op} on {label(n)} ...")
                impls = readers if op != "remove_last" else list(self.impls.values())
                after = None
                check = None
                if op == "remove_last":
                    after = {impl.id: f for impl in impls
                             if (f := after_write(impl, appender(impl, key, refill[impl.id]))) is not None}
                else:
                    def check(name: str, result: object, op: str = op) -> None:
                        if name == Floor.id and op == "count":
                            return
                        got = result if isinstance(result, int) else len(result)  # type: ignore[arg-type]
                        if got != expected[op]:
                            raise RuntimeError(f"{name} {op} gave {got}, expected {expected[op]}")
                ops = {impl.id: caller(getattr(impl, op), key) for impl in impls}
                samples = measure(ops, self.sizes, after=after, check=check)
                extra = "; each call followed by an untimed append, so the size stays" if op == "remove_last" else ""
                groups.append(Group(
                    f"{op}:{label(n)}", f"{OP_TITLES[op]}, {label(n)} messages ({mb:.1f} MB as JSONL)",
                    f"per call; calls fit ~{self.sizes.budget_s:g} s per implementation (min {self.sizes.min_calls}, "
                    f"max {self.sizes.max_calls}){extra}",
                    [self.row(impl, op, samples[impl.id]) for impl in impls]).finish())
            for impl in self.impls.values():
                self.verify_count(impl, key, n)
        finally:
            gc.unfreeze()
            for impl in self.impls.values():
                impl.release(key)
        return groups


# -- SIGKILL ------------------------------------------------------------------------------
@dataclass
class KillResult:
    impl: str
    name: str
    config: str
    kills: int = 0
    unreadable: int = 0
    acked: int = 0  # acknowledged messages at the kills, summed (the seeded history included)
    lost: int = 0  # of those, missing afterwards (all of them when the history is unreadable)
    appends: list[int] = field(default_factory=list)  # acknowledged appends per kill
    errors: dict[str, int] = field(default_factory=dict)  # what a failed load said -> how often


def tagged(msgs: Sequence[Msg], prefix: str, start: int = 0) -> list[Msg]:
    """The messages with a unique token first in their content: ``{prefix}{i} ...``."""
    return [dict(m, content=f"{prefix}{start + i} {m['content']}") for i, m in enumerate(msgs)]


def kill_worker(impl_id: str, directory: str, seed_n: int) -> int:
    """The child: a session of ``seed_n`` messages, then appends forever, writing
    ``ack <i>`` to stdout (unbuffered) once each append returned."""
    cls = IMPLS[impl_id]
    with quiet():
        if cls.probe() is not None:
            raise SystemExit(f"{impl_id} is not usable here")
        impl = cls(directory)
        factory = MessageFactory()
        impl.build(KILL_KEY, impl.native(tagged(factory.make(seed_n, salt=21), "s")))
        pool = factory.make(500, salt=22)
        os.write(1, b"ready\n")
        i = 0
        while True:
            item = impl.native(tagged([pool[i % len(pool)]], "a", i))[0]
            impl.append(KILL_KEY, item)
            os.write(1, b"ack %d\n" % i)
            i += 1


def kill_trials(base: str, impls: Sequence[type[Impl]], sizes: Sizes, trials: int, seed: int,
                progress: Callable[[str], None]) -> list[KillResult]:
    """For each implementation: ``trials`` times, a fresh worker process builds its session,
    appends until SIGKILLed at a random moment, then this process reads the session back
    through the implementation's own loader and compares it with what was acknowledged."""
    script = os.path.abspath(__file__)
    results = []
    for cls in impls:
        rng = random.Random(seed)  # the same kill moments for every implementation
        result = KillResult(cls.id, cls.name, "")
        progress(f"SIGKILL x{trials}: {cls.name} ...")
        for trial in range(trials):
            d = os.path.join(base, f"kill-{cls.id}-{trial}")
            os.makedirs(d)
            out_path, err_path = os.path.join(d, "stdout"), os.path.join(d, "stderr")
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                proc = subprocess.Popen([sys.executable, script, "--kill-worker", cls.id, d, str(sizes.kill_seed)],
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=err)
            try:
                deadline = time.monotonic() + 180
                while not read_bytes(out_path).startswith(b"ready\n"):
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"{cls.id} worker did not start:\n{read_bytes(err_path).decode()[-2000:]}")
                    time.sleep(0.002)
                time.sleep(rng.uniform(*sizes.kill_delay))
                os.kill(proc.pid, signal.SIGKILL)
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
            if proc.returncode != -signal.SIGKILL:
                raise RuntimeError(f"{cls.id} worker ended by itself ({proc.returncode}):\n"
                                   f"{read_bytes(err_path).decode()[-2000:]}")
            lines = read_bytes(out_path).split(b"\n")[1:-1]  # complete lines after "ready"
            acks = len(lines)
            if lines != [b"ack %d" % i for i in range(acks)]:
                raise RuntimeError(f"{cls.id} worker wrote unexpected output")
            expected = [f"s{i}" for i in range(sizes.kill_seed)] + [f"a{i}" for i in range(acks + 1)]
            acked = sizes.kill_seed + acks
            error = None
            with quiet():
                try:
                    contents = cls.read_back(d, KILL_KEY)
                except Exception as exc:  # noqa: BLE001 - any failure to load is the finding
                    error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:90] if str(exc) else ''}"
                    contents = []
            if error is None:
                tokens = [c.split(" ", 1)[0] if isinstance(c, str) else None for c in contents]
                if tokens != expected[: len(tokens)]:
                    error = "garbage: messages missing, out of order or altered"
            result.kills += 1
            result.acked += acked
            result.appends.append(acks)
            if error is not None:
                result.unreadable += 1
                result.lost += acked
                result.errors[error] = result.errors.get(error, 0) + 1
            else:
                result.lost += max(0, acked - len(contents))
            shutil.rmtree(d, ignore_errors=True)
        results.append(result)
    return results


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# -- output -------------------------------------------------------------------------------
def peer_lines(env: Mapping[str, Any], mode: str, sizes: Sizes, impls: Sequence[type[Impl]],
               skipped: Mapping[str, str], timed: bool) -> list[tuple[str, str]]:
    peers = [cls.versions() for cls in impls if cls.dists]
    timing = ((f"{mode} run; perf_counter_ns per call, gc paused while timing, a warm-up call first; "
                             f"appends: turns every {APPEND_BLOCK} calls; other operations: as many calls as fit "
                             f"~{sizes.budget_s:g} s (min {sizes.min_calls}, max {sizes.max_calls}) in {ROUNDS} "
                             f"turns; timer overhead {env['timer_overhead_ns']:.0f} ns per sample (included)")
              if timed else f"{mode} run; nothing timed (--kill-only)")
    lines = header_lines(env, mode, timing)
    lines.insert(-1, ("peers", ", ".join(peers) if peers else "none in this run"))
    for impl_id, reason in skipped.items():
        lines.append(("skipped", f"{IMPLS[impl_id].name}: {reason}"))
    return lines


def describe(impls: Sequence[type[Impl]], configs: Mapping[str, str]) -> list[str]:
    out = ["implementations (each in its default configuration, the durable one where it has a choice):"]
    for cls in impls:
        out.append(f"  {cls.name}: {configs.get(cls.id) or cls.config}")
        for w in cls.import_warnings:
            out.append(f"    (its import warns: {w[:200]})")
    return out


def render_text(env: Mapping[str, Any], mode: str, sizes: Sizes, impls: Sequence[type[Impl]],
                configs: Mapping[str, str], skipped: Mapping[str, str], groups: Sequence[Group],
                kills: Sequence[KillResult], elapsed: float, trials: int) -> str:
    out = header_text(f"jsonl_sessions vs peers ({mode} run, {elapsed:.0f} s)",
                      peer_lines(env, mode, sizes, impls, skipped, bool(groups)))
    out += [""] + describe(impls, configs)
    if groups:
        out += [""] + groups_text(groups, calls=True, min_width=0)
    if kills:
        out += ["", kill_title(sizes, trials)]
        n = max(len(k.name) for k in kills) + 2
        out.append(f"  {'implementation':<{n}} {'kills':>5} {'unreadable':>10} {'acked lost':>18} "
                   f"{'appends acked per kill':>24}  what a failed load said")
        for k in kills:
            span = f"{min(k.appends)}-{max(k.appends)}" if k.appends else "-"
            said = "; ".join(f"{e} (x{c})" for e, c in k.errors.items()) or "-"
            out.append(f"  {k.name:<{n}} {k.kills:>5} {k.unreadable:>10} {f'{k.lost:,} of {k.acked:,}':>18} "
                       f"{span:>24}  {said}")
    return "\n".join(out)


def kill_title(sizes: Sizes, trials: int) -> str:
    lo, hi = sizes.kill_delay
    return (f"SIGKILL: {trials} kill(s) per implementation, each of a fresh process appending to a session of "
            f"{sizes.kill_seed} messages, at a random moment {lo * 1000:.0f}-{hi * 1000:.0f} ms after it is ready "
            f"(the same moments for each); then the session is loaded by a fresh instance. unreadable = the "
            f"load raised or returned messages missing / out of order; acked lost = acknowledged messages (the "
            f"{sizes.kill_seed} seeded ones included) not in the loaded history, all of them when unreadable")


def cell(r: Row | None) -> str:
    if r is None:
        return "-"
    return f"{fmt_ns(r.median_ns)}<br><sub>p95 {fmt_ns(r.p95_ns)} · {fmt_ratio(r.vs_ours)}</sub>"


def render_markdown(env: Mapping[str, Any], mode: str, sizes: Sizes, impls: Sequence[type[Impl]],
                    skipped: Mapping[str, str], groups: Sequence[Group], kills: Sequence[KillResult],
                    trials: int) -> str:
    by_id = {g.id: g for g in groups}
    out = [f"- {k}: {v}" for k, v in peer_lines(env, mode, sizes, impls, skipped, bool(groups))]
    if groups:
        out += ["", "Median per call; below it the p95 and the ratio to jsonl_sessions' median (> 1: slower).", ""]
    g = by_id.get("append")
    if g is not None:
        out += [f"**{g.title}** ({g.unit})", "", "| implementation | how | per append |", "|---|---|--:|"]
        for r in g.rows:
            name, _, how = r.label.partition(": ")
            out.append(f"| {'**' + name + '**' if r.impl == g.ours else name} | {how} | {cell(r)} |")
    shown = ([n for n in sizes.sessions if n in TABLE_SIZES] or list(sizes.sessions)) if groups else []
    for n in shown:
        lbl = label(n)
        load = by_id[f"load:{lbl}"]
        out += ["", f"**{lbl}-message session** ({load.title.split('(')[-1].rstrip(')')})", "",
                "| implementation | load | newest 50 | count | remove_last |", "|---|--:|--:|--:|--:|"]
        for cls in impls:
            rows = []
            for op in OPS:
                grp = by_id[f"{op}:{lbl}"]
                rows.append(next((r for r in grp.rows if r.impl == cls.id), None))
            name = f"**{cls.name}**" if cls.id == Ours.id else cls.name
            if any(rows):
                out.append(f"| {name} | " + " | ".join(cell(r) for r in rows) + " |")
    if kills:
        out += ["", kill_title(sizes, trials) + ".", "",
                ("| implementation | kills | unreadable after the kill | acknowledged messages lost | "
                 "what a failed load said |"), "|---|--:|--:|--:|---|"]
        for k in kills:
            said = "; ".join(f"`{e}` (x{c})" for e, c in k.errors.items()) or "-"
            out.append(f"| {k.name} | {k.kills} | {k.unreadable} | {k.lost:,} of {k.acked:,} | {said} |")
    return "\n".join(out)


def short_time(seconds: float) -> str:
    """An axis label: 100 µs, 10 ms, 1 s."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale * 0.999:
            return f"{seconds / scale:g} {unit}"
    return f"{seconds * 1e9:g} ns"


def write_chart(path: str, groups: Sequence[Group], sizes: Sizes, impls: Sequence[type[Impl]],
                env: Mapping[str, Any]) -> str | None:
    """Log-log chart of load and newest-page medians against session size; None when
    matplotlib is missing (a note says so)."""
    try:
        with quiet():
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            from matplotlib.ticker import FuncFormatter
    except ImportError:
        return f"chart not written: matplotlib is not installed ({BENCH_EXTRA})"
    by_id = {g.id: g for g in groups}
    styles = {Floor.id: ("#888888", "--", "o"), Ours.id: ("#d62728", "-", "o"), Sqlite.id: ("#1f77b4", "-", "s"),
              OpenAIAgents.id: ("#9467bd", "-", "D"), LangChain.id: ("#2ca02c", "-", "^"),
              LlamaIndex.id: ("#ff7f0e", "-", "v")}
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.6), sharey=True)
    with quiet():
        for ax, op in zip(axes, ("load", "newest")):
            for cls in impls:
                if not cls.reads:
                    continue
                xs, ys = [], []
                for n in sizes.sessions:
                    grp = by_id.get(f"{op}:{label(n)}")
                    r = next((r for r in grp.rows if r.impl == cls.id), None) if grp else None
                    if r is not None:
                        xs.append(n)
                        ys.append(r.median_ns / 1e9)
                color, line, marker = styles.get(cls.id, ("black", "-", "x"))
                ax.plot(xs, ys, line, marker=marker, color=color, label=cls.name,
                        linewidth=2.8 if cls.id == Ours.id else 1.6, markersize=6, zorder=3 if cls.id == Ours.id else 2)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title("load the whole session" if op == "load" else f"read the newest {PAGE} messages")
            ax.set_xlabel("session size (messages, log scale)")
            ax.set_xticks(list(sizes.sessions))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: label(int(x))))
            ax.xaxis.set_minor_formatter(FuncFormatter(lambda x, _: ""))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: short_time(y)))
            ax.grid(True, which="major", alpha=0.35)
            ax.grid(True, which="minor", alpha=0.12)
        axes[0].set_ylabel("median time per call (log scale; lower is better)")
        axes[1].tick_params(labelleft=True)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=10, frameon=False)
        fs = env.get("filesystem") or {}
        fig.suptitle(f"jsonl_sessions vs peers, median time per call ({env['python']}, {env['cpu_usable']} CPUs, "
                     f"{fs.get('type', '?')}, {env['date'][:10]}; python -m benchmarks.peers)", fontsize=11)
        fig.tight_layout(rect=(0, 0.09, 1, 1))
        fig.savefig(path, dpi=130)
    plt.close(fig)
    return None


# -- main ---------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1k / 5k / 20k sessions, 300 appends, shorter kills (~1 min)")
    p.add_argument("--scale", type=float, default=1.0, metavar="F",
                   help="multiply every count by F (after --quick); for tests and slow disks")
    p.add_argument("--dir", metavar="DIR", default=None,
                   help="make the temp dir inside DIR (default: the system temp dir); it decides the file system")
    p.add_argument("--json", metavar="PATH", default=None, help="also write the results as JSON to PATH")
    p.add_argument("--markdown", action="store_true", help="also print README-ready Markdown tables")
    p.add_argument("--chart", metavar="PATH", default=None,
                   help="also write a PNG chart (load and newest-page time against session size; needs matplotlib)")
    p.add_argument("--peers", metavar="IDS", default=",".join(IMPLS),
                   help=f"comma-separated implementations to time (default: all of {', '.join(IMPLS)}; "
                        "those not installed are skipped with a note)")
    p.add_argument("--kill-trials", type=int, default=None, metavar="N",
                   help="SIGKILLs per implementation (default 10, --quick 5; 0: no SIGKILL comparison)")
    p.add_argument("--kill-peers", metavar="IDS", default=None,
                   help="comma-separated implementations for the SIGKILL comparison (default: those of --peers)")
    p.add_argument("--kill-only", action="store_true", help="skip the timed benchmarks: only the SIGKILL comparison")
    p.add_argument("--seed", type=int, default=1, help="seed of the random kill moments (default 1)")
    args = p.parse_args(argv)
    if args.scale <= 0:
        p.error("--scale must be positive")
    if args.kill_trials is None:
        args.kill_trials = 5 if args.quick else 10
    if args.kill_trials < 0:
        p.error("--kill-trials must be >= 0")
    for name in ("peers", "kill_peers"):
        value = getattr(args, name)
        ids = [x.strip() for x in value.split(",") if x.strip()] if value is not None else None
        unknown = [x for x in ids or () if x not in IMPLS]
        if unknown:
            p.error(f"unknown implementation(s) {', '.join(unknown)}; known: {', '.join(IMPLS)}")
        setattr(args, name, ids)
    for required in (Floor.id, Ours.id):
        if required not in args.peers and not args.kill_only:
            p.error(f"--peers must include {required} (the ratios are relative to it)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    if raw[:1] == ["--kill-worker"]:  # the child of the SIGKILL comparison (not for users)
        return kill_worker(raw[1], raw[2], int(raw[3]))
    args = parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.scale != 1.0:
        sizes = sizes.scaled(args.scale)
    mode = ("quick" if args.quick else "full") + (f" x{args.scale:g}" if args.scale != 1.0 else "")

    def progress(text: str) -> None:
        print(f"[benchmarks.peers] {text}", file=sys.stderr, flush=True)

    timed_ids = [] if args.kill_only else args.peers
    kill_ids = (args.kill_peers if args.kill_peers is not None else args.peers) if args.kill_trials else []
    skipped: dict[str, str] = {}
    ok: set[str] = set()
    for impl_id, cls in IMPLS.items():
        if impl_id in timed_ids or impl_id in kill_ids:
            reason = cls.probe()
            if reason is None:
                ok.add(impl_id)
            else:
                skipped[impl_id] = reason
                print(f"note: skipping {cls.name}: {reason}", flush=True)
    usable = [IMPLS[i] for i in timed_ids if i in ok]
    kill_impls = [IMPLS[i] for i in kill_ids if i in ok]

    base = tempfile.mkdtemp(prefix="jsonl-sessions-peers-bench-", dir=args.dir)
    started = time.monotonic()
    bench = None
    configs: dict[str, str] = {}
    try:
        env = environment(base)
        bench = PeerBench(os.path.join(base, "timed"), sizes, usable, progress) if usable else None
        groups = bench.run() if bench else []
        if bench:
            configs = {impl.id: impl.config for impl in bench.impls.values()}
            bench.close()
            bench = None
        kills = kill_trials(base, kill_impls, sizes, args.kill_trials, args.seed, progress) \
            if args.kill_trials else []
        for k in kills:
            k.config = configs.get(k.impl) or IMPLS[k.impl].config
    finally:
        if bench is not None:
            bench.close()
        shutil.rmtree(base, ignore_errors=True)
    elapsed = time.monotonic() - started
    env["loadavg_end"] = load_average()
    described = usable + [cls for cls in kill_impls if cls not in usable]
    print(render_text(env, mode, sizes, described, configs, skipped, groups, kills, elapsed, args.kill_trials))
    if args.markdown:
        print()
        print(render_markdown(env, mode, sizes, described, skipped, groups, kills, args.kill_trials))
    if args.chart:
        note = write_chart(args.chart, groups, sizes, usable, env)
        if note:
            print(f"note: {note}")
    if args.json:
        data = to_json(env, mode, sizes, groups, [], elapsed)
        del data["targets"]
        data["implementations"] = {cls.id: {"name": cls.name, "config": configs.get(cls.id) or cls.config,
                                            "versions": cls.versions(), "api": cls.api,
                                            "import_warnings": cls.import_warnings} for cls in described}
        data["skipped"] = skipped
        data["sigkill"] = {"trials": args.kill_trials, "seed": args.seed, "results": [asdict(k) for k in kills]}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
