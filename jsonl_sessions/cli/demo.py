"""``jsonl-sessions demo``: a guided tour in a temporary store.

A short agent conversation, a fork (``copy_messages``) and a revert
(``truncate_messages``), a simulated crash that tears an append, a corrupt line caught
precisely, ``verify`` and ``repair`` run for real on the demo store, and where the files
are. The store is left in place so the other commands can be tried on it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import stat
import sys
import tempfile
from collections.abc import Callable

import orjson

from ..errors import CorruptTranscriptError
from ..jsonl.layout import SessionFiles
from ..jsonl.store import SessionStore
from .output import CliError, UsageError, render_message, terminal_width
from .stores import is_sqlite_path
from .upkeep import run_repair
from .verify import run_verify

CHAT = "demo/chat"
FORK = "demo/what-if"


def _say(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _section(title: str) -> None:
    _say()
    _say(f"== {title}")


def _run(argv: list[str], command: Callable[[], int]) -> int:
    """Run a real ``jsonl-sessions`` command on the demo store, showing its command line
    ``argv`` first and its exit status after."""
    _say(f"$ jsonl-sessions {' '.join(shlex.quote(a) for a in argv)}")
    status = command()
    sys.stdout.flush()
    _say(f"(exit status {status})")
    return status


def cmd_demo(args: argparse.Namespace) -> int:
    """``demo [--root DIR]``: the tour, in a new temporary directory unless ``--root``."""
    backend = getattr(args, "backend", "auto")
    # A root the other commands would open as a SQLite file (its name or header) is refused
    # too, before anything is created: the tour would otherwise make a directory of that name.
    if backend == "sqlite" or (args.root is not None and is_sqlite_path(args.root, backend)):
        raise UsageError("the demo tours the JSONL files (torn writes, corrupt lines); it has no SQLite version "
                         "(give --root a directory)")
    if not getattr(args, "json", False):
        return run_demo(args.root, args.width)
    # --json: the narration (and the commands it runs) goes to stderr, the result to stdout.
    where = os.path.abspath(args.root if args.root is not None else tempfile.mkdtemp(prefix="jsonl-sessions-demo-"))
    with contextlib.redirect_stdout(sys.stderr):
        status = run_demo(where, args.width)
    sys.stdout.write(orjson.dumps({"root": where, "sessions": SessionStore(where).list_sessions()},
                                  option=orjson.OPT_APPEND_NEWLINE).decode("utf-8"))
    return status


def run_demo(root: str | None, width: int | None) -> int:
    """Build the demo store at ``root`` (a new temporary directory when None) and narrate
    it at ``width`` columns (None: the terminal's). Raises CliError when ``root`` already
    holds sessions."""
    columns = terminal_width() if width is None else width
    where = os.path.abspath(root if root is not None else tempfile.mkdtemp(prefix="jsonl-sessions-demo-"))
    store = SessionStore(where)
    if store.list_sessions():
        raise CliError(f"{where} already holds sessions; the demo needs a new or empty directory")
    _say(f"jsonl-sessions demo: a store in {where}")
    ids = _conversation(store, columns)
    _fork_and_revert(store, ids)
    _torn_write(store)
    _corrupt_line(store)
    _files(where)
    return 0


def _transcript(store: SessionStore, key: str) -> str:
    return SessionFiles.of(store.root, key).transcript


def _conversation(store: SessionStore, columns: int) -> list[str]:
    _section("1. An agent conversation: each append is one write of one line, fsynced before it returns")
    ids = [
        store.append(CHAT, {"role": "system", "content": "You are a terse assistant with a calculator."}),
        store.append(CHAT, {"role": "user", "content": "What is 2 + 2?"}),
        store.append(CHAT, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":2,\"b\":2}"}}]}),
        store.append(CHAT, {"role": "tool", "tool_call_id": "call_1", "content": "4"}),
        store.append(CHAT, {"role": "assistant", "content": "4."}),
    ]
    _say("\n\n".join(render_message(m, columns) for m in store.try_load(CHAT)))
    path = _transcript(store, CHAT)
    _say(f"\nids are ULIDs, strictly increasing: {ids[0]} .. {ids[-1]}")
    _say(f"the transcript is plain JSONL, one message a line: {path}")
    with open(path, encoding="utf-8") as f:
        for line in list(f)[:2]:
            line = line.rstrip("\n")
            _say("  " + (line if len(line) <= columns - 2 else line[: max(columns - 5, 20)] + "..."))
    return ids


def _fork_and_revert(store: SessionStore, ids: list[str]) -> None:
    _section("2. Fork and revert")
    point = store.copy_messages(CHAT, FORK, up_to_message_id=ids[1])
    store.append(FORK, {"role": "assistant", "content": "Four, without a tool."})
    meta = store.get_session_metadata(FORK)
    assert meta is not None
    _say(f"copy_messages({CHAT!r}, {FORK!r}, up_to_message_id=<the question>) forked at {point}")
    _say(f"the fork answers differently and now has {meta.message_count} messages; "
         f"its sidecar records parent={meta.parent!r}, fork_point={meta.fork_point!r}")
    follow_up = [store.append(CHAT, {"role": "user", "content": "And 3 + 3?"}),
                 store.append(CHAT, {"role": "assistant", "content": "7."})]
    removed = store.truncate_messages(CHAT, ids[-1])
    _say(f"a wrong answer on {CHAT!r} ({follow_up[-1]}) is reverted: "
         f"truncate_messages({CHAT!r}, <the last good id>) removed {removed} messages; "
         f"{len(store.try_load(CHAT))} remain")


def _torn_write(store: SessionStore) -> None:
    _section("3. A crash in the middle of an append (a torn tail: bytes without their newline)")
    path = _transcript(store, CHAT)
    with open(path, "ab") as f:
        f.write(b'{"id":"01ZZZZZZZZZZZZZZZZZZZZZZZZ","role":"assistant","content":"half writ')
    _say(f"try_load still returns the {len(store.try_load(CHAT))} acknowledged messages: "
         "a torn tail is an uncommitted write, never a message")
    _run(["verify", CHAT], lambda: run_verify(store.root, [CHAT]))
    new_id = store.append(CHAT, {"role": "user", "content": "Thanks!"})
    with open(path, "rb") as f:
        clean_end = f.read().endswith(b"\n")
    _say(f"the next append removed the torn tail first, then wrote {new_id}; "
         f"{len(store.try_load(CHAT))} messages; the file ends with a newline again: {clean_end}")


def _corrupt_line(store: SessionStore) -> None:
    _section("4. A corrupt line in the middle of a transcript (fail closed: a precise error, never [])")
    fork_path = _transcript(store, FORK)
    with open(fork_path, "rb") as f:
        lines = f.read().split(b"\n")
    lines[1] = b"{not json"
    with open(fork_path, "wb") as f:
        f.write(b"\n".join(lines))
    try:
        store.try_load(FORK)
    except CorruptTranscriptError as exc:
        _say(f"try_load raised CorruptTranscriptError: line {exc.line}, byte offset {exc.offset}")
    _say(f"load (lenient) skips it with a logged warning: {len(store.load(FORK))} messages")
    _run(["verify"], lambda: run_verify(store.root, None))
    _run(["repair", FORK], lambda: run_repair(store, FORK))
    _run(["verify"], lambda: run_verify(store.root, None))


def _files(root: str) -> None:
    _section("5. The files")
    for name in sorted(os.listdir(root)):
        st = os.lstat(os.path.join(root, name))
        _say(f"  {stat.filemode(st.st_mode)}  {st.st_size:>6}  {name}")
    _say(f"\n{root} is kept; try:")
    for argv in (["ls"], ["show", CHAT], ["tail", "-n", "2", CHAT], ["verify"]):
        _say(f"  jsonl-sessions --root {shlex.quote(root)} {' '.join(shlex.quote(a) for a in argv)}")
