"""Taking one field out of a JSON object and putting it back where it was.

A foreign record keeps its text in one field (``content``) that a transcript line holds
in its own ``content`` (where ``search`` looks); the rest of the record goes into an
extra field, with the position of the one taken out, so the record can be rebuilt
equal to the original, key order included. O(fields).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["join_field", "split_field"]


def split_field(record: Mapping[str, Any], name: str) -> tuple[Any, dict[str, Any], int | None]:
    """``(record[name] or None, the other fields in order, the position of name or None)``."""
    value: Any = None
    position: int | None = None
    rest: dict[str, Any] = {}
    for at, (field, item) in enumerate(record.items()):
        if field == name:
            value, position = item, at
        else:
            rest[field] = item
    return value, rest, position


def join_field(rest: Mapping[str, Any], name: str, value: Any, position: object) -> dict[str, Any]:
    """The record :func:`split_field` split (``rest`` alone when ``position`` is not an int)."""
    if type(position) is not int:
        return dict(rest)
    record: dict[str, Any] = {}
    for at, (field, item) in enumerate(rest.items()):
        if at == position:
            record[name] = value
        record[field] = item
    if position >= len(rest):
        record[name] = value
    return record
