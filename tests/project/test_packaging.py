"""The built wheel carries the license: an SPDX expression in its metadata and the LICENSE file."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_license_file_is_mit_for_the_authors() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n")
    assert "Copyright (c) 2026 the jsonl_sessions authors" in text


def test_wheel_metadata_has_the_spdx_license_and_ships_the_file(tmp_path: pathlib.Path) -> None:
    # --no-build-isolation: the installed setuptools builds it, so the test needs no network.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=120)
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        headers = z.read(metadata).decode("utf-8").split("\n\n", 1)[0].splitlines()
        assert "License-Expression: MIT" in headers
        assert not any(h.startswith("License: ") for h in headers)  # the legacy free-text field is gone
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
        # the viewer's templates and static files are package data
        viewer = pathlib.Path(ROOT / "jsonl_sessions" / "viewer")
        data = {p.relative_to(ROOT).as_posix() for p in [*viewer.glob("templates/*"), *viewer.glob("static/*")]}
        assert data and data <= set(names), data - set(names)
