"""The viewer's HTTP server: the standard library's threaded server (one thread per
request; the store's calls are blocking, so a thread each is what they need), the
:class:`~jsonl_sessions.viewer.security.Guard` in front of every request, the
:class:`~jsonl_sessions.viewer.app.Viewer` behind it.

A local viewer for one person needs no more: requests are few, pages are a few hundred
KB at most, and the live tail is polling (one small request a second per open session).
"""

from __future__ import annotations

import http.server
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .app import REASONS, Response, Viewer
from .security import HEADERS, METHODS, Guard, Refusal, new_token

_log = logging.getLogger("jsonl_sessions")

#: The longest request line and header the server reads (anything longer is refused).
MAX_URL = 16_384


class ViewerServer(http.server.ThreadingHTTPServer):
    """The server of one :class:`Viewer` at ``host:port`` (port 0: a free one), with a new
    token. ``url``: the address to open (it holds the token)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, viewer: Viewer, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), _Handler)
        self.viewer = viewer
        self.token = token or new_token()
        bound = self.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        names = tuple({"127.0.0.1", "localhost", "[::1]", shown.lower()})
        self.guard = Guard(self.token, int(bound), names)
        self.url = f"http://{shown}:{bound}/?token={self.token}"

    def start(self) -> threading.Thread:
        """Serve in a daemon thread (for tests and benchmarks); stop with :meth:`stop`."""
        thread = threading.Thread(target=self.serve_forever, name="jsonl-sessions-viewer", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: ViewerServer
    protocol_version = "HTTP/1.1"
    # headers and body are two writes: without TCP_NODELAY, Nagle's algorithm and the
    # client's delayed ACK hold the body back ~40 ms on a kept-alive connection
    disable_nagle_algorithm = True

    def version_string(self) -> str:
        return "jsonl-sessions"  # no Python version for whoever asks

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: no request log on the terminal (addresses may hold session keys)

    def _serve(self) -> None:
        if len(self.path) > MAX_URL:
            self._send(Response(414, b"address too long\n", "text/plain; charset=utf-8"), head=False)
            return
        head = self.command == "HEAD"
        if self.command not in METHODS:
            self.close_connection = True  # a body it carries is never read: the connection cannot be reused
        parts = urlsplit(self.path)
        headers = {name.lower(): value for name, value in self.headers.items()}
        verdict = self.server.guard.check(self.command, parts.path, parts.query, headers)
        if verdict.refusal is not None:
            self._send(_refusal(verdict.refusal), head=head)
            return
        if verdict.redirect is not None:
            assert verdict.set_cookie is not None
            self._send(Response(303, b"", "text/plain; charset=utf-8",
                                [("Location", verdict.redirect), ("Set-Cookie", verdict.set_cookie)]), head=head)
            return
        params = parse_qs(parts.query, keep_blank_values=True)
        try:
            response = self.server.viewer.handle(parts.path, params)
        except Exception:  # noqa: BLE001 - one bad request must not end the server; the page says so
            _log.exception("the viewer failed on %s", parts.path)  # the cause, for whoever runs it
            response = self.server.viewer.error(500, "the viewer failed on this request")
        self._send(response, head=head)

    def _send(self, response: Response, *, head: bool) -> None:
        self.send_response(response.status, REASONS.get(response.status))
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in (*HEADERS, *response.headers):
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(response.body)

    do_GET = _serve
    do_HEAD = _serve
    do_POST = _serve
    do_PUT = _serve
    do_DELETE = _serve
    do_PATCH = _serve
    do_OPTIONS = _serve
    do_TRACE = _serve
    do_CONNECT = _serve


def _refusal(refusal: Refusal) -> Response:
    body = f"{refusal.status} {REASONS.get(refusal.status, '')}: {refusal.reason}\n".encode()
    return Response(refusal.status, body, "text/plain; charset=utf-8", list(refusal.headers))


def serve(viewer: Viewer, *, host: str = "127.0.0.1", port: int = 0,
          ready: Callable[[ViewerServer], None] | None = None) -> None:
    """Serve ``viewer`` at ``host:port`` until interrupted; ``ready(server)`` is called once
    it listens (to print its address). KeyboardInterrupt ends it cleanly."""
    server = ViewerServer(viewer, host, port)
    try:
        if ready is not None:
            ready(server)
        server.serve_forever()
    finally:
        server.server_close()


__all__ = ["ViewerServer", "serve"]
