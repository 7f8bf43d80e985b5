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

#: ids in order, a repeat, legacy ids that are not ULIDs, a line without one
IDS = st.sampled_from(["01J00000000000000000000001", "01J00000000000000000000002", "01J00000000000000000000003",
                       "legacy-b", "legacy-a", ""])
GOOD = IDS.map(lambda i: orjson.dumps({"id": i, "role": "user", "content": "x" * 20} if i else
                                      {"role": "user", "content": "no id"}) + b"\n")
LINE = st.one_of(GOOD, GOOD, GOOD, st.just(b"not json\n"), st.just(b'{"role": 5}\n'))


def _outcome(call: object) -> tuple[str, object]:
    try:
        got = call()  # type: ignore[operator]
    except CorruptTranscriptError as exc:
        return "raised", (str(exc), exc.line, exc.offset)
    return "ok", got


@given(st.lists(LINE, max_size=30), st.sampled_from([1, 40, 100, 1 << 20]), st.booleans())
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
