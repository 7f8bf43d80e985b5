"""Another process appends complete lines to a transcript while the store appends to it.

docs/format.md ("Other writers"): the store never deletes a complete line and never
cuts bytes it has not saved. A large ``write`` becomes visible to other processes page by
page, so a store append can find a line in progress as a "torn tail"; it must wait for it
rather than cut it (which would also delete every line written meanwhile). The writer
here ignores the lock on purpose, with one plain ``write`` per line; the other tests
show the locked ways (``append_lines``, ``jsonl-sessions import - --append``).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import orjson
import pytest
from _budget import sized
from _child import child_env

from jsonl_sessions import SessionStore
from jsonl_sessions.jsonl.layout import SessionFiles

KEY = "shared"

#: Appends complete lines (one plain write each, no lock) until the stop file exists; then
#: prints how many lines it wrote (every write returned in full).
WRITER = r"""
import os, sys, json
path, stop, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
n = 0
while not os.path.exists(stop):
    line = json.dumps({"role": "tool", "content": "x" * size, "outside": n}).encode() + b"\n"
    assert os.write(fd, line) == len(line)
    n += 1
print(n, flush=True)
"""


def _lines(path: pathlib.Path) -> list[dict[str, object]]:
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    return [orjson.loads(line) for line in complete.splitlines()]


@pytest.mark.parametrize("size", [3_000, 20_000, 200_000])
def test_outside_lines_and_store_appends_all_survive(tmp_path: pathlib.Path, size: int) -> None:
    store = SessionStore(tmp_path / "store", durability="flush")
    store.append(KEY, {"role": "user", "content": "start"})
    path = pathlib.Path(SessionFiles.of(str(tmp_path / "store"), KEY).transcript)
    stop = tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(stop), str(size)],
                              stdout=subprocess.PIPE, env=child_env())
    acknowledged: list[str] = []
    try:
        deadline = time.monotonic() + sized(1.5, 15.0)
        while time.monotonic() < deadline or not acknowledged:
            acknowledged.append(store.append(KEY, {"role": "assistant", "content": f"store {len(acknowledged)}"}))
    finally:
        stop.touch()
        out, _ = writer.communicate(timeout=60)
    written = int(out)
    assert writer.returncode == 0 and written > 0
    lines = _lines(path)
    outside = sorted(line["outside"] for line in lines if "outside" in line)  # type: ignore[type-var]
    assert outside == list(range(written)), f"{written - len(set(outside))} of {written} outside lines lost"
    ids = [line.get("id") for line in lines if "outside" not in line]
    assert ids[1:] == acknowledged  # every acknowledged append, once, in order
    assert len(lines) == 1 + written + len(acknowledged)
    # Nothing was cut, so nothing was saved: no quarantine file piles up.
    assert not [p for p in os.listdir(tmp_path / "store") if ".quarantine-" in p]
