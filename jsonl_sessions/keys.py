"""Session keys <-> safe, reversible file-name stems.

A key is any non-empty string without NUL (and without lone surrogates, which have no
UTF-8 form). Its stem is a percent-style escape of the key's UTF-8 bytes (docs/format.md,
"Files of a session", gives the exact encoding). What that guarantees: a stem never
leaves ``root`` (no separator, no dot, so no traversal and no hidden file), never
collides with another key's on a case-insensitive file system, is never a reserved
Windows device name, never starts with ``-``, and is at most :data:`MAX_STEM`
characters. A longer key gets a *hashed* stem, which is not reversible by itself: the
key is then read back from the session's sidecar, which the store writes before the
transcript.
"""

from __future__ import annotations

from .errors import InvalidSessionKeyError

MAX_STEM = 120
_HASH_HEX = 32
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")
_RESERVED = frozenset(
    ["con", "prn", "aux", "nul", "conin", "conout", "clock"]
    + [f"com{i}" for i in range(10)]
    + [f"lpt{i}" for i in range(10)]
)
_ESCAPES = {b: f"%{b:02x}" for b in range(256)}


def validate_key(key: object) -> str:
    """Return ``key`` if it is a usable session key, else raise :class:`InvalidSessionKeyError`."""
    if not isinstance(key, str):
        raise InvalidSessionKeyError(f"session key must be a str, not {type(key).__name__}", key=key)
    if not key:
        raise InvalidSessionKeyError("session key must not be empty", key=key)
    if "\x00" in key:
        raise InvalidSessionKeyError("session key must not contain NUL", key=key)
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidSessionKeyError("session key must be valid Unicode (no lone surrogates)", key=key) from None
    return key


def _escape_all(text: str) -> str:
    return "".join(_ESCAPES[b] for b in text.encode("utf-8"))


def key_to_stem(key: str) -> str:
    """The file-name stem of a session key. Raises :class:`InvalidSessionKeyError`."""
    validate_key(key)
    parts = []
    for ch in key:
        parts.append(ch if ch in _SAFE else _escape_all(ch))
    stem = "".join(parts)
    if stem in _RESERVED:
        stem = _escape_all(stem[0]) + stem[1:]
    elif stem.startswith("-"):
        stem = "%2d" + stem[1:]
    if len(stem) > MAX_STEM:
        head = stem[: MAX_STEM - _HASH_HEX - 1]
        cut = head.rfind("%", len(head) - 2)
        if cut != -1:  # never split an escape
            head = head[:cut]
        import hashlib  # only long keys need it: imported here, off the package's import path

        stem = head + "~" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:_HASH_HEX]
    return stem


def is_hashed(stem: str) -> bool:
    """True for a stem of a long key, which is reversed through the sidecar."""
    return "~" in stem


def stem_to_key(stem: str) -> str | None:
    """The key of a stem made by :func:`key_to_stem`; None for a hashed stem or a name
    that is not a canonical stem (a file the store did not make)."""
    if is_hashed(stem) or not stem:
        return None
    if len(stem) <= MAX_STEM and _SAFE.issuperset(stem) and stem not in _RESERVED and stem[0] != "-":
        return stem  # nothing escaped: the stem is its own key (the common case, checked in C)
    out = bytearray()
    i = 0
    n = len(stem)
    while i < n:
        ch = stem[i]
        if ch == "%":
            try:
                out.append(int(stem[i + 1 : i + 3], 16))
            except ValueError:
                return None
            i += 3
        elif ch in _SAFE:
            out.append(ord(ch))
            i += 1
        else:
            return None
    try:
        key = out.decode("utf-8")
    except UnicodeDecodeError:
        return None
    try:
        return key if key_to_stem(key) == stem else None
    except InvalidSessionKeyError:
        return None


def hashed_stem_matches(stem: str, key: str) -> bool:
    """True when ``key`` (read from a sidecar) is the key of hashed ``stem``."""
    try:
        return key_to_stem(key) == stem
    except InvalidSessionKeyError:
        return False
