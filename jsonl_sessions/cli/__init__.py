"""The ``jsonl-sessions`` command (also ``python -m jsonl_sessions``): look inside a store.

This module is the entry point (:func:`main`) and the argument parser (:data:`TABLE`
lists every command: help, arguments, handler; :func:`build_parser` builds the parser
from it); the handlers are in :mod:`.reading` (ls, show, search, tail), :mod:`.transfer`
(export, import), :mod:`.upkeep` (rm, prune, stats, gc, repair), :mod:`.verify`, :mod:`.index`, :mod:`.migrate`,
:mod:`.demo` and :mod:`.serve`, what they print in :mod:`.output`; :mod:`.stores` opens the store.

Commands (:data:`jsonl_sessions.cli.COMMANDS`): ``ls``, ``show``, ``tail``, ``search``, ``verify``,
``repair``, ``gc``, ``export``, ``import``, ``rm``, ``prune``, ``stats``, ``index``, ``migrate``, ``demo``, ``serve``.
The store directory is
``--root``, else ``$JSONL_SESSIONS_ROOT``, else the per-user data directory
(:func:`default_root`). Commands that only read never create it.

Exit status: 0 success, 1 failure (or ``verify`` found problems), 2 usage error (bad
option, bad session key, no store at the root), 130 interrupted (Ctrl-C). Every error is
one line on stderr, ``jsonl-sessions: error: ...``, never a traceback; library warnings
(e.g. corrupt lines skipped by a lenient read) are one line each too. Text meant for
people has control characters made visible, so message content cannot drive the
terminal; ``--json`` / ``--nl`` / ``--jsonl`` / ``export`` print JSON.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from .. import __version__
from ..base import DEFAULT_LOCK_TIMEOUT
from ..errors import InvalidSessionKeyError, LockTimeoutError, SessionStoreError
from ..location import ENV_ROOT, default_root, resolve_root
from .demo import cmd_demo
from .index import cmd_index
from .migrate import cmd_migrate
from .output import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, PROG, CliError, UsageError, err
from .reading import SORTS, cmd_ls, cmd_search, cmd_show, cmd_tail
from .serve import cmd_serve
from .transfer import cmd_export, cmd_import
from .upkeep import cmd_gc, cmd_prune, cmd_repair, cmd_rm, cmd_stats
from .verify import cmd_verify

__all__ = ["COMMANDS", "build_parser", "default_root", "main", "resolve_root"]

#: The library's logger: its warnings become ``jsonl-sessions: warning: ...`` lines.
LOGGER = logging.getLogger("jsonl_sessions")


class _WarningsToStderr(logging.Handler):
    """Library warnings and errors as one ``jsonl-sessions: warning: ...`` (``error: ...``,
    with the exception that caused it) line each, each once (a following ``tail -f`` would
    otherwise repeat the same one every poll)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        cause = record.exc_info[1] if record.exc_info else None
        if cause is not None:
            text += f": {type(cause).__name__}: {cause}"
        if text not in self.seen:
            self.seen.add(text)
            err(f"{'error' if record.levelno >= logging.ERROR else 'warning'}: {text}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit status.
    Never raises: every failure is one line on stderr and its exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    handler = _WarningsToStderr()
    LOGGER.addHandler(handler)
    try:
        return _run(args)
    finally:
        LOGGER.removeHandler(handler)


def _run(args: argparse.Namespace) -> int:
    """The command's exit status; each failure it raises becomes one line on stderr."""
    try:
        status: int = args.handler(args)
        return status
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. piped into `head`: stop quietly
        _silence_stdout()
        return EXIT_FAILURE
    except (UsageError, InvalidSessionKeyError) as exc:
        err(f"error: {exc}")
        return EXIT_USAGE
    except LockTimeoutError as exc:
        err(f"error: {exc}; try again, or raise --lock-timeout")
        return EXIT_FAILURE
    except (SessionStoreError, CliError) as exc:
        err(f"error: {exc}")
        return EXIT_FAILURE
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        err(f"error: {exc.strerror or exc}{where}")
        return EXIT_FAILURE


def _silence_stdout() -> None:
    """After EPIPE: point stdout at devnull so the interpreter's final flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


# -- the parser ----------------------------------------------------------------------------
def _integer(text: str, minimum: int, rule: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{rule}: {value}")
    return value


def _positive_int(text: str) -> int:
    return _integer(text, 1, "must be at least 1")


def _count(text: str) -> int:
    return _integer(text, 0, "must not be negative")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0: {text}")
    return value


def _root_help() -> str:
    text = (f"Store directory: --root DIR, else ${ENV_ROOT}, else the per-user data directory "
            "(Linux: $XDG_DATA_HOME/jsonl-sessions, default ~/.local/share/jsonl-sessions; macOS: "
            "~/Library/Application Support/jsonl-sessions; Windows: %LOCALAPPDATA%\\jsonl-sessions). "
            "A root that is a file, or ends in .db, .sqlite or .sqlite3, is a SQLite store (see --backend).")
    return textwrap.fill(text, 78, break_on_hyphens=False) + f"\nNow: {resolve_root()}"


BACKENDS = ("auto", "jsonl", "sqlite")
_LOCK_TIMEOUT_HELP = f"how long a write waits for a busy session (default {DEFAULT_LOCK_TIMEOUT:g}, as the API)"
_BACKEND_HELP = ("the store's kind: a JSONL directory or a SQLite file (default auto: SQLite when the root is a "
                 "file or ends in .db, .sqlite or .sqlite3)")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command in :data:`TABLE`; each sub-parser sets ``handler``."""
    # the options of the commands that act on no store at --root (migrate names its two)
    waiting = argparse.ArgumentParser(add_help=False)
    waiting.add_argument("--lock-timeout", metavar="SECONDS", type=_seconds, default=argparse.SUPPRESS,
                         help=_LOCK_TIMEOUT_HELP)
    common = argparse.ArgumentParser(add_help=False, parents=[waiting])
    common.add_argument("--root", metavar="DIR", default=argparse.SUPPRESS,
                        help=f"the store directory (now: {resolve_root()})")
    common.add_argument("--backend", choices=BACKENDS, default=argparse.SUPPRESS, help=_BACKEND_HELP)
    parser = argparse.ArgumentParser(
        prog=PROG, description="Look inside a jsonl_sessions store: crash-safe JSONL chat sessions for AI agents.",
        epilog=f"{_root_help()}\n\nExit status: 0 ok, 1 failure or problems found, 2 usage error, 130 "
               f"interrupted.\n`{PROG} COMMAND --help` describes each command.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", metavar="DIR", default=None, help=f"the store directory (now: {resolve_root()})")
    parser.add_argument("--lock-timeout", metavar="SECONDS", type=_seconds, default=DEFAULT_LOCK_TIMEOUT,
                        help=_LOCK_TIMEOUT_HELP)
    parser.add_argument("--backend", choices=BACKENDS, default="auto", help=_BACKEND_HELP)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in TABLE.items():
        p = sub.add_parser(name, help=command.summary, description=command.description,
                           parents=[common if command.at_root else waiting])
        command.arguments(p)
        p.set_defaults(handler=command.handler)
    return parser


# -- each command's arguments ---------------------------------------------------------------
def _outputs(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--json", action="store_true", help="a JSON array of session objects")
    group.add_argument("--nl", action="store_true", help="newline-delimited JSON: one session object a line")


def _rendering(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jsonl", action="store_true", help="raw output: one JSON message a line, as stored")
    p.add_argument("--json", dest="jsonl", action="store_true", help="the same as --jsonl (NDJSON)")
    p.add_argument("--width", type=_count, metavar="COLUMNS", default=None,
                   help="wrap text at this width (default: the terminal's; 0: no wrapping)")


def _key(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", metavar="KEY", help="the session key")


def _ls(p: argparse.ArgumentParser) -> None:
    _outputs(p)
    p.add_argument("--sort", choices=list(SORTS), default="key",
                   help="order: key (default), name, updated_at, created_at, message_count; sessions without "
                        "a name or creation time come last. The older names activity, created, messages and "
                        "size list the newest or largest first")
    p.add_argument("--desc", action="store_true", help="descending order")
    p.add_argument("-r", "--reverse", action="store_true", help="reverse the order")
    p.add_argument("-n", "--limit", type=_count, metavar="N", help="at most N sessions (a page)")
    paging = p.add_mutually_exclusive_group()
    paging.add_argument("--offset", type=_count, default=0, metavar="N", help="skip the first N sessions")
    paging.add_argument("--cursor", metavar="CURSOR",
                        help="continue a listing after its last page (the cursor it printed; same --sort and "
                             "direction)")
    p.add_argument("--alias", metavar="AGENT", help="only sessions attributed to this agent alias")
    p.add_argument("--state", choices=("idle", "running", "error", "none"),
                   help="only sessions in this run state (none: never set)")
    p.add_argument("--name-prefix", metavar="TEXT", help="only sessions whose name starts with TEXT (case-sensitive)")
    p.add_argument("--updated-since", type=_when, metavar="TIME",
                   help="only sessions changed at or after TIME (ISO 8601, e.g. 2026-12-04T09:00Z; local time "
                        "without an offset)")


def _when(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    return value.astimezone() if value.tzinfo is None else value


def _show(p: argparse.ArgumentParser) -> None:
    _key(p)
    p.add_argument("-n", "--limit", type=_positive_int, metavar="N", help="at most N messages (a page)")
    cursor = p.add_mutually_exclusive_group()
    cursor.add_argument("--before", metavar="ID", help="only messages older than this message id (a page cursor)")
    cursor.add_argument("--after", metavar="ID", help="only messages newer than this message id")
    cursor.add_argument("--around", metavar="ID",
                        help="this message with --context messages before and after it (open a search hit)")
    p.add_argument("-C", "--context", type=_count, default=5, metavar="N",
                   help="with --around: how many messages either side (default 5)")
    _rendering(p)


def _tail(p: argparse.ArgumentParser) -> None:
    _key(p)
    p.add_argument("-n", type=_count, default=10, metavar="N", help="how many of the newest to print (default 10)")
    p.add_argument("-f", "--follow", action="store_true", help="follow appends, like tail -f")
    p.add_argument("--interval", type=_seconds, default=1.0, metavar="SECONDS",
                   help="how often -f looks for changes (default 1)")
    _rendering(p)


def _millis(text: str) -> int:
    """A time for --since / --until: milliseconds since the epoch, or an ISO 8601 date or
    date and time (local time unless it names its offset)."""
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not milliseconds or an ISO 8601 time: {text!r}") from None
    return int(moment.timestamp() * 1000)


def _search(p: argparse.ArgumentParser) -> None:
    p.add_argument("keyword", metavar="KEYWORD", help='words and "quoted phrases"; a message must hold every one')
    p.add_argument("--alias", metavar="AGENT", help="only sessions attributed to this agent alias")
    p.add_argument("--limit", type=_count, default=50, metavar="N",
                   help="at most N hits, then the --cursor of the next page (default 50; 0: all); with -l: "
                        "at most N sessions")
    p.add_argument("--role", action="append", metavar="ROLE", help="only messages of this role (repeatable)")
    p.add_argument("--key", action="append", metavar="KEY", help="only this session (repeatable)")
    p.add_argument("--name", metavar="TEXT", help="only sessions whose name contains TEXT (case-insensitive)")
    p.add_argument("--since", type=_millis, metavar="TIME",
                   help="only messages created at or after TIME (ms since the epoch, or ISO 8601 like 2026-12-01)")
    p.add_argument("--until", type=_millis, metavar="TIME", help="only messages created before TIME")
    p.add_argument("--cursor", metavar="CURSOR", help="the next page of an earlier search (printed after its page)")
    p.add_argument("-l", "--sessions", action="store_true",
                   help="only the matching sessions, as the ls table (like grep -l)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--json", action="store_true",
                       help="one JSON object a line per hit: key, field (message), id, role, created_at (ms), "
                            "text (the snippet), start/end of its first match and matches (every [start, end) in "
                            "text); with -l: a JSON array of session objects")
    group.add_argument("--nl", action="store_true", help="with -l: one session object a line (implies -l)")


def _verify(p: argparse.ArgumentParser) -> None:
    p.add_argument("keys", nargs="*", metavar="KEY", help="only these sessions (default: the whole store)")
    p.add_argument("--json", action="store_true", help="the report as JSON")
    p.add_argument("--fix", action="store_true",
                   help="clear what killed writers left (temp files, orphan sidecars, interrupted writes), each "
                        "session under its lock, then report again (JSONL stores; transcripts are never touched)")


def _repair(p: argparse.ArgumentParser) -> None:
    _key(p)
    p.add_argument("--json", action="store_true",
                   help='the report as JSON: {"key", "changed", "kept", "dropped" (line, offset, reason, corrupt), '
                        '"torn_bytes", "bom", "recovered", "quarantine", "torn_saved"}')


def _index(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("build", "status", "drop"),
                   help="build: create or bring up to date; status: what it holds; drop: delete it")
    p.add_argument("--rebuild", action="store_true", help="with build: drop the index first and build it anew")
    p.add_argument("--json", action="store_true", help="the result as one JSON object")


def _gc(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="the removed files as JSON")


def _export(p: argparse.ArgumentParser) -> None:
    _key(p)
    p.add_argument("--lenient", action="store_true",
                   help="skip corrupt lines (with a warning) instead of failing; without it, the whole transcript "
                        "is checked first and a damaged one refused (file, line, byte offset) before anything is "
                        "written")
    p.add_argument("--json", action="store_true",
                   help="the default output, named for uniformity: one JSON message a line (NDJSON); not with --to")
    p.add_argument("--format", choices=("jsonl", "markdown", "html"), default="jsonl",
                   help="jsonl (default): the messages as stored; markdown: a readable document (content in "
                        "fences); html: one self-contained page rendered as the viewer shows it (needs the viewer "
                        "extra)")
    p.add_argument("--to", choices=("claude-code",), default=None, help="another tool's transcript format")
    p.add_argument("-o", "--output", metavar="FILE", default=None,
                   help="with --to: write FILE atomically instead of stdout (as <session id>.jsonl inside a "
                        "directory)")
    p.add_argument("--session-id", metavar="ID", default=None,
                   help="with --to claude-code: the session id of new entries (default: the Claude session's, "
                        "else one derived from the first message)")


def _import(p: argparse.ArgumentParser) -> None:
    p.usage = f"{PROG} import [options] KEY FILE\n       {PROG} import [options] --from {{claude-code,codex}} PATH"
    p.add_argument("key", metavar="KEY", help="the session key (with --from: the PATH to read)")
    p.add_argument("file", metavar="FILE", nargs="?", default=None, help="the file to read, or - for stdin")
    p.add_argument("--from", dest="source", choices=("claude-code", "codex"), default=None,
                   help="read another tool's session files")
    p.add_argument("--append", action="store_true", help="append to the session if it exists")
    p.add_argument("--new-ids", action="store_true", help="ignore the input's ids; the store assigns new ones")
    p.add_argument("--json", action="store_true",
                   help='the result as JSON: {"key", "created", "ids"} (with --from: one such object a line, '
                        'with "written" instead of "ids")')


def _rm(p: argparse.ArgumentParser) -> None:
    p.add_argument("keys", nargs="+", metavar="KEY", help="the session keys")
    p.add_argument("-f", "--force", action="store_true", help="also remove running sessions; ignore missing ones")
    p.add_argument("--json", action="store_true",
                   help='a JSON array, one object a key: {"key", "removed", "reason" (missing, running or null), '
                        '"kept" (quarantine files)}')


MIGRATE_BACKENDS = (*BACKENDS, "postgres")


def _migrate(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", metavar="SRC", help="the store to copy: a JSONL directory, a SQLite file or a "
                   "PostgreSQL DSN (postgresql://...)")
    p.add_argument("target", metavar="DST", help="the store to copy into (created if missing)")
    p.add_argument("--from", dest="source_backend", choices=MIGRATE_BACKENDS, default="auto",
                   help="SRC's kind (default auto: postgres for a postgresql:// URL)")
    p.add_argument("--to", dest="target_backend", choices=MIGRATE_BACKENDS, default="auto",
                   help="DST's kind (default auto)")
    p.add_argument("--from-schema", dest="source_schema", default="jsonl_sessions",
                   help="SRC's PostgreSQL schema (default jsonl_sessions)")
    p.add_argument("--to-schema", dest="target_schema", default="jsonl_sessions",
                   help="DST's PostgreSQL schema (default jsonl_sessions)")
    existing = p.add_mutually_exclusive_group()
    existing.add_argument("--skip-existing", action="store_true",
                          help="leave a session that DST holds with other content as it is (reported, not an error)")
    existing.add_argument("--overwrite", action="store_true",
                          help="replace a session that DST holds with other content by SRC's")
    p.add_argument("--json", action="store_true",
                   help='the result as JSON: {"source", "target", "copied", "unchanged", "skipped" (keys), '
                        '"failed" (key: error)}')


def _prune(p: argparse.ArgumentParser) -> None:
    p.add_argument("--older-than", type=_seconds, required=True, metavar="HOURS",
                   help="delete the sessions with no activity (message or metadata change) for this many hours")
    p.add_argument("-n", "--dry-run", action="store_true", help="only list what would be deleted")
    p.add_argument("--json", action="store_true",
                   help='the result as JSON: {"dry_run", "older_than_hours", "cutoff", "removed" (how many), '
                        '"sessions" ({"key", "last_activity"}), "kept_running" (keys)}')


def _stats(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="as JSON")


def _demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--width", type=_count, metavar="COLUMNS", default=None, help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true",
                   help='the narration on stderr; on stdout {"root", "sessions"} as JSON')


def _serve(p: argparse.ArgumentParser) -> None:
    p.add_argument("store", metavar="STORE", nargs="?", default=None,
                   help="a JSONL directory, a SQLite file or a PostgreSQL DSN (postgresql://...); default: --root")
    p.add_argument("--host", default="127.0.0.1",
                   help="the address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_count, default=8765, help="the port (default 8765; 0: any free port)")
    p.add_argument("--from", dest="source", choices=("claude-code", "codex"), default=None,
                   help="STORE is that tool's session folder (e.g. ~/.claude/projects, ~/.codex/sessions), shown "
                        "read-only from memory (needs the testing extra too)")
    p.add_argument("--postgres", action="store_true",
                   help="STORE is a PostgreSQL DSN in libpq's key=value form (a postgresql:// URL is recognised)")
    p.add_argument("--schema", default="jsonl_sessions", help="a PostgreSQL store's schema (default jsonl_sessions)")
    p.add_argument("--open", action="store_true", help="open the address in a web browser")
    p.add_argument("--get", metavar="PATH", default=None,
                   help="print the response to GET PATH (e.g. '/session?key=K') without starting a server, and exit")
    p.add_argument("--json", action="store_true",
                   help='print the address as JSON {"url", "store"}; with --get: {"path", "status", "content_type", '
                        '"body"}')


@dataclass(frozen=True)
class Command:
    """One command: its one-line summary, its ``--help`` description, the function that
    adds its arguments, and the function that runs it (returns the exit status)."""

    summary: str
    description: str
    arguments: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]
    #: whether it acts on the store at --root (and so takes --root and --backend)
    at_root: bool = True


#: Every command, in the order ``--help`` lists them (the README documents each one).
TABLE: dict[str, Command] = {
    "ls": Command(
        "list sessions",
        "A table of sessions: key, name, messages, size, last activity (newest change of transcript or "
        "metadata, local time), state. Reads metadata only. With --limit N a page of N sessions; when more "
        "remain, the cursor of the next page is on stderr (with --json: an object holding the sessions and "
        "the cursor, null after the last page) and --cursor continues from it, stable while sessions are "
        "added (keyset paging).",
        _ls, cmd_ls),
    "show": Command(
        "print a session's messages",
        "A session's messages, oldest first: role, local time and id on a header line, then the text "
        "(wrapped), read as the viewer reads them: each tool call (an OpenAI tool_calls entry or an "
        "Anthropic tool_use block) as '-> name(arguments)  [id]', each result as 'result of ID' (a tool "
        "message's header, or a '<- result of ID' line for a tool_result block) with its output. All of "
        "them, or with --limit N the N newest (before --before ID / after --after ID).",
        _show, cmd_show),
    "tail": Command(
        "print the newest messages; -f follows new ones",
        "The newest N messages. With -f, keeps printing messages as they are appended (polling, "
        "lock-free), also across a truncate, revert or rewrite of the session, until Ctrl-C.",
        _tail, cmd_tail),
    "search": Command(
        "find messages by keyword, like grep",
        "Every message whose text holds each word and \"quoted phrase\" of KEYWORD (case-insensitive, with "
        "Unicode case folding: strasse finds Straße), one line each: session key, message id, role and the "
        "text around the match (matches marked), newest first, filtered by --role, --key, --alias, --name, "
        "--since and --until. --limit N hits a page, then the --cursor of the next page on stderr. "
        "Uses the full-text index when there is one (jsonl-sessions index). With -l only the sessions "
        "(their name or text holds KEYWORD). Open a hit with show KEY --around ID. Exit status 0 when "
        "something matched, 1 when nothing did (like grep).",
        _search, cmd_search),
    "verify": Command(
        "check the store's health (fsck); exit 1 on problems",
        "Reads every file of the store (or of the sessions KEY...) and reports torn tails, corrupt lines "
        "(line and byte offset), ids out of order, missing, corrupt, mismatched or orphan sidecars, "
        "leftover temp files, interrupted writes (pending records, odd counters), permissions other "
        "than 0600 (0700 for the directory) and symlinks, with how to fix each. Changes nothing, unless "
        "--fix: then it clears leftover temp files and orphan sidecars and completes interrupted writes "
        "(each session under its lock, checked again there), says what it fixed and reports again. "
        "Exit status 0 healthy, 1 problems found, 2 usage error.",
        _verify, cmd_verify),
    "repair": Command(
        "set corrupt lines aside (quarantine) and rewrite a session",
        "Rewrites the session keeping every line that parses, dropping a torn tail and duplicate "
        "lines; when it drops a corrupt line it first saves the original bytes in "
        "<stem>.quarantine-<time>.jsonl.bak next to it. Prints what was kept, set aside, and where.",
        _repair, cmd_repair),
    "gc": Command(
        "remove the lock files and leftovers of deleted sessions",
        "Removes what sessions that no longer exist left behind: their lock files (one per key ever "
        "used), sidecars without a transcript and temp files of interrupted writes. Each is removed "
        "under its session's lock after checking again that the session is absent; busy sessions are "
        "skipped and live sessions are never touched, so it is safe while other processes use the "
        "store. Quarantine files are kept.",
        _gc, cmd_gc),
    "export": Command(
        "print a session as JSONL, Markdown or HTML",
        "The session's messages as JSONL on stdout, one message a line (all fields, as stored). With "
        "--format markdown: a document for people (each message under a heading, its content in a fence "
        "longer than any backtick run in it, tool calls with their results); --format html: one "
        "self-contained page (no script, nothing fetched), rendered as `serve` shows it. "
        "Every format is written a page at a time as the session is read, so a session of any length "
        "needs the memory of a page. Refuses a transcript with corrupt lines unless --lenient: it is "
        "checked whole before anything is written, and the error names the file, line and byte offset "
        "(exit status 1, nothing on stdout). With --to claude-code: the session "
        "as a Claude Code transcript that Claude Code and the Claude Agent SDK resume (entries stored "
        "by the Claude adapter or an import as they are; other user/assistant text messages as new "
        "entries; lines with no Claude Code form left out and counted on stderr).",
        _export, cmd_export),
    "import": Command(
        "create a session from JSONL or a JSON array of messages",
        "Reads messages from FILE (- for stdin): JSONL (one message object a line), or a JSON array of "
        "{role, content, ...} objects as OpenAI-style SDKs produce (or an object with a \"messages\" "
        "array). Extra fields (tool_calls, tool_call_id, name...) are kept; so are ids and created_at. "
        "Written in one atomic batch. Refuses an existing session unless --append. With --from: PATH is "
        "a Claude Code transcript (<project>/<session>.jsonl, with its subagent transcripts), a project "
        "directory or the directory of projects (~/.claude/projects), imported as claude/<project>/<session> (entries already there, by uuid, are "
        "skipped), or a Codex CLI rollout file or sessions directory, imported as codex/<session id>. "
        "Unknown line types, a byte order mark and a torn last line are tolerated.",
        _import, cmd_import),
    "rm": Command(
        "delete sessions",
        "Deletes each session (transcript, then sidecar). Refuses a session in state running unless "
        "--force. Quarantine files are kept.",
        _rm, cmd_rm),
    "prune": Command(
        "delete sessions idle for a given time (TTL cleanup)",
        "Deletes every session with no activity (a message or metadata change: the newest change of its "
        "transcript and metadata) for --older-than HOURS, as the API's cleanup_stale does: each one under "
        "its lock after checking again, never a session in state running (listed as kept), and on a JSONL "
        "store also the orphan sidecars older than that and the lock files of sessions that no longer "
        "exist. With --dry-run only lists the sessions it would delete. Quarantine files are kept.",
        _prune, cmd_prune),
    "stats": Command(
        "totals for the store",
        "Sessions (by state), messages, bytes, torn tails, leftover temp files, orphan sidecars and "
        "quarantine files. Cheap: metadata, file stats and one byte per transcript; corrupt lines need "
        "a full read, which is `verify`.",
        _stats, cmd_stats),
    "index": Command(
        "build, check or drop the full-text index of search",
        "The optional full-text index that makes search instant on large stores: an SQLite FTS5 file "
        "(.search-index.sqlite3) in a JSONL store's directory, an FTS5 table in a SQLite store. build creates "
        "it or brings it up to date (--rebuild: from scratch), status prints what it holds and how many "
        "sessions changed since it saw them, drop deletes it. Searches use it while it exists and bring it "
        "up to date first; it is derived from the messages, so dropping it loses nothing, and a search "
        "returns the same hits with or without it. Searches whose terms are all shorter than three "
        "characters scan. Exit status 1 when the index is unusable (status) or could not be built.",
        _index, cmd_index),
    "migrate": Command(
        "copy a whole store between a JSONL directory and a SQLite file",
        "Copies every session of SRC into DST: messages as their exact stored lines (byte-identical), all "
        "metadata (name, alias, owner, state, context, breadcrumb, created time, fork lineage) and the "
        "last-activity time. Each session is all or nothing. A session DST already holds with the same "
        "content counts as copied, so running it again is safe; one DST holds with other content is an "
        "error unless --skip-existing (left as it is) or --overwrite (replaced). A directory is a JSONL "
        "store, a file (or a name ending in .db, .sqlite, .sqlite3) a SQLite store, a postgresql:// URL a "
        "PostgreSQL store; --from / --to override. A progress bar on stderr when it is a terminal. Exit "
        "status 1 when a session was not copied.",
        _migrate, cmd_migrate, at_root=False),
    "demo": Command(
        "a guided tour in a temporary store",
        "Builds a JSONL store in a new temporary directory (or --root DIR, a directory that must hold no sessions; a "
        "SQLite root is a usage error; "
        f"${ENV_ROOT} is not used), holds a short agent conversation, forks and reverts it, simulates a "
        "crash that tears a write and a corrupt line, shows recovery, verify and repair, and prints "
        "where the files are.",
        _demo, cmd_demo),
    "serve": Command(
        "browse the store in a web browser (read-only)",
        "A local web viewer of the store: the sessions by last activity (filter by name, agent, state), each "
        "transcript rendered (Markdown, tool calls with their results, compaction summaries, forks), paged as "
        "you scroll, new messages shown as they are written, and a search across sessions. Read-only: it only "
        "answers GET and HEAD and never writes to the store. Listens on 127.0.0.1 and prints an address with a "
        "token for this run; every request needs it. Needs the viewer extra: pip install 'jsonl-sessions[viewer]'.",
        _serve, cmd_serve),
}

#: The command names, in the order ``--help`` lists them.
COMMANDS = tuple(TABLE)
