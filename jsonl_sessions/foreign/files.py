"""Reading another tool's JSONL file tolerantly, and writing one atomically.

Other tools' session files are read as their own readers read them: a UTF-8 byte order
mark is ignored, blank lines are skipped, ``\\r\\n`` line ends are accepted, a last line
without its newline is kept when it parses and otherwise counted as torn (the tool was
killed in the middle of writing it), and a complete line that is not a JSON object is
skipped and counted rather than failing the whole file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..codec import encode_record
from ..jsonl._atomic import atomic_write

__all__ = ["JsonlRead", "parse_jsonl", "read_json_object", "read_jsonl", "write_jsonl"]

BOM = b"\xef\xbb\xbf"


@dataclass
class JsonlRead:
    """What :func:`read_jsonl` found: the objects in file order, the 1-based numbers of
    complete lines that are not JSON objects, and whether the last line was torn."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: list[int] = field(default_factory=list)
    torn: bool = False


def read_jsonl(path: str | os.PathLike[str]) -> JsonlRead:
    """Every JSON object of the file at ``path`` (see the module docstring). Raises
    OSError when the file cannot be read. O(file)."""
    with open(path, "rb") as f:
        data = f.read()
    return parse_jsonl(data)


def read_json_object(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The JSON object in the file at ``path`` (a BOM skipped); None when the file holds
    anything else. FileNotFoundError (an OSError) when it is missing."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        obj = orjson.loads(data.removeprefix(BOM))
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def parse_jsonl(data: bytes) -> JsonlRead:
    """:func:`read_jsonl` of bytes already read."""
    found = JsonlRead()
    lines = data.removeprefix(BOM).split(b"\n")
    last = len(lines) - 1
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            found.objects.append(obj)
        elif number - 1 == last:
            found.torn = True  # no newline after it: an unfinished write, not corruption
        else:
            found.bad_lines.append(number)
    return found


def write_jsonl(path: str | os.PathLike[str], objects: Iterable[Mapping[str, Any]], *, durable: bool = True) -> int:
    """Replace (or create) the file at ``path`` with one JSON object per line, all or
    nothing: a temp file next to it, fsynced, renamed over it, the directory fsynced
    (when ``durable``). Raises :class:`SerializationError` for an object that is not
    JSON, with the file untouched. Returns the byte count."""
    lines = [encode_record(dict(obj)) for obj in objects]  # every line checked before the file is touched
    target = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(target)
    tmp = os.path.join(directory, "." + os.path.basename(target) + ".tmp")
    return atomic_write(target, tmp, lines, durable=durable, directory=directory)
