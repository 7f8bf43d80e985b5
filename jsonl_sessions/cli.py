"""The ``jsonl-sessions`` command (also ``python -m jsonl_sessions``).

Commands: ``demo`` (a guided tour in a temporary store). Errors are one line on
stderr with a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence

from .errors import SessionStoreError
from .keys import key_to_stem
from .store import SessionStore


def _say(text: str = "") -> None:
    print(text, flush=True)


def demo(root: str | None = None) -> int:
    """Build a store, hold a short agent-like conversation, simulate a crash that tears
    the last write, and show that nothing acknowledged is lost."""
    root = root or tempfile.mkdtemp(prefix="jsonl-sessions-demo-")
    store = SessionStore(root)
    key = "demo/chat"
    _say(f"store: {root}")
    ids = [
        store.append(key, {"role": "system", "content": "You are a terse assistant."}),
        store.append(key, {"role": "user", "content": "What is 2 + 2?"}),
        store.append(key, {"role": "assistant", "content": None,
                           "tool_calls": [{"id": "call_1", "type": "function",
                                           "function": {"name": "add", "arguments": "{\"a\":2,\"b\":2}"}}]}),
        store.append(key, {"role": "tool", "tool_call_id": "call_1", "content": "4"}),
        store.append(key, {"role": "assistant", "content": "4."}),
    ]
    _say(f"appended {len(ids)} messages to session {key!r}; ids are ULIDs, increasing: {ids[0]} .. {ids[-1]}")
    path = os.path.join(root, key_to_stem(key) + ".jsonl")
    _say(f"transcript file: {path}")
    with open(path, encoding="utf-8") as f:
        for line in f:
            _say("  " + (line.rstrip("\n") if len(line) < 110 else line[:107] + "..."))

    _say("\nsimulating a crash in the middle of an append (a torn tail without its newline)...")
    with open(path, "ab") as f:
        f.write(b'{"id":"01ZZZZZZZZZZZZZZZZZZZZZZZZ","role":"assistant","content":"half writ')
    msgs = store.try_load(key)
    _say(f"try_load still returns the {len(msgs)} acknowledged messages; the torn tail is an uncommitted write")
    new_id = store.append(key, {"role": "user", "content": "Thanks!"})
    _say(f"the next append removed the torn tail first, then wrote {new_id}")
    with open(path, "rb") as f:
        ends_clean = f.read().endswith(b"\n")
    _say(f"now {len(store.try_load(key))} messages; the file ends with a newline again: {ends_clean}")

    _say("\nreverting the last exchange with compare-and-remove: "
         f"remove_last(expected_id=...) -> {store.remove_last(key, expected_id=new_id)}")
    _say(f"a stale expected_id changes nothing: {store.remove_last(key, expected_id=new_id)}")

    _say("\nreplacing the conversation and its trim-breadcrumb flag as one crash-atomic unit...")
    kept = store.try_load(key)[-2:]
    store.replace_conversation_state(key, [{"role": "system", "content": "[earlier turns trimmed]"}, *kept], True)
    _say(f"messages: {[m.role for m in store.try_load(key)]}, breadcrumb: {store.get_session_trim_breadcrumb(key)}")

    _say("\ncorrupting a line in the middle (fail closed: a precise error, never an empty history)...")
    with open(path, "rb") as f:
        data = f.read().split(b"\n")
    data[1] = b"{not json"
    with open(path, "wb") as f:
        f.write(b"\n".join(data))
    try:
        store.try_load(key)
    except SessionStoreError as exc:
        _say(f"try_load raised {type(exc).__name__}: line {exc.line}, byte offset {exc.offset}")  # type: ignore[attr-defined]
    _say(f"load (lenient) skips it with a warning: {len(store.load(key))} messages")
    _say(f"\nfiles in the store: {sorted(os.listdir(root))}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jsonl-sessions", description="Crash-safe JSONL session store for AI agents.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p_demo = sub.add_parser("demo", help="run a guided tour in a temporary store",
                            description="Create a store in a temp directory, append a short conversation, "
                            "simulate a torn write and a corrupt line, and show recovery.")
    p_demo.add_argument("--root", help="directory for the demo store (default: a new temp dir)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            return demo(args.root)
        parser.print_help()
        return 2
    except BrokenPipeError:  # e.g. piped into `head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except SessionStoreError as exc:
        print(f"jsonl-sessions: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"jsonl-sessions: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
