"""The commands that move sessions in and out of a store: ``export`` (native JSONL, or
``--to claude-code``) and ``import`` (JSON / JSONL messages, or ``--from claude-code|codex``,
the command-line side of :mod:`jsonl_sessions.foreign.transfer`).

Each ``cmd_*`` takes the parsed arguments and returns the exit status; failures are
raised (see :mod:`jsonl_sessions.cli.output`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from .. import display
from ..base import BaseStore
from ..corruption import BOM
from ..errors import InvalidMessageError, SessionExistsError, SessionNotFoundError
from ..foreign.files import write_jsonl
from ..foreign.transfer import Imported, export_claude_code, import_claude_code, import_codex, iter_codex_rollouts
from ..keys import key_to_stem
from ..protocol import SessionBackend
from ..types import ChatMessage
from .output import EXIT_FAILURE, EXIT_OK, CliError, Printer, UsageError, err, json_out, nl_out, out
from .reading import messages_forward
from .stores import open_store


# -- export, import ---------------------------------------------------------------------------
def cmd_export(args: argparse.Namespace) -> int:
    if args.format != "jsonl":
        if args.to is not None or args.output is not None or args.session_id is not None or args.json:
            raise UsageError(f"--format {args.format} prints to stdout: not with --to, -o, --session-id or --json")
        return export_readable(args)
    if args.to is not None or args.output is not None or args.session_id is not None:
        if getattr(args, "json", False):
            raise UsageError("--json is the native export (one JSON message a line); --to writes another format")
        return export_to(args)
    store = open_store(args)
    Printer(True, 0)(_exported(store, args.key, args.lenient))
    sys.stdout.flush()
    return EXIT_OK


def export_readable(args: argparse.Namespace) -> int:
    """``export KEY --format markdown|html``: the session as a document for people (the
    viewer's rendering, :mod:`jsonl_sessions.viewer`), UTF-8 on stdout, written as it is
    rendered."""
    from .. import viewer

    if args.format == "html" and viewer.missing():
        err(f"error: --format html needs {', '.join(viewer.missing())}; {viewer.INSTALL_HINT}")
        return EXIT_FAILURE
    store = open_store(args)
    meta = store.get_session_metadata(args.key)
    if meta is None:
        raise SessionNotFoundError(key=args.key)
    messages = _exported(store, args.key, args.lenient)
    if args.format == "html":
        from ..viewer.html_export import iter_html

        _write(iter_html(meta, messages, hold=display.HOLD))
    else:
        from ..viewer.markdown_export import iter_markdown

        _write(iter_markdown(meta, messages, hold=display.HOLD))
    return EXIT_OK


def _exported(store: SessionBackend, key: str, lenient: bool) -> Iterator[ChatMessage]:
    """The session's messages for an export, oldest first, a page at a time (the store's
    ``page`` with ``whole_turns``): memory bounded by a page, whatever the session's length.

    Fail-closed unless ``lenient``: the whole transcript is checked first, before anything
    is written, by the rules of ``try_load`` (every line a message, ids in order), so a
    corrupt one raises :class:`CorruptTranscriptError` naming the file, line and byte
    offset and the command prints nothing on stdout. The JSONL backend checks it a block
    at a time, the databases a batch of rows at a time (``_check_strict``); a store of
    another package by its ``try_load``, which holds the session once. Lenient: corrupt
    lines are skipped, each page that has some logging one warning. The check and the
    pages are separate reads: a session rewritten between them is exported as the pages
    read it."""
    if not lenient:
        if isinstance(store, BaseStore):
            store._check_strict(key)
        else:
            store.try_load(key)
    return messages_forward(store, key, missing_ok=False, whole_turns=True)


#: How many characters of output are gathered before one write to stdout.
_WRITE_CHARS = 1 << 16


def _write(pieces: Iterable[str]) -> None:
    """``pieces`` to stdout as UTF-8, in writes of about :data:`_WRITE_CHARS` characters."""
    buffer: list[str] = []
    held = 0
    for piece in pieces:
        buffer.append(piece)
        held += len(piece)
        if held >= _WRITE_CHARS:
            sys.stdout.buffer.write("".join(buffer).encode("utf-8"))
            buffer.clear()
            held = 0
    sys.stdout.buffer.write("".join(buffer).encode("utf-8"))
    sys.stdout.flush()


def _import_messages(data: bytes, source: str) -> list[ChatMessage]:
    """Messages from a JSON array (OpenAI-style ``[{role, content, ...}]``), an object
    with a ``messages`` array, or JSONL (one object a line; blank lines skipped)."""
    data = data.removeprefix(BOM)
    items: list[tuple[str, Any]]
    try:
        whole = orjson.loads(data)
    except orjson.JSONDecodeError:
        items = []
        for number, line in enumerate(data.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                items.append((f"{source}:{number}", orjson.loads(line)))
            except orjson.JSONDecodeError as exc:
                raise CliError(f"{source}:{number}: not JSON: {exc}") from None
    else:
        if isinstance(whole, dict) and isinstance(whole.get("messages"), list):
            whole = whole["messages"]
        if isinstance(whole, list):
            items = [(f"{source}: item {i}", item) for i, item in enumerate(whole, 1)]
        else:
            items = [(f"{source}:1", whole)]
    messages = []
    for where, item in items:
        if not isinstance(item, dict):
            raise CliError(f"{where}: a message must be a JSON object, not {type(item).__name__}")
        try:
            messages.append(ChatMessage.from_dict(item))
        except InvalidMessageError as exc:
            raise CliError(f"{where}: {exc.reason or exc}") from None
    return messages


def cmd_import(args: argparse.Namespace) -> int:
    if args.source is not None:
        return import_from(args)
    if args.file is None:
        raise UsageError("import needs KEY and FILE (or --from FORMAT PATH)")
    if args.file == "-":
        data, source = sys.stdin.buffer.read(), "<stdin>"
    else:
        try:
            with open(args.file, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise CliError(f"cannot read {args.file}: {exc.strerror or exc}") from None
        source = args.file
    messages = _import_messages(data, source)
    if not messages:
        raise CliError(f"{source} holds no messages")
    if args.new_ids:
        messages = [m.replace(id="") for m in messages]
    key_to_stem(args.key)  # a bad key is a usage error before the store directory is created
    store = open_store(args, create=True)
    with store.lock(args.key):
        existed = store.session_exists(args.key)
        if existed and not args.append:
            raise SessionExistsError(f"session {args.key!r} already exists (add --append to add to it)",
                                     key=args.key)
        try:
            ids = store.append_many(args.key, messages)
        except InvalidMessageError as exc:
            has_ids = any(m.id for m in messages)
            raise CliError(f"{exc}" + ("; the input's own ids are kept: --new-ids lets the store assign new ones"
                                       if has_ids else "")) from None
    if args.json:
        json_out({"key": args.key, "created": not existed, "ids": ids})
        return EXIT_OK
    out(f"imported {len(ids)} messages into {'existing' if existed else 'new'} session {args.key!r} "
         f"({ids[0]} .. {ids[-1]})")
    return EXIT_OK


# -- import --from, export --to: the command-line side of jsonl_sessions.foreign.transfer ---
def import_from(args: argparse.Namespace) -> int:
    """``import --from FORMAT PATH``: one line per imported file; exit 1 when a file failed."""
    if args.file is not None:
        raise UsageError("with --from, give only PATH")
    path = args.key
    if not os.path.exists(path):
        raise CliError(f"no such file or directory: {path}")
    store = open_store(args, create=True)
    if args.source == "claude-code":
        if args.append:
            raise UsageError("--append is implied for claude-code: entries already stored (by uuid) are skipped")
        for done in import_claude_code(store, path):
            _report(done, args.json)
        return EXIT_OK
    files = list(iter_codex_rollouts(path)) if os.path.isdir(path) else [path]
    if not files:
        raise CliError(f"no Codex rollout (*.jsonl) under {path}")
    status = EXIT_OK
    for rollout in files:
        try:
            _report(import_codex(store, rollout, append=args.append), args.json)
        except (ValueError, OSError, SessionExistsError) as exc:  # reported; the other files still go in
            err(f"error: {rollout}: {exc}")
            status = EXIT_FAILURE
    return status


def _report(done: Imported, as_json: bool) -> None:
    if as_json:  # one object a file, as each is imported
        nl_out([{"key": done.key, "written": done.written, "left_out": done.left_out,
                 "bad_lines": list(done.bad_lines), "torn": done.torn}])
        return
    notes = [f"{done.left_out} left out"] if done.left_out else []
    if done.bad_lines:
        notes.append(f"{len(done.bad_lines)} unreadable line(s) skipped (line {done.bad_lines[0]}...)")
    if done.torn:
        notes.append("a torn last line ignored")
    out(f"imported {done.written} lines into {done.key!r}" + (f" ({'; '.join(notes)})" if notes else ""))


def export_to(args: argparse.Namespace) -> int:
    """``export KEY --to claude-code [-o FILE] [--session-id ID]``."""
    if args.to is None:
        raise UsageError("-o and --session-id apply with --to")
    store = open_store(args)
    export = export_claude_code(store, args.key, session_id=args.session_id, lenient=args.lenient)
    if args.output is None:
        sys.stdout.buffer.write(b"".join(orjson.dumps(e, option=orjson.OPT_APPEND_NEWLINE) for e in export.entries))
        sys.stdout.flush()
    else:
        target = args.output
        if os.path.isdir(target):
            target = os.path.join(target, f"{export.session_id}.jsonl")
        write_jsonl(target, export.entries)
        out(f"wrote {len(export.entries)} entries of session {export.session_id} to {target}")
    if export.left_out:
        err(f"note: {export.left_out} message(s) with no Claude Code form left out")
    return EXIT_OK
