"""What ``jsonl-sessions`` tells its caller: exit statuses, the failures that become one
line on stderr, and every rendering (messages, session tables, sizes, times, JSON).

Commands raise :class:`UsageError` (exit status 2), :class:`CliError` or the store's
errors (1); :func:`jsonl_sessions.cli.main` turns each into one line on stderr.

Everything printed for people goes through :func:`~jsonl_sessions.display.clean`, which
makes control characters visible (``\\x1b`` and friends), so a message holding terminal
escape sequences cannot repaint or hijack the terminal that shows it. Message text
(``show``, ``tail``, search snippets) first loses its whole escape sequences
(:func:`jsonl_sessions.ansi.plain`: the colours of tool output), so it reads as the tool
printed it; a lone escape still shows. ``show`` and ``tail`` read a message as the viewer
does (:mod:`jsonl_sessions.display`: tool calls and results in the OpenAI format or as
Anthropic content blocks) and break lines at carriage returns (``\\r\\n`` or alone).
Machine outputs (``--json``, ``--nl``, ``--jsonl``, ``export``) are JSON, written by orjson.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

import orjson

from .. import display
from ..display import clean
from ..types import ChatMessage, SessionMetadata

PROG = "jsonl-sessions"
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A usage error (exit status 2)."""


class CliError(Exception):
    """A failure to report as one line (exit status 1)."""


INDENT = "    "


def short(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` characters with ``...``."""
    text = clean(text, one_line=True)
    return text if len(text) <= width else text[: max(width - 3, 1)] + "..."


def size(n: int) -> str:
    """Bytes for people: ``812 B``, ``4.2 KiB``, ``1.3 MiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def when(value: datetime | int | None) -> str:
    """Local time ``YYYY-MM-DD HH:MM:SS`` of a datetime or of milliseconds since the epoch."""
    if value is None:
        return "-"
    if isinstance(value, int):
        try:
            value = datetime.fromtimestamp(value / 1000, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return f"{value} ms"
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def iso(value: datetime | None) -> str | None:
    """UTC RFC 3339 with milliseconds and ``Z`` (``2026-01-02T13:45:10.123Z``): the one
    format of every time a command prints in ``--json`` output (a message's own
    ``created_at`` stays the integer of its transcript line)."""
    if value is None:
        return None
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def terminal_width(default: int = 100) -> int:
    return max(shutil.get_terminal_size((default, 24)).columns, 40)


# -- messages ---------------------------------------------------------------------------
def message_header(m: ChatMessage) -> str:
    parts = [clean(m.role, one_line=True)]
    name = m.extra.get("name")
    if isinstance(name, str):
        parts[0] += f" ({short(name, 40)})"
    if m.kind != "message":
        parts.append(f"[{short(m.kind, 30)}]")
    parts.append(when(display.said_at(m)))
    parts.append(clean(m.id, one_line=True) or "(no id)")
    call = m.extra.get("tool_call_id")
    if isinstance(call, str):
        parts.append(f"result of {short(call, 60)}")
    return "  ".join(parts)


def _texts(m: ChatMessage) -> list[str]:
    """The readable pieces of a message, by the model every output shares
    (:func:`jsonl_sessions.display.view`): text parts as they are, structured parts as
    ``[type] {compact JSON}``, each tool call (an OpenAI ``tool_calls`` entry or an
    Anthropic ``tool_use`` block) as ``-> name(arguments)  [id]``, and each Anthropic
    ``tool_result`` block as ``<- result of ID`` followed by its output. Control
    characters are already made visible, escape sequences taken out."""
    shown = display.view(m, cut=False, compact=True)
    out = [f"[{p.label}] {p.text}" if p.kind == "json" else p.text for p in shown.parts]
    for call in shown.tool_calls:
        out.append(f"-> {call.name}({call.arguments})" + (f"  [{call.id}]" if call.id else ""))
    for result in shown.results:
        out.append(f"<- result of {result.result_for}")
        out.extend(f"[{p.label}] {p.text}" if p.kind == "json" else p.text for p in result.parts)
    return out


def render_message(m: ChatMessage, width: int) -> str:
    """A message for people: a header line (role, kind, local time, id, tool-call link),
    then the text indented and wrapped to ``width`` columns (0: no wrapping)."""
    lines = [message_header(m)]
    body: list[str] = []
    for text in _texts(m):
        for raw in text.split("\n"):
            if width and len(raw) + len(INDENT) > width:
                body.extend(textwrap.wrap(raw, width, initial_indent=INDENT, subsequent_indent=INDENT,
                                          break_on_hyphens=False, drop_whitespace=True) or [INDENT])
            else:
                body.append((INDENT + raw).rstrip())
    lines.extend(body or [INDENT + "(no content)"])
    return "\n".join(lines)


def message_json(m: ChatMessage) -> bytes:
    """One message as one JSON line (without newline), fields in transcript-line order."""
    return orjson.dumps(m.to_dict())


# -- session tables ---------------------------------------------------------------------
COLUMNS = ("KEY", "NAME", "MESSAGES", "SIZE", "LAST ACTIVITY", "STATE")


def metadata_row(md: SessionMetadata) -> list[str]:
    state = md.state or "-"
    if md.state == "running" and md.turn_id:
        state += f" ({short(md.turn_id, 20)})"
    return [short(md.key, 60), short(md.name, 30) if md.name else "-", str(md.message_count),
            size(md.size_bytes), when(md.updated_at), state]


def table(header: Sequence[str], rows: Iterable[Sequence[str]], numeric: Iterable[int] = ()) -> list[str]:
    """Rows as aligned text columns (two spaces apart; ``numeric`` columns right-aligned)."""
    rows = [list(r) for r in rows]
    widths = [max([len(header[i]), *(len(r[i]) for r in rows)]) for i in range(len(header))]
    right = set(numeric)

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(header), *(line(r) for r in rows)]


def metadata_json(md: SessionMetadata) -> dict[str, Any]:
    """A session's metadata as a JSON object (times as UTC ISO-8601 strings)."""
    return {
        "key": md.key,
        "name": md.name,
        "agent_alias": md.agent_alias,
        "principal_id": md.principal_id,
        "state": md.state,
        "turn_id": md.turn_id,
        "created_at": iso(md.created_at),
        "updated_at": iso(md.updated_at),
        "message_count": md.message_count,
        "size_bytes": md.size_bytes,
        "trim_breadcrumb": md.trim_breadcrumb,
        "context": md.context,
        "parent": md.parent,
        "fork_point": md.fork_point,
    }


# -- writing to stdout and stderr -----------------------------------------------------------
def out(text: str = "") -> None:
    """One line on stdout."""
    sys.stdout.write(text + "\n")


def err(text: str) -> None:
    """One line on stderr, ``jsonl-sessions: text``, control characters made visible."""
    sys.stderr.write(f"{PROG}: {clean(text, one_line=True)}\n")


def json_out(value: Any) -> None:
    """``value`` as indented JSON on stdout."""
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE).decode("utf-8"))


def nl_out(values: Iterable[Any]) -> None:
    """Each value as one line of JSON on stdout."""
    for value in values:
        sys.stdout.write(orjson.dumps(value, option=orjson.OPT_APPEND_NEWLINE).decode("utf-8"))


class Printer:
    """Prints messages readable (header + wrapped text, a blank line between) or as raw
    JSON lines; flushes after each batch when following."""

    def __init__(self, raw: bool, width: int | None, flush: bool = False) -> None:
        self.raw = raw
        self.width = terminal_width() if width is None else width
        self.flush = flush
        self.count = 0

    def __call__(self, messages: Iterable[ChatMessage]) -> None:
        for m in messages:
            if self.raw:
                sys.stdout.write(message_json(m).decode("utf-8") + "\n")
            else:
                sys.stdout.write(("\n" if self.count else "") + render_message(m, self.width) + "\n")
            self.count += 1
        if self.flush:
            sys.stdout.flush()


def sessions_out(args: argparse.Namespace, sessions: list[SessionMetadata], empty: str) -> None:
    """A list of sessions as ``--json``, ``--nl`` or a table; ``empty`` on stderr when none."""
    if args.json:
        json_out([metadata_json(md) for md in sessions])
    elif args.nl:
        nl_out(metadata_json(md) for md in sessions)
    elif not sessions:
        err(empty)
    else:
        for line in table(COLUMNS, [metadata_row(md) for md in sessions], numeric=(2, 3)):
            out(line)
