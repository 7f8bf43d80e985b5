"""What the benchmarks feed the store and its rivals: deterministic realistic chat messages,
the exact records and lines the store writes for them, the raw-syscall floors, and stdlib
sqlite3 set up to do the store's job."""

from __future__ import annotations

import os
import random
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from jsonl_sessions.ids import next_id, now_ms

_loads = orjson.loads
_dumps = orjson.dumps
_NEWLINE = orjson.OPT_APPEND_NEWLINE
_NL = orjson.OPT_APPEND_NEWLINE
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
Msg = dict[str, Any]


# -- realistic messages -------------------------------------------------------------------
_WORD_TEXT = (
    "the of and to in is that for it as with was on be by this are or from at an which not "
    "file function return value error test agent tool call result read write path line session "
    "message user assistant system context token model python json stream buffer lock fsync "
    "commit rollback append load replace import class def self None True False list dict str "
    "int print open close retry timeout request response status 200 404 500 README main src "
    "naïve café über déjà 日本語 テスト данные ✓ — 🙂 {} [] () : , . ; ' \" \\n"
)
_WORDS = _WORD_TEXT.split()
_TOOLS = ("read_file", "write_file", "run_shell", "search", "list_dir", "http_get", "python")


class MessageFactory:
    """Deterministic realistic chat messages: roles user 30%, assistant 40% (a third of them
    with 1-2 ``tool_calls``), tool 25% (``tool_call_id`` + ``name``), system 5%; content is
    50-800 characters of mixed ASCII and non-ASCII text."""

    def __init__(self, seed: int = 20240601) -> None:
        rng = random.Random(seed)
        self._corpus = " ".join(rng.choices(_WORDS, k=200_000))
        self._seed = seed

    def make(self, n: int, salt: int = 0) -> list[Msg]:
        rng = random.Random(self._seed * 1_000_003 + salt)
        corpus = self._corpus
        top = len(corpus) - 801
        out: list[Msg] = []
        for _ in range(n):
            length = rng.randint(50, 800)
            start = rng.randrange(top)
            content = corpus[start : start + length]
            r = rng.random()
            if r < 0.05:
                out.append({"role": "system", "content": content})
            elif r < 0.35:
                out.append({"role": "user", "content": content})
            elif r < 0.75:
                msg: Msg = {"role": "assistant", "content": content}
                if rng.random() < 0.35:
                    msg["tool_calls"] = [self._tool_call(rng) for _ in range(rng.choice((1, 1, 1, 2)))]
                out.append(msg)
            else:
                out.append({"role": "tool", "tool_call_id": f"call_{rng.getrandbits(64):016x}",
                            "name": rng.choice(_TOOLS), "content": content})
        return out

    @staticmethod
    def _tool_call(rng: random.Random) -> Msg:
        args = {"path": f"src/pkg_{rng.randrange(40)}/module_{rng.randrange(200)}.py",
                "limit": rng.randrange(1, 500), "recursive": rng.random() < 0.5}
        return {"id": f"call_{rng.getrandbits(64):016x}", "type": "function",
                "function": {"name": rng.choice(_TOOLS), "arguments": _dumps(args).decode()}}


def record_of(msg: Msg, message_id: str, created_at: int) -> Msg:
    """The record the store writes for ``msg`` (same fields, same order)."""
    record = {"id": message_id, "created_at": created_at, "role": msg["role"],
              "kind": msg.get("kind") or "message", "content": msg.get("content")}
    for k, v in msg.items():
        if k not in record:
            record[k] = v
    return record


def encoded_lines(msgs: Sequence[Msg]) -> list[bytes]:
    """Transcript lines for ``msgs`` with fresh increasing ULIDs (what the floor writes)."""
    prev: str | None = None
    now = now_ms()
    lines = []
    for m in msgs:
        mid = next_id(prev)
        assert mid is not None
        lines.append(_dumps(record_of(m, mid, now), option=_NL))
        prev = mid
    return lines


# -- the sqlite3 peer ---------------------------------------------------------------------
FAIR_SCHEMA = ("CREATE TABLE messages(session TEXT NOT NULL, id TEXT NOT NULL, created_at INTEGER NOT NULL, "
               "body BLOB NOT NULL, PRIMARY KEY (session, id)) WITHOUT ROWID")
BARE_SCHEMA = "CREATE TABLE messages(body BLOB NOT NULL)"
INTPK_SCHEMA = "CREATE TABLE messages(id INTEGER PRIMARY KEY, body BLOB NOT NULL)"
_INSERT = "INSERT INTO messages(session, id, created_at, body) VALUES (?, ?, ?, ?)"
_SELECT = "SELECT body FROM messages WHERE session = ? ORDER BY id"
_DELETE_NEWEST = ("DELETE FROM messages WHERE session = ? AND id = "
                  "(SELECT max(id) FROM messages WHERE session = ?)")


class SqlitePeer:
    """stdlib sqlite3 doing the store's job: WAL, autocommit, one row per message keyed by
    (session, ULID id) so get-by-id and duplicate ids are caught, body = the orjson record.
    ``schema``: "fair" (that table), "intpk" (``id INTEGER PRIMARY KEY, body``: the rowid is
    the key, the body the same record with its ULID: what a plain sqlite3 chat log does) or
    "bare" (a rowid table with only the body of the message, no id: the harshest baseline)."""

    def __init__(self, path: str, synchronous: str, *, schema: str = "fair") -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)  # autocommit: one commit per statement
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.synchronous(synchronous)
        self.conn.execute({"fair": FAIR_SCHEMA, "bare": BARE_SCHEMA, "intpk": INTPK_SCHEMA}[schema])
        # The last id per session, kept in memory: this favours sqlite3 (jsonl_sessions reads
        # it from the file's tail on every append, so several processes can share a session).
        self.last: dict[str, str | None] = {}

    def synchronous(self, mode: str) -> None:
        self.conn.execute(f"PRAGMA synchronous={mode}")

    def row(self, session: str, msg: Msg) -> tuple[str, str, int, bytes]:
        mid = next_id(self.last.get(session))
        assert mid is not None
        self.last[session] = mid
        now = now_ms()
        return (session, mid, now, _dumps(record_of(msg, mid, now)))

    def append(self, session: str, msg: Msg) -> None:
        self.conn.execute(_INSERT, self.row(session, msg))

    def append_intpk(self, session: str, msg: Msg) -> None:
        """INSERT of the same record into the INTEGER PRIMARY KEY table (the rowid is the key)."""
        self.conn.execute("INSERT INTO messages(body) VALUES (?)", (self.row(session, msg)[3],))

    def append_bare(self, msg: Msg) -> None:
        self.conn.execute("INSERT INTO messages(body) VALUES (?)", (_dumps(msg),))

    def _transaction(self, fn: Callable[[], object]) -> None:
        self.conn.execute("BEGIN")
        try:
            fn()
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def append_many(self, session: str, msgs: Sequence[Msg]) -> None:
        rows = [self.row(session, m) for m in msgs]
        self._transaction(lambda: self.conn.executemany(_INSERT, rows))

    def insert_records(self, session: str, records: Sequence[Msg]) -> None:
        """Insert records that already carry ids (building a data set; also the rewrite)."""
        self.conn.executemany(_INSERT, [(session, r["id"], r["created_at"], _dumps(r)) for r in records])
        if records:
            self.last[session] = records[-1]["id"]

    def rewrite(self, session: str, records: Sequence[Msg]) -> None:
        def job() -> None:
            self.conn.execute("DELETE FROM messages WHERE session = ?", (session,))
            self.insert_records(session, records)
        self._transaction(job)

    def load(self, session: str) -> list[Msg]:
        return [_loads(body) for (body,) in self.conn.execute(_SELECT, (session,))]

    def remove_last(self, session: str) -> bool:
        return self.conn.execute(_DELETE_NEWEST, (session, session)).rowcount == 1

    def close(self) -> None:
        self.conn.close()


# -- floors -------------------------------------------------------------------------------
def open_append(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | _O_CLOEXEC, 0o600)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_replace_floor(path: str, data: bytes) -> None:
    """The least a durable whole-file replace can do: temp, write, fsync, rename, dir fsync."""
    directory = os.path.dirname(path)
    tmp = os.path.join(directory, "." + os.path.basename(path) + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC, 0o600)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(directory)


def encode_replace_floor(path: str, records: list[dict[str, Any]]) -> None:
    """The least a durable rewrite of messages can do: encode each record with orjson (one
    line each), then :func:`atomic_replace_floor` of the joined bytes."""
    atomic_replace_floor(path, b"".join([_dumps(r, option=_NEWLINE) for r in records]))


def orjson_floor_load(path: str) -> list[Msg]:
    """The dict-level floor of a load: ``for line in f: orjson.loads(line)``, kept in a list
    (a load has to return every message, so the dicts must stay alive)."""
    with open(path, "rb") as f:
        return [_loads(line) for line in f]


def orjson_floor_loop(path: str) -> int:
    """The literal ``for line in f: orjson.loads(line)`` loop, each dict freed at once (memory reused: cheaper, but no
    loader can do this). Returns the line count."""
    n = 0
    with open(path, "rb") as f:
        for line in f:
            _loads(line)
            n += 1
    return n
