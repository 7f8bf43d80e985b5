"""The viewer's dependencies are its extra's: importing the package and running the other
commands (``export --format markdown`` included) imports none of them, and without them
``serve`` and ``export --format html`` say how to install them and exit 1. Checked in
child processes (one with an import finder that hides the extra's packages)."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

from jsonl_sessions import SessionStore

VIEWER_MODULES = ("jinja2", "markdown_it", "markupsafe")
HIDE = textwrap.dedent(f"""
    import sys

    class Hide:  # an import finder that finds the viewer extra's packages nowhere
        def find_spec(self, name, path=None, target=None):
            if any(name == h or name.startswith(h + ".") for h in {VIEWER_MODULES!r}):
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Hide())
""")


def _child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)


def _store(tmp_path: pathlib.Path) -> str:
    store = SessionStore(tmp_path / "store")
    store.append("s", {"role": "user", "content": "hello"})
    store.close()
    return str(tmp_path / "store")


def test_the_package_and_the_other_commands_import_no_viewer_dependency(tmp_path: pathlib.Path) -> None:
    root = _store(tmp_path)
    code = textwrap.dedent(f"""
        import contextlib, io, sys
        import jsonl_sessions
        from jsonl_sessions.cli import main
        with contextlib.redirect_stdout(io.TextIOWrapper(io.BytesIO())):
            for argv in (["ls"], ["show", "s"], ["export", "s"], ["export", "s", "--format", "markdown"],
                         ["search", "hello"], ["stats"], ["serve", "--help"]):
                try:
                    status = main(["--root", {root!r}, *argv])
                except SystemExit as exc:
                    status = exc.code
                assert status == 0, (argv, status)
        loaded = [m for m in {VIEWER_MODULES!r} if m in sys.modules]
        print("loaded:", loaded)
    """)
    done = _child(code)
    assert done.returncode == 0, done.stderr
    assert "loaded: []" in done.stdout


def test_without_the_extra_serve_and_html_export_say_how_to_install_it(tmp_path: pathlib.Path) -> None:
    root = _store(tmp_path)
    code = HIDE + textwrap.dedent(f"""
        from jsonl_sessions.cli import main
        print("serve:", main(["--root", {root!r}, "serve", "--port", "0"]))
        print("html:", main(["--root", {root!r}, "export", "s", "--format", "html"]))
        print("markdown:", main(["--root", {root!r}, "export", "s", "--format", "markdown"]) )
    """)
    done = _child(code)
    assert done.returncode == 0, done.stderr
    assert "serve: 1" in done.stdout and "html: 1" in done.stdout and "markdown: 0" in done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert "jinja2, markdown-it-py" in line
        assert "pip install 'jsonl-sessions[viewer]'" in line and "pip install -e '.[viewer]'" in line  # index, checkout
