"""Terminal escape sequences in message text (``jsonl_sessions.ansi``) and the search
snippet's pieces built on them (``matcher.pieces``): text interleaved with escape
sequences loses exactly the sequences, and nothing else, whatever the text."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from jsonl_sessions import ansi, matcher

#: Text with no escape character (ESC, or a C1 control that opens a sequence).
plain = st.text(st.characters(blacklist_characters="\x1b\x90\x98\x9b\x9d\x9e\x9f", blacklist_categories=("Cs",)),
                max_size=20)
csi = st.builds(lambda intro, params, final: f"{intro}{params}{final}", st.sampled_from(["\x1b[", "\x9b"]),
                st.from_regex(r"[0-9;:?]{0,8}", fullmatch=True), st.sampled_from("mHJKABCDGfhlsu@~"))
osc = st.builds(lambda payload, end: f"\x1b]{payload}{end}",
                st.text(st.characters(blacklist_characters="\x07\x1b\x9c", blacklist_categories=("Cs",)), max_size=12),
                st.sampled_from(["\x07", "\x1b\\"]))
short = st.sampled_from(["\x1b7", "\x1b8", "\x1b(B", "\x1bM", "\x1b=", "\x1b>"])
escape = st.one_of(csi, osc, short)


@st.composite
def coloured(draw: st.DrawFn) -> tuple[str, str]:
    """(text with escape sequences, the same text without them)."""
    pieces = draw(st.lists(st.tuples(plain, st.one_of(st.none(), escape)), max_size=8))
    with_escapes = "".join(text + (esc or "") for text, esc in pieces)
    return with_escapes, "".join(text for text, _ in pieces)


@given(coloured())
def test_strip_and_runs_take_out_exactly_the_escape_sequences(case: tuple[str, str]) -> None:
    text, expected = case
    assert ansi.plain(text) == expected
    runs = ansi.runs(text)
    assert "".join(piece for piece, _ in runs) == expected
    assert all(piece for piece, _ in runs) and all(a[1] != b[1] for a, b in itertools.pairwise(runs))


@given(coloured(), st.lists(st.text(min_size=1, max_size=3), max_size=3))
def test_snippet_pieces_are_the_text_without_its_escape_sequences(case: tuple[str, str], words: list[str]) -> None:
    text, expected = case
    terms = matcher.parse(" ".join(f'"{w}"' for w in words if '"' not in w))
    pieces = matcher.pieces(text, matcher.spans(terms, text))
    assert "".join(piece for piece, _ in pieces) == expected
    assert all(piece for piece, _ in pieces)


def test_sgr_sequences_become_classes() -> None:
    text = "\x1b[1;31mE fail\x1b[0m ok \x1b[32mpass\x1b[39m \x1b[38;5;196mx\x1b[0m \x1b[92;44mB\x1b[m"
    assert ansi.runs(text) == [("E fail", "ansi-bold ansi-fg-1"), (" ok ", ""), ("pass", "ansi-fg-2"),
                               (" x ", ""), ("B", "ansi-fg-10 ansi-bg-4")]


def test_a_lone_or_unterminated_escape_stays_in_the_text() -> None:
    for text in ("a lone \x1b and text", "\x1b]0;a title that never ends", "ends with \x1b"):
        assert ansi.plain(text) == text
    assert ansi.plain("\x1b]0;title\x07after") == "after"


def test_carriage_returns_are_line_breaks() -> None:
    assert ansi.line_breaks("a\r\nb\rc\n\r\nd") == "a\nb\nc\n\nd"
    assert ansi.line_breaks("no return\n") == "no return\n"
