"""The viewer's guard, applied to every request before any route runs.

- **Methods:** GET and HEAD only; anything else is 405 (the viewer changes nothing).
- **Host allow-list** (against DNS rebinding): the ``Host`` header must be one of the
  names the server was started for with its port (``127.0.0.1:PORT``, ``localhost:PORT``,
  ``[::1]:PORT``, and the ``--host`` given); anything else is 403.
- **Origin:** a request that carries ``Origin`` must come from one of those same
  addresses (``http://HOST:PORT``); anything else (another site's script) is 403.
- **Token:** a random per-run token (:func:`secrets.token_urlsafe`, 32 bytes) is in the URL
  printed at start (``/?token=...``). The first request with it gets the token in an
  ``HttpOnly; SameSite=Strict`` cookie and a redirect to the same address without the
  token, so it stays out of history, logs and ``Referer``. Every request must then carry
  that cookie (or the ``token`` parameter); compared with :func:`hmac.compare_digest`.
  Anything else is 403 with a page saying to open the printed URL.
- **Headers on every response:** :data:`CSP` (no inline script or style, nothing loaded from
  anywhere but the viewer itself), ``X-Content-Type-Options: nosniff``,
  ``Referrer-Policy: no-referrer``, ``X-Frame-Options: DENY``, ``Cache-Control: no-store``
  and ``Cross-Origin-Resource-Policy: same-origin``.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl, urlencode

#: The Content-Security-Policy of every response.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")

#: The security headers of every response.
HEADERS: tuple[tuple[str, str], ...] = (
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Cache-Control", "no-store"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
)

#: The methods the viewer answers.
METHODS = ("GET", "HEAD")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def new_token() -> str:
    """A fresh per-run token: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Refusal:
    """A request refused before any route: its status, a reason, extra headers."""

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Verdict:
    """What the guard decided: ``refusal`` (answer with it), or ``redirect`` (the token was
    just exchanged for the cookie: answer 303 to that address with ``set_cookie``), or
    neither (serve the request)."""

    refusal: Refusal | None = None
    redirect: str | None = None
    set_cookie: str | None = None


@dataclass
class Guard:
    """The checks of one running server: its ``token``, its ``port`` and the host names it
    answers to (``hosts``: the loopback names plus the bind address)."""

    token: str
    port: int
    hosts: tuple[str, ...] = LOOPBACK_NAMES
    _allowed_hosts: frozenset[str] = field(init=False)
    _allowed_origins: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        names = {h.lower() for h in self.hosts}
        self._allowed_hosts = frozenset(f"{h}:{self.port}" for h in names)
        self._allowed_origins = frozenset(f"http://{h}:{self.port}" for h in names)

    @property
    def cookie_name(self) -> str:
        # one cookie per port: cookies ignore ports, so two viewers on localhost keep theirs apart
        return f"jsonl_sessions_token_{self.port}"

    def check(self, method: str, path: str, query: str, headers: Mapping[str, str]) -> Verdict:
        """The verdict on one request (``headers``: names lowercased)."""
        host = headers.get("host", "").lower()
        if host not in self._allowed_hosts:
            return Verdict(Refusal(403, "this server only answers to " + ", ".join(sorted(self._allowed_hosts))))
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in self._allowed_origins:
            return Verdict(Refusal(403, "cross-origin requests are refused"))
        if method not in METHODS:
            return Verdict(Refusal(405, "the viewer is read-only: GET and HEAD only",
                                   (("Allow", ", ".join(METHODS)),)))
        params = parse_qsl(query, keep_blank_values=True)
        given = [value for name, value in params if name == "token"]
        if given:
            if not self._matches(given[-1]):
                return Verdict(Refusal(403, "wrong token: open the address jsonl-sessions serve printed"))
            rest = urlencode([(name, value) for name, value in params if name != "token"])
            cookie = (f"{self.cookie_name}={self.token}; HttpOnly; SameSite=Strict; Path=/")
            return Verdict(redirect=path + (f"?{rest}" if rest else ""), set_cookie=cookie)
        if not self._matches(self._cookie(headers.get("cookie", ""))):
            return Verdict(Refusal(403, "no valid token: open the address jsonl-sessions serve printed"))
        return Verdict()

    def _cookie(self, header: str) -> str:
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(header)
        except CookieError:
            return ""
        morsel = jar.get(self.cookie_name)
        return morsel.value if morsel is not None else ""

    def _matches(self, candidate: str) -> bool:
        return hmac.compare_digest(candidate.encode("utf-8", "surrogateescape"), self.token.encode("ascii"))


__all__ = ["CSP", "HEADERS", "METHODS", "Guard", "Refusal", "Verdict", "new_token"]
