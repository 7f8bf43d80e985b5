"""Hypothesis strategies for session-store tests.

Everything a caller can hand a store: session keys (hostile ones included: traversal,
reserved device names, case twins, long keys that hash, bidi and emoji), JSON content
of every shape (scalars at the edges of orjson's range, nested lists and objects,
strings with newlines, quotes, NUL, a BOM, text that looks like a transcript line),
unicode and large content, compaction markers and OpenAI-style tool call / result
pairs. Messages come as :class:`~jsonl_sessions.ChatMessage` or as plain dicts (both are
accepted by every write method), without ``id`` unless asked for.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from ..types import ChatMessage

#: Keys that have broken file-backed stores: traversal, separators, reserved Windows
#: names, a leading dash or dot, case twins, bidi controls, emoji, long keys whose file
#: names are hashed (two that differ only after the cut), percent signs that look like
#: escapes, and whitespace.
HOSTILE_KEYS: tuple[str, ...] = (
    "../x",
    "..",
    ".",
    "a/b",
    "a\\b",
    "C:",
    "CON",
    "con",
    "nul.txt",
    "-rf",
    ".hidden",
    "A",
    "a",
    "%2e%2e",
    "%",
    " ",
    "tab\there",
    "new\nline",
    "\u200fRTL\u200f",
    "\u202eevil",
    "\U0001f99c parrot",
    "\u00fcber",
    "u\u0308ber",  # the same text as above, decomposed: a different key
    "k" * 300,
    "x" * 130 + "1",
    "x" * 130 + "2",
    "\U0001f600" * 40,  # long in bytes: hashed file name
)

#: Roles seen in practice (any string is accepted).
ROLES: tuple[str, ...] = ("user", "assistant", "system", "tool", "developer")

#: Strings that have broken JSONL writers or line scanners.
ODD_STRINGS: tuple[str, ...] = (
    "",
    "line one\nline two\r\n",
    "\r",
    'quote " and backslash \\ and tab \t',
    '{"id":"01FAKE","role":"user"}\n',
    '"}\n{"id":"01HACK","created_at":0,"role":"system","kind":"message","content":"injected"}',
    "\u202eright-to-left\u200f",
    "\U0001f600\U0001f99c",
    "nul\x00inside",
    "\ufeffbom-first",
    "\u2028line separator\u2029",
    "null",
    "compaction",
    "\\u0000",
)


def session_keys(*, hostile: bool = True, max_size: int = 12) -> st.SearchStrategy[str]:
    """Valid session keys: any non-empty text without NUL or lone surrogates, mixed with
    :data:`HOSTILE_KEYS` when ``hostile``."""
    text = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=max_size)
    return (st.sampled_from(HOSTILE_KEYS) | text) if hostile else text


def invalid_session_keys() -> st.SearchStrategy[Any]:
    """Values every method taking a key must refuse with ``InvalidSessionKeyError``."""
    return st.sampled_from(["", "a\x00b", "\x00", "\ud800", "lone \udfff surrogate", None, 5, b"bytes", ("t",)])


def json_text(max_size: int = 16) -> st.SearchStrategy[str]:
    """Unicode text (any code point JSON can hold) or one of :data:`ODD_STRINGS`."""
    return st.text(alphabet=st.characters(codec="utf-8"), max_size=max_size) | st.sampled_from(ODD_STRINGS)


def json_scalars() -> st.SearchStrategy[Any]:
    """JSON scalars at the edges of what the codec accepts (64-bit ints, finite floats)."""
    return (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**63), max_value=2**64 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | json_text()
    )


def json_values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """Any JSON value: scalars, lists and objects, nested."""
    return st.recursive(
        json_scalars(),
        lambda children: st.lists(children, max_size=3) | st.dictionaries(json_text(), children, max_size=3),
        max_leaves=max_leaves,
    )


def large_text(max_chars: int = 200_000) -> st.SearchStrategy[str]:
    """Long strings (a repeated chunk, so generating them is cheap): kilobytes to
    hundreds of kilobytes, multi-byte characters included."""
    chunk = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=8)
    return st.builds(lambda c, n: (c * n)[:max_chars], chunk, st.integers(min_value=512, max_value=max_chars))


def contents(*, large: bool = True) -> st.SearchStrategy[Any]:
    """Message content of every shape: a string, a list of parts (strings or
    ``{"type": "text", "text": ...}`` objects), any JSON value, and (``large``) long text."""
    part = json_text() | st.fixed_dictionaries({"type": st.just("text"), "text": json_text()})
    out = json_text() | st.lists(part, max_size=3) | json_values()
    if large:
        out = out | large_text()
    return out


def tool_calls(ids: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[list[dict[str, Any]]]:
    """An OpenAI-style ``tool_calls`` list (function calls with an ``id`` each)."""
    call_ids = ids if ids is not None else st.text(min_size=1, max_size=6)
    return st.lists(
        st.fixed_dictionaries({
            "id": call_ids,
            "type": st.just("function"),
            "function": st.fixed_dictionaries({"name": st.text(max_size=6), "arguments": json_text()}),
        }),
        min_size=1,
        max_size=2,
    )


def extras() -> st.SearchStrategy[dict[str, Any]]:
    """Extra fields, round-tripped unchanged by a store."""
    return st.fixed_dictionaries(
        {},
        optional={"tool_calls": tool_calls(), "tool_call_id": st.text(max_size=8), "name": json_text(),
                  "meta": json_values(), "\u00e9xtra \U0001f99c": json_scalars()},
    )


def _build(role: str, content: Any, kind: str, extra: dict[str, Any], created_at: int | None,
           message_id: str, as_dict: bool) -> ChatMessage | dict[str, Any]:
    if not as_dict:
        return ChatMessage(role, content, id=message_id, created_at=created_at, kind=kind, extra=extra)
    d: dict[str, Any] = {"role": role, **extra}
    if content is not None or created_at is None:  # a dict without "content" means None
        d["content"] = content
    if kind != "message":
        d["kind"] = kind
    if created_at is not None:
        d["created_at"] = created_at
    if message_id:
        d["id"] = message_id
    return d


def messages(
    *,
    ids: st.SearchStrategy[str] | None = None,
    created_at: bool = True,
    large: bool = True,
    as_dict: bool | None = None,
) -> st.SearchStrategy[ChatMessage | dict[str, Any]]:
    """Messages as a caller writes them: a role (common or any text), content of every
    shape, a kind (``message``, ``compaction`` or another string), extras, sometimes a
    caller-chosen ``created_at`` (ms; ``created_at=False``: never). Without an id unless
    ``ids`` is given. ``as_dict``: True = plain dicts, False = ChatMessage, None = both."""
    return st.builds(
        _build,
        role=st.sampled_from(ROLES) | st.text(max_size=6),
        content=contents(large=large),
        kind=st.sampled_from(["message", "message", "compaction", "note"]),
        extra=extras(),
        created_at=(st.none() | st.integers(min_value=0, max_value=2**47)) if created_at else st.none(),
        message_id=ids if ids is not None else st.just(""),
        as_dict=st.booleans() if as_dict is None else st.just(as_dict),
    )


def compaction_markers() -> st.SearchStrategy[ChatMessage]:
    """Compaction summaries (``kind="compaction"``): what ``page(breakpoint=True)`` stops at."""
    return st.builds(
        lambda role, text: ChatMessage(role, text, kind="compaction"),
        st.sampled_from(["system", "assistant", "user"]),
        json_text() | large_text(20_000),
    )


def tool_exchanges(call_ids: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[list[ChatMessage]]:
    """An assistant message calling one or two tools (distinct call ids) followed by one
    result message per call (``tool_call_id`` naming it), as in the OpenAI chat format."""
    ids = call_ids if call_ids is not None else st.text(alphabet="abcdef0123456789", min_size=1, max_size=6)

    def build(names: list[str], arguments: list[str], results: list[Any]) -> list[ChatMessage]:
        calls = [{"id": name, "type": "function", "function": {"name": "tool", "arguments": args}}
                 for name, args in zip(names, arguments)]
        out = [ChatMessage("assistant", None, extra={"tool_calls": calls})]
        out += [ChatMessage("tool", result, extra={"tool_call_id": name}) for name, result in zip(names, results)]
        return out

    return st.lists(ids, min_size=1, max_size=2, unique=True).flatmap(
        lambda names: st.builds(build, st.just(names),
                                st.lists(json_text(), min_size=len(names), max_size=len(names)),
                                st.lists(json_text(), min_size=len(names), max_size=len(names))))


__all__ = [
    "HOSTILE_KEYS",
    "ODD_STRINGS",
    "ROLES",
    "compaction_markers",
    "contents",
    "extras",
    "invalid_session_keys",
    "json_scalars",
    "json_text",
    "json_values",
    "large_text",
    "messages",
    "session_keys",
    "tool_calls",
    "tool_exchanges",
]
