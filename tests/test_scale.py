"""The shape of the costs at scale, checked structurally (module imports, bytes held, system
calls per session, lines decoded), never by timing: what ``benchmarks/scale.py`` measures."""

from __future__ import annotations

import os
import subprocess
import sys


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ), check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_the_package_does_not_import_asyncio() -> None:
    out = run_python(
        "import sys, jsonl_sessions\n"
        "print(sorted(m for m in sys.modules if m == 'asyncio' or m.startswith('asyncio.')))\n"
        "store = jsonl_sessions.SessionStore\n"
        "print('asyncio' in sys.modules)\n"
        "from jsonl_sessions import AsyncSessionStore, AsyncSessionBackend, SessionBackend\n"
        "print('asyncio' in sys.modules, AsyncSessionStore.__name__, AsyncSessionBackend.__name__,"
        " SessionBackend.__name__)\n"
    )
    lines = out.splitlines()
    assert lines[0] == "[]"
    assert lines[1] == "False"
    assert lines[2] == "True AsyncSessionStore AsyncSessionBackend SessionBackend"


def test_the_lazy_names_are_the_real_ones_and_unknown_names_raise() -> None:
    import jsonl_sessions
    from jsonl_sessions import aio, protocol

    assert jsonl_sessions.AsyncSessionStore is aio.AsyncSessionStore
    assert jsonl_sessions.SessionBackend is protocol.SessionBackend
    assert jsonl_sessions.AsyncSessionBackend is protocol.AsyncSessionBackend
    assert set(jsonl_sessions.__all__) <= set(dir(jsonl_sessions)) | {"AsyncSessionStore", "SessionBackend",
                                                                       "AsyncSessionBackend"}
    try:
        jsonl_sessions.NoSuchName  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchName" in str(exc)
    else:
        raise AssertionError("an unknown attribute must raise AttributeError")
