"""I/O-error injection through the store's one platform seam.

Every OS call the store makes goes through a function of :mod:`jsonl_sessions._platform`
called as a module attribute, so swapping that attribute is all it takes to make "the
Nth ``fsync``" fail: no file-system mocks, the real calls still run otherwise.

``Injector(kind, nth, ...)`` is a context manager that, while active,

- makes call number ``nth`` of ``kind`` (and, ``persistent``, every later one) raise
  ``OSError(err)`` *before* doing anything, or, ``torn`` (``write`` / ``pwrite`` only),
  after writing the first half of the data (a short write followed by an error, as on a
  full disk);
- logs every call of every kind in :data:`KINDS` (which descriptor / path, offset,
  whether it succeeded), so a test can tell whether a roll-forward record was committed
  before the failure.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, final

from jsonl_sessions import _platform
from jsonl_sessions.locks import RECORD_OFFSET

KINDS = ("write", "pwrite", "fsync", "fsync_dir", "replace", "truncate", "unlink", "open_file")
TORN_KINDS = ("write", "pwrite")
ERRNOS = (errno.EIO, errno.ENOSPC, errno.EDQUOT)


@dataclass(frozen=True)
class Call:
    kind: str
    target: Any  # fd, path, or (src, dst)
    offset: int | None
    ok: bool


@final
@dataclass
class Injector:
    kind: str
    nth: int
    err: int = errno.EIO
    persistent: bool = False
    torn: bool = False
    calls: int = 0  # calls of ``kind`` so far
    injected: int = 0  # errors raised so far
    log: list[Call] = field(default_factory=list)
    _saved: dict[str, Callable[..., Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown kind {self.kind!r}")
        if self.torn and self.kind not in TORN_KINDS:
            raise ValueError("torn failures exist only for write / pwrite")

    def _should_fail(self) -> bool:
        self.calls += 1
        return self.calls == self.nth or (self.persistent and self.calls > self.nth)

    def _wrap(self, kind: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any) -> Any:
            target: Any = (args[0], args[1]) if kind == "replace" else args[0]
            offset = args[2] if kind == "pwrite" else None
            if kind == self.kind and self._should_fail():
                self.injected += 1
                self.log.append(Call(kind, target, offset, False))
                if self.torn:
                    data = args[1]
                    real(args[0], data[: len(data) // 2], *args[2:])
                raise OSError(self.err, f"{os.strerror(self.err)} (injected: {kind} call {self.calls})")
            try:
                result = real(*args)
            except BaseException:
                self.log.append(Call(kind, target, offset, False))
                raise
            self.log.append(Call(kind, result if kind == "open_file" else target, offset, True))
            return result

        return wrapper

    def __enter__(self) -> Injector:
        for kind in KINDS:
            real = getattr(_platform, kind)
            self._saved[kind] = real
            setattr(_platform, kind, self._wrap(kind, real))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for kind, real in self._saved.items():
            setattr(_platform, kind, real)
        self._saved.clear()

    def record_committed(self, lock_fd: int, durable: bool) -> bool:
        """Whether a roll-forward record was committed on ``lock_fd`` (the lock file):
        written at its offset and cut to length, and (durable) fsynced, all successfully
        and in that order."""
        steps = ["pwrite", "truncate"] + (["fsync"] if durable else [])
        log = self.log
        for i, call in enumerate(log):
            if call.kind == "pwrite" and call.target == lock_fd and call.offset == RECORD_OFFSET and call.ok:
                window = log[i : i + len(steps)]
                if [c.kind for c in window] == steps and all(c.ok and c.target == lock_fd for c in window):
                    return True
        return False
