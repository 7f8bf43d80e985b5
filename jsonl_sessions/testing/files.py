"""The storage capability for stores using the JSONL file layout (docs/format.md):
``<root>/<stem>.jsonl`` transcripts, ``<stem>.meta.json`` sidecars, ``<stem>.lock``
control files and ``*.quarantine-*.jsonl.bak`` files kept by a repair.

:class:`JsonlFileDamage` reaches under a store's API the way another tool (or a crash,
or time) would: read and append a transcript's bytes, set its files' modification times,
and check that the directory holds nothing but the store's own files. The contract mixin
uses :meth:`~JsonlFileDamage.raw`, :meth:`~JsonlFileDamage.append_raw` and
:meth:`~JsonlFileDamage.rewrite_raw` (its ``damage`` capability); the state machine uses all of it (its ``storage`` capability).
"""

from __future__ import annotations

import os
import stat
from typing import Any

from ..jsonl.layout import LOCK_SUFFIX as CONTROL
from ..jsonl.layout import QUARANTINE_MARK, QUARANTINE_SUFFIX
from ..jsonl.layout import SIDECAR_SUFFIX as SIDECAR
from ..jsonl.layout import TMP_SUFFIX as TEMP_SUFFIX
from ..jsonl.layout import TRANSCRIPT_SUFFIX as TRANSCRIPT
from ..keys import key_to_stem


class JsonlFileDamage:
    """The ``damage`` / ``storage`` capability of a store with a ``root`` directory in the
    JSONL file layout and a ``lock(key)`` guard."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def path(self, key: str, suffix: str = TRANSCRIPT) -> str:
        return os.path.join(self.store.root, key_to_stem(key) + suffix)

    def raw(self, key: str) -> bytes:
        """The transcript's bytes."""
        with open(self.path(key), "rb") as f:
            return f.read()

    def append_raw(self, key: str, data: bytes) -> None:
        """Append bytes to the transcript under the session's guard, as a polite other tool would."""
        with self.store.lock(key), open(self.path(key), "ab") as f:
            f.write(data)

    def rewrite_raw(self, key: str, data: bytes) -> None:
        """Replace the transcript's bytes in place (same file), as a tool editing its lines would."""
        with self.store.lock(key), open(self.path(key), "r+b") as f:
            f.write(data)
            f.truncate()

    def _files(self, key: str) -> list[str]:
        return [p for p in (self.path(key), self.path(key, SIDECAR)) if os.path.exists(p)]

    def age(self, key: str, ns: int) -> None:
        """Set the modification time of the session's transcript and sidecar to ``ns``."""
        for p in self._files(key):
            os.utime(p, ns=(ns, ns))

    def changed_at(self, key: str) -> int:
        """The newest modification time (ns) of transcript and sidecar: the session's activity."""
        return max(os.stat(p).st_mtime_ns for p in self._files(key))

    def size(self, key: str) -> int:
        """The transcript's length in bytes (a torn tail included)."""
        return os.path.getsize(self.path(key))

    def check_layout(self) -> int:
        """Assert that ``root`` holds only regular files of the layout (no temp file, no
        symlink, no sidecar without its transcript) and that its parent directory holds
        nothing but ``root`` (the state machine gives each store a directory of its own);
        the number of quarantine files of repairs. A torn tail a write cut is saved to a
        quarantine file too; such a file holds no newline (a repair's copy holds the
        complete line it dropped), and is not counted."""
        root = str(self.store.root)
        parent = os.path.dirname(os.path.abspath(root))
        assert os.listdir(parent) == [os.path.basename(root)], f"files beside the store: {os.listdir(parent)}"
        quarantined = 0
        for name in os.listdir(root):
            assert stat.S_ISREG(os.lstat(os.path.join(root, name)).st_mode), f"not a regular file: {name}"
            assert not name.endswith(TEMP_SUFFIX), f"temp file left behind: {name}"
            if QUARANTINE_MARK in name:
                assert name.endswith(QUARANTINE_SUFFIX), name
                with open(os.path.join(root, name), "rb") as f:
                    quarantined += b"\n" in f.read()
                continue
            assert name.endswith((TRANSCRIPT, SIDECAR, CONTROL)), f"not a store file: {name}"
            if name.endswith(SIDECAR):
                transcript = name[: -len(SIDECAR)] + TRANSCRIPT
                assert os.path.exists(os.path.join(root, transcript)), f"orphan sidecar {name}"
        return quarantined


__all__ = ["JsonlFileDamage"]
