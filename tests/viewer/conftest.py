"""Fixtures of the viewer's tests: a real headless Chromium (the system's
``/usr/bin/chromium``) driven by Playwright, one per test module (helpers in
``helpers/_viewer.py``).

Without Chromium or Playwright the browser tests skip, unless
``JSONL_SESSIONS_REQUIRE_BROWSER=1`` (CI), which makes them fail. With
``JSONL_SESSIONS_SCREENSHOTS=1`` the browser tests write the screenshots of docs/viewer.md
to docs/images/.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

pytest.importorskip("jinja2", reason="the viewer extra: pip install '.[viewer]'")
pytest.importorskip("markdown_it", reason="the viewer extra: pip install '.[viewer]'")

from _viewer import CHROMIUM, FLAGS, REQUIRE, Browser  # noqa: E402


def _unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"{reason} (JSONL_SESSIONS_REQUIRE_BROWSER=1)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    if not (os.path.isfile(CHROMIUM) or shutil.which(CHROMIUM)):
        _unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright is not installed (pip install '.[test]')")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True,
            args=FLAGS, viewport={"width": 1200, "height": 900})
        found = Browser(context)
        context.on("request", lambda r: found.requests.append(r.url))
        try:
            yield found
        finally:
            context.close()
