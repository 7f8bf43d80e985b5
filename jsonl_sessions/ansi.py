"""Terminal escape sequences in message text (tool output is full of them: test runners,
``git``, compilers colour their output): where they are, the text without them, and the
text as runs of one colour each, so every output can show tool output readably instead of
as ``\\x1b[31m`` noise.

- **Escape sequences** (:func:`spans`): CSI sequences (``ESC [`` or the 8-bit ``0x9b``,
  parameters, a final byte: colours, cursor moves, screen clears), string sequences (OSC,
  DCS, PM, APC: ``ESC ]`` ... up to BEL or ``ESC \\``: window titles, hyperlinks) when
  terminated, and the short two-byte escapes (``ESC 7``, ``ESC (B``...). A lone ``ESC``,
  an unfinished CSI or an unterminated string sequence is not one: it stays in the text
  (and every output makes it visible as ``\\x1b``).
- :func:`plain`: the text without them.
- :func:`line_breaks`: ``\\r\\n`` and a lone ``\\r`` as ``\\n``: Windows line ends, and
  the carriage returns of progress bars, are line breaks for a reader, not a ``\\x0d``.
- :func:`runs`: the text without them, cut into runs, each with the style the SGR
  sequences (``ESC [ ... m``) before it set: bold, dim, italic, underline, and the 16
  standard foreground and background colours, as class names (``ansi-bold``,
  ``ansi-fg-1``, ``ansi-bg-12``...). 256-colour and RGB colours are dropped (the text
  keeps its default colour); every other sequence is removed.

Nothing here writes HTML or prints: callers escape or clean each run's text. Cost: linear
in the text (the patterns cannot backtrack beyond the next escape character).
"""

from __future__ import annotations

import re

_ESCAPE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI: parameters, intermediates, final byte
    r"|(?:\x1b[\]P^_X]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"  # terminated strings
    # the short escapes (ESC 7, ESC (B, ESC M...); not ESC and a space (text), nor the opening
    # of a CSI or string sequence that never ended ([, ], P, X, ^, _): those stay visible
    r"|\x1b[!-/]*[0-OQ-WYZ\\`-~]"
)
_SGR = re.compile(r"(?:\x1b\[|\x9b)([0-9;:]*)m")

Span = tuple[int, int]
#: A run of text and its style: class names separated by spaces ("" for the default).
Run = tuple[str, str]


def spans(text: str) -> list[Span]:
    """The ``[start, end)`` character ranges of the escape sequences of ``text``, in order."""
    if "\x1b" not in text and not any(c in text for c in "\x90\x98\x9b\x9d\x9e\x9f"):
        return []
    return [m.span() for m in _ESCAPE.finditer(text)]


def line_breaks(text: str) -> str:
    """``text`` with each ``\\r\\n`` and each lone ``\\r`` made a ``\\n``."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def plain(text: str) -> str:
    """``text`` without its escape sequences."""
    return _ESCAPE.sub("", text) if spans(text) else text


class _Style:
    """The SGR state: what the next run of text looks like."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.bold = self.dim = self.italic = self.underline = False
        self.fg: int | None = None
        self.bg: int | None = None

    def apply(self, parameters: str) -> None:
        codes = [int(c) if c.isdigit() else 0 for c in re.split(r"[;:]", parameters)] if parameters else [0]
        i = 0
        while i < len(codes):
            code = codes[i]
            if code in (38, 48):  # extended colour: 5;N or 2;R;G;B, shown in the default colour
                if i + 1 < len(codes) and codes[i + 1] == 5:
                    index = codes[i + 2] if i + 2 < len(codes) else 0
                    colour = index if index < 16 else None
                    if code == 38:
                        self.fg = colour
                    else:
                        self.bg = colour
                    i += 3
                    continue
                if code == 38:
                    self.fg = None
                else:
                    self.bg = None
                i += 5 if i + 1 < len(codes) and codes[i + 1] == 2 else 2
                continue
            self._one(code)
            i += 1

    def _one(self, code: int) -> None:
        if code == 0:
            self.reset()
        elif code == 1:
            self.bold = True
        elif code == 2:
            self.dim = True
        elif code == 3:
            self.italic = True
        elif code == 4:
            self.underline = True
        elif code == 22:
            self.bold = self.dim = False
        elif code == 23:
            self.italic = False
        elif code == 24:
            self.underline = False
        elif 30 <= code <= 37:
            self.fg = code - 30
        elif code == 39:
            self.fg = None
        elif 40 <= code <= 47:
            self.bg = code - 40
        elif code == 49:
            self.bg = None
        elif 90 <= code <= 97:
            self.fg = code - 90 + 8
        elif 100 <= code <= 107:
            self.bg = code - 100 + 8

    def classes(self) -> str:
        names = [name for name, on in (("ansi-bold", self.bold), ("ansi-dim", self.dim),
                                       ("ansi-italic", self.italic), ("ansi-underline", self.underline)) if on]
        if self.fg is not None:
            names.append(f"ansi-fg-{self.fg}")
        if self.bg is not None:
            names.append(f"ansi-bg-{self.bg}")
        return " ".join(names)


def runs(text: str) -> list[Run]:
    """``text`` without its escape sequences, as runs of one style each (see the module
    docstring); adjacent runs of the same style are joined, empty ones left out."""
    found = spans(text)
    if not found:
        return [(text, "")] if text else []
    out: list[Run] = []
    style = _Style()
    at = 0

    def add(piece: str) -> None:
        if not piece:
            return
        classes = style.classes()
        if out and out[-1][1] == classes:
            out[-1] = (out[-1][0] + piece, classes)
        else:
            out.append((piece, classes))

    for start, end in found:
        add(text[at:start])
        sgr = _SGR.fullmatch(text, start, end)
        if sgr is not None:
            style.apply(sgr.group(1))
        at = end
    add(text[at:])
    return out


__all__ = ["Run", "Span", "line_breaks", "plain", "runs", "spans"]
