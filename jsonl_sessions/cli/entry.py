"""The entry point of the ``jsonl-sessions`` command (also ``python -m jsonl_sessions``): look inside a store.

Commands (:data:`jsonl_sessions.cli.COMMANDS`): ``ls``, ``show``, ``tail``, ``search``, ``verify``,
``repair``, ``export``, ``import``, ``rm``, ``stats``, ``demo``. The store directory is
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
import shlex
import sys
from collections.abc import Sequence

from ..errors import CorruptTranscriptError, InvalidSessionKeyError, LockTimeoutError, SessionStoreError
from .common import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, LOGGER, PROG, CliError, UsageError, err
from .parser import build_parser


class _WarningsToStderr(logging.Handler):
    """Library warnings as one ``jsonl-sessions: warning: ...`` line each, each once (a
    following ``tail -f`` would otherwise repeat the same one every poll)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text not in self.seen:
            self.seen.add(text)
            err(f"warning: {text}")


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
    except CorruptTranscriptError as exc:
        err(f"error: {exc}; `{PROG} repair {shlex.quote(exc.key or '')}` sets corrupt lines aside")
        return EXIT_FAILURE
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
