"""What a backend says about a stored message that does not parse, on every backend that
can be damaged (the in-memory store cannot hold one): the strict read's error names the
repair and gives the file's (or export's) line number only, never the JSON parser's own
"line 1 column N" of the one line it was given; the lenient reads' warning gives the line
and the byte offset; and ``verify`` counts the messages as ``get_message_count`` does."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from stores import Backend

from jsonl_sessions import CorruptTranscriptError

BAD = b'{"role": garbage, "content": "x"}\n'


def _damaged(store: Any, backend: Backend) -> tuple[Any, int]:
    """Session "k": two messages, then a line that does not parse (line 3); the byte offset
    of the bad line."""
    damage = backend.damage(store)
    if damage is None:
        pytest.skip("the backend does not offer the `damage` capability")
    store.append_many("k", [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}])
    offset = len(damage.raw("k"))
    damage.append_raw("k", BAD)
    return damage, offset


def test_the_strict_read_error_names_the_repair_and_one_line_number(store: Any, backend: Backend) -> None:
    _, offset = _damaged(store, backend)
    with pytest.raises(CorruptTranscriptError) as info:
        store.try_load("k")
    error = info.value
    assert (error.line, error.offset) == (3, offset)
    text = str(error)
    assert f"line 3, byte offset {offset}" in text
    assert "line 1" not in text and "char " not in text, text  # not the parser's position in the one line
    assert "column 10" in text  # where in the line: "garbage" starts at its 10th character
    assert "jsonl-sessions repair k" in text and "compact(key, repair=True)" in text


@pytest.mark.parametrize("read", ["load", "page", "get_messages"])
def test_lenient_reads_warn_with_the_line_and_the_offset(store: Any, backend: Backend, read: str,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    _, offset = _damaged(store, backend)
    with caplog.at_level(logging.WARNING, logger="jsonl_sessions"):
        got = getattr(store, read)("k")
    messages = got.messages if read == "page" else got
    assert [m.content for m in messages] == ["one", "two"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"line 3, byte offset {offset}" in warnings[0], warnings


def test_verify_counts_the_messages_get_message_count_counts(store: Any, backend: Backend) -> None:
    _damaged(store, backend)
    report = store.verify()
    assert [f.kind for f in report.problems] == [{"jsonl": "corrupt-line"}.get(report.backend, "corrupt-row")]
    assert report.messages == store.get_message_count("k") == 3


def test_the_bounded_strict_check_raises_what_try_load_raises(store: Any, backend: Backend,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``export``'s check before it streams (``_check_strict``) reads a block of lines or a
    batch of rows at a time: a damaged line several batches in gives try_load's error."""
    from jsonl_sessions.dbfront import DatabaseFront
    from jsonl_sessions.jsonl import transcript

    monkeypatch.setattr(DatabaseFront, "_CHECK_ROWS", 3)
    monkeypatch.setattr(transcript, "CHUNK_BYTES", 256)
    store.append_many("k", [{"role": "user", "content": f"message {i}"} for i in range(10)])
    assert store._check_strict("k") == 10 and store._check_strict("missing") == 0
    damage = backend.damage(store)
    if damage is None:
        return
    offset = len(damage.raw("k"))
    damage.append_raw("k", BAD)
    store.append_many("k", [{"role": "user", "content": "after"}])
    with pytest.raises(CorruptTranscriptError) as loaded:
        store.try_load("k")
    with pytest.raises(CorruptTranscriptError) as checked:
        store._check_strict("k")
    assert str(checked.value) == str(loaded.value)
    assert (checked.value.line, checked.value.offset) == (loaded.value.line, loaded.value.offset) == (11, offset)
