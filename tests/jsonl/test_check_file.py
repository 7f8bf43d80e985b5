"""``transcript.check_file``, the strict check ``export`` runs before it streams: on any
transcript and any block size it raises exactly what the strict whole-file parse
(``parse_file(strict=True)``) raises, or returns its number of messages, while holding one
block of messages at a time."""

from __future__ import annotations

import os
import tempfile

import orjson
from hypothesis import given
from hypothesis import strategies as st

from jsonl_sessions import CorruptTranscriptError
from jsonl_sessions.jsonl.transcript import check_file, parse_file


def _line(ident: str) -> bytes:
    return orjson.dumps({"id": ident, "role": "user", "content": "x" * 20} if ident else
                        {"role": "user", "content": "no id"}) + b"\n"


@st.composite
def transcripts(draw: st.DrawFn) -> list[bytes]:
    """Lines with increasing ULIDs, most of them with one damage: two lines swapped, an id
    repeated, a corrupt line, legacy ids (not ULIDs, in any order), a line without an id."""
    numbers = draw(st.lists(st.integers(1, 10**6), unique=True, max_size=25).map(sorted))
    ids = [f"01J{n:023d}" for n in numbers]
    damage = draw(st.sampled_from(["none", "swap", "repeat", "corrupt", "legacy", "no id"]))
    if ids and damage != "none":
        at = draw(st.integers(0, len(ids) - 1))
        other = draw(st.integers(0, len(ids) - 1))
        if damage == "swap":
            ids[at], ids[other] = ids[other], ids[at]
        elif damage == "repeat":
            ids.insert(at, ids[other])
        elif damage == "legacy":
            ids[at:at] = ["legacy-b", "legacy-a"]
        elif damage == "no id":
            ids[at] = ""
    lines = [_line(i) for i in ids]
    if damage == "corrupt":
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from([b"not json\n", b'{"role": 5}\n'])))
    return lines


def _outcome(call: object) -> tuple[str, object]:
    try:
        got = call()  # type: ignore[operator]
    except CorruptTranscriptError as exc:
        return "raised", (str(exc), exc.line, exc.offset)
    return "ok", got


@given(transcripts(), st.sampled_from([1, 40, 100, 1 << 20]), st.booleans())
def test_check_file_raises_what_the_strict_parse_raises(lines: list[bytes], block: int, bom: bool) -> None:
    data = (b"\xef\xbb\xbf" if bom else b"") + b"".join(lines) + b'{"torn'
    fd, path = tempfile.mkstemp(suffix=".jsonl")
    try:
        os.write(fd, data)
        size = len(data)
        expected = _outcome(lambda: len(parse_file(fd, size, strict=True, key="k", path=path).messages))
        assert _outcome(lambda: check_file(fd, size, key="k", path=path, block=block)) == expected
    finally:
        os.close(fd)
        os.unlink(path)
