"""What the viewer's tests share (tests/viewer): a viewer server in a thread, a browser
context that records what its pages do, the Chromium flags, and the screenshots of
docs/viewer.md (written when ``JSONL_SESSIONS_SCREENSHOTS=1``)."""

from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass, field
from typing import Any

from jsonl_sessions.protocol import SessionBackend
from jsonl_sessions.viewer.app import Viewer
from jsonl_sessions.viewer.server import ViewerServer

CHROMIUM = os.environ.get("JSONL_SESSIONS_CHROMIUM", "/usr/bin/chromium")
REQUIRE = os.environ.get("JSONL_SESSIONS_REQUIRE_BROWSER") == "1"
SCREENSHOTS = os.environ.get("JSONL_SESSIONS_SCREENSHOTS") == "1"
IMAGES = pathlib.Path(__file__).resolve().parents[2] / "docs" / "images"
#: The flags Chromium runs with (as root in CI: no sandbox); nothing talks to Google.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@dataclass
class Browser:
    """One browser context and what its pages did: every request's URL, every dialog,
    every console message."""

    context: Any
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)

    def page(self) -> Any:
        page = self.context.new_page()
        page.set_default_timeout(10_000)
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        return page


class Running:
    """A viewer server in a thread of the test process, over ``store``."""

    def __init__(self, store: SessionBackend, name: str = "test store") -> None:
        self.store = store
        self.server = ViewerServer(Viewer(store, name))
        self.server.start()
        self.port = int(self.server.server_address[1])
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = self.server.url  # with the token

    def stop(self) -> None:
        self.server.stop()


def screenshot(page: Any, name: str) -> None:
    """Save ``page`` as docs/images/<name>.png when JSONL_SESSIONS_SCREENSHOTS=1."""
    if SCREENSHOTS:
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMAGES / f"{name}.png"))
