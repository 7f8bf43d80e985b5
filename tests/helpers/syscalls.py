"""Count the operating-system calls an operation makes, for tests that pin how many.

Two layers, both recorded in call order while a :class:`SyscallProbe` is active:

- ``seam``: every public function of :mod:`jsonl_sessions._platform` (the module through
  which the store makes its operating-system calls: ``open_file``, ``pread``, ``write``,
  ``fsync``, ``try_lock``...), found when the probe starts, so a function added to the seam
  later is counted too;
- ``os``: the ``os`` / ``fcntl`` / ``mmap`` functions that make one system call each
  (``os.open``, ``os.pread``, ``os.fstat``, ``os.lstat``, ``fcntl.flock``, ``mmap.mmap``...),
  which also catches a call that bypasses the seam. A seam function counts once in
  ``seam`` and once per system call it makes in ``os``.

Usage::

    with SyscallProbe() as probe:
        store.append(key, message)
    assert probe.os["os.open"] == 0
    assert probe.seam["pread"] == 0

Timings never: counts only. The probe patches module attributes, so other threads' calls
made while it is active are counted too; use it around single-threaded code.
"""

from __future__ import annotations

import collections
import fcntl
import functools
import inspect
import mmap
import os
from collections.abc import Callable
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

from jsonl_sessions import _platform

if TYPE_CHECKING:
    from typing_extensions import Self

#: (module, attribute) pairs of functions that make one system call each.
OS_CALLS: tuple[tuple[ModuleType, str], ...] = tuple(
    (module, name)
    for module, names in (
        (os, ("open", "close", "read", "pread", "write", "pwrite", "fsync", "fdatasync", "ftruncate", "truncate",
              "fstat", "stat", "lstat", "replace", "rename", "unlink", "mkdir", "listdir", "scandir", "lseek",
              "dup", "link", "utime")),
        (fcntl, ("flock", "fcntl", "lockf")),
        (mmap, ("mmap",)),
    )
    for name in names
    if hasattr(module, name)
)


def seam_functions() -> list[str]:
    """The public functions of the ``_platform`` seam, as they are now: its own, and the C
    functions it hands on as they are (``lstat = os.lstat``)."""
    return sorted(name for name, obj in vars(_platform).items()
                  if not name.startswith("_") and ((inspect.isfunction(obj) and obj.__module__ == _platform.__name__)
                                                   or inspect.isbuiltin(obj)))


class SyscallProbe:
    """Records every seam call and every single-syscall ``os`` / ``fcntl`` / ``mmap`` call
    made while active (a context manager; re-entering is refused)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []  # (layer, name) in call order
        self.read_sizes: list[int] = []  # bytes returned by each seam pread / read, in order
        self._saved: list[tuple[object, str, Any]] = []

    def __enter__(self) -> Self:
        if self._saved:
            raise RuntimeError("this probe is already active")
        self.calls.clear()
        self.read_sizes.clear()
        for name in seam_functions():
            self._patch(_platform, name, "seam", name)
        for module, name in OS_CALLS:
            self._patch(module, name, "os", f"{module.__name__}.{name}")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        while self._saved:
            owner, name, original = self._saved.pop()
            setattr(owner, name, original)

    def _patch(self, owner: object, name: str, layer: str, label: str) -> None:
        original = getattr(owner, name)
        calls = self.calls

        if isinstance(original, type):  # mmap.mmap: keep it a class for isinstance checks
            class Counted(original):  # type: ignore[misc, valid-type]
                def __new__(cls, *args: Any, **kwargs: Any) -> Any:
                    calls.append((layer, label))
                    return original.__new__(cls, *args, **kwargs)

            wrapper: Any = Counted
        else:
            sizes = self.read_sizes if layer == "seam" and name in ("pread", "read") else None
            # A seam entry that is the os function itself (``lstat = os.lstat``) calls it
            # through ``os`` when called, so the ``os`` layer counts it as well.
            call_os = layer == "seam" and inspect.isbuiltin(original) and original is getattr(os, name, None)

            @functools.wraps(original)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                calls.append((layer, label))
                result = (getattr(os, name) if call_os else original)(*args, **kwargs)
                if sizes is not None:
                    sizes.append(len(result))
                return result

        self._saved.append((owner, name, original))
        setattr(owner, name, wrapper)

    def _layer(self, layer: str) -> collections.Counter[str]:
        return collections.Counter(name for lay, name in self.calls if lay == layer)

    @property
    def seam(self) -> collections.Counter[str]:
        """Calls per seam function (``"pread"``, ``"fsync"``...)."""
        return self._layer("seam")

    @property
    def os(self) -> collections.Counter[str]:
        """Calls per system-call function (``"os.open"``, ``"fcntl.flock"``...)."""
        return self._layer("os")

    def sequence(self, layer: str) -> list[str]:
        """The calls of one layer (``"seam"`` or ``"os"``) in the order they were made."""
        return [name for lay, name in self.calls if lay == layer]


def probe(op: Callable[[], object]) -> SyscallProbe:
    """Run ``op`` once under a fresh probe and return the probe."""
    with SyscallProbe() as p:
        op()
    return p
