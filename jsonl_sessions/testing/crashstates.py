"""The recording and rebuilding half of the power-loss simulator
(:func:`jsonl_sessions.testing.check_power_loss`): :class:`Recorder` logs, through the
platform seam, every call that changes files under a store's root; :class:`Timeline`
rebuilds from that log the file-system states a power loss could leave at each point
(see :mod:`jsonl_sessions.testing.powerloss` for the model of what is simulated).
"""

from __future__ import annotations

import fcntl
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _platform

if TYPE_CHECKING:
    from typing_extensions import Self

#: Writes up to this size are never torn (a device writes a 512-byte sector whole; the
#: store's control-file fields are this small). Longer ones are torn at arbitrary bytes.
ATOMIC_WRITE_BYTES = 64
_DATA = ("write", "truncate")
_DIR = ("create", "rename", "unlink")
Step = Callable[[Any], Any] | tuple[str, Callable[[Any], Any]]


@dataclass(frozen=True)
class Op:
    """One recorded call. ``file``: the file's identity (data ops, fsync, create)."""

    index: int
    kind: str  # write, truncate, fsync, fsync_dir, create, rename, unlink
    file: int = -1
    offset: int = 0
    data: bytes = b""
    name: str = ""
    dst: str = ""
    step: int = 0  # 1-based mutation in flight, 0 = between mutations
    acked: int = 0  # mutations that had returned when the call was made


class Recorder:
    """Records the calls through the platform seam that change files under ``root``."""

    WRAPPED = ("open_file", "close", "write", "pwrite", "truncate", "fsync", "fsync_dir", "replace", "unlink")

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.base_names: dict[str, int] = {}
        self.base_content: dict[int, bytes] = {}
        self.by_inode: dict[tuple[int, int], int] = {}
        self.by_fd: dict[int, int] = {}
        self.ops: list[Op] = []
        self.step = 0
        self.acked = 0
        self._saved: dict[str, Callable[..., Any]] = {}
        for entry in os.scandir(self.root):
            if entry.is_file(follow_symlinks=False):
                st = entry.stat(follow_symlinks=False)
                file = self.by_inode.setdefault((st.st_dev, st.st_ino), len(self.by_inode))
                self.base_names[entry.name] = file
                with open(entry.path, "rb") as f:
                    self.base_content[file] = f.read()

    def _inside(self, path: str) -> bool:
        return os.path.dirname(os.path.abspath(path)) == self.root

    def _file_of_fd(self, fd: int) -> int | None:
        if fd in self.by_fd:
            return self.by_fd[fd]
        st = os.fstat(fd)
        return self.by_inode.get((st.st_dev, st.st_ino))

    def _log(self, kind: str, **fields: Any) -> None:
        self.ops.append(Op(len(self.ops), kind, step=self.step, acked=self.acked, **fields))

    def __enter__(self) -> Self:
        self._saved = {name: getattr(_platform, name) for name in self.WRAPPED}
        for name in self.WRAPPED:
            setattr(_platform, name, getattr(self, f"_{name}"))
        return self

    # -- the wrappers (each calls the real function it replaces) ------------------------
    def _open_file(self, path: str, flags: int, mode: int = 0o600) -> int:
        inside = self._inside(path)
        existed = inside and os.path.lexists(path)
        fd: int = self._saved["open_file"](path, flags, mode)
        if inside:
            st = os.fstat(fd)
            if existed:
                file = self.by_inode.get((st.st_dev, st.st_ino))
                if file is None:
                    raise AssertionError(f"{path} was created outside the platform seam while recording")
            else:
                file = len(self.base_content)
                self.base_content[file] = b""
                self.by_inode[(st.st_dev, st.st_ino)] = file
                self._log("create", file=file, name=os.path.basename(path))
            self.by_fd[fd] = file
            if flags & os.O_TRUNC and existed:
                self._log("truncate", file=file, offset=0)
        return fd

    def _close(self, fd: int) -> None:
        self.by_fd.pop(fd, None)
        self._saved["close"](fd)

    def _write(self, fd: int, data: bytes) -> None:
        file = self._file_of_fd(fd)
        if file is not None:
            appending = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND
            at = os.fstat(fd).st_size if appending else os.lseek(fd, 0, os.SEEK_CUR)
            self._log("write", file=file, offset=at, data=bytes(data))
        self._saved["write"](fd, data)

    def _pwrite(self, fd: int, data: bytes, offset: int) -> None:
        file = self._file_of_fd(fd)
        if file is not None:
            self._log("write", file=file, offset=offset, data=bytes(data))
        self._saved["pwrite"](fd, data, offset)

    def _truncate(self, fd: int, size: int) -> None:
        file = self._file_of_fd(fd)
        if file is not None:
            self._log("truncate", file=file, offset=size)
        self._saved["truncate"](fd, size)

    def _fsync(self, fd: int) -> None:
        self._saved["fsync"](fd)
        file = self._file_of_fd(fd)
        if file is not None:
            self._log("fsync", file=file)

    def _fsync_dir(self, path: str) -> None:
        self._saved["fsync_dir"](path)
        if os.path.abspath(path) == self.root:
            self._log("fsync_dir")

    def _replace(self, src: str, dst: str) -> None:
        self._saved["replace"](src, dst)
        if self._inside(src) and self._inside(dst):
            self._log("rename", name=os.path.basename(src), dst=os.path.basename(dst))

    def _unlink(self, path: str) -> None:
        self._saved["unlink"](path)
        if self._inside(path):
            self._log("unlink", name=os.path.basename(path))

    def __exit__(self, *exc: object) -> None:
        for name, fn in self._saved.items():
            setattr(_platform, name, fn)
        self._saved = {}


# -- rebuilding crash states ----------------------------------------------------------
Choice = Callable[[int, int], Any]  # (file, position among its pending ops) -> "apply" | "drop" | ("torn", cut, fill)


def _apply(content: bytearray, op: Op, how: Any, seed: int) -> None:
    if op.kind == "truncate":
        if how == "apply":
            if op.offset < len(content):
                del content[op.offset:]
            else:
                content.extend(bytes(op.offset - len(content)))
        return
    if how == "drop":
        return
    data = op.data
    if how != "apply":
        _torn, cut, fill = how
        if fill == "partial":
            data = data[:cut]
        elif fill == "zeros":
            data = data[:cut] + bytes(len(data) - cut)
        else:
            noise = random.Random(seed).randbytes(len(data) - cut).replace(b"\n", b"*")
            data = data[:cut] + noise
    end = op.offset + len(data)
    if op.offset > len(content):
        content.extend(bytes(op.offset - len(content)))
    content[op.offset:end] = data


class Timeline:
    """The recorded log, and the file system states it allows at each crash point."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.ops = rec.ops

    def split(self, k: int) -> tuple[dict[int, list[Op]], dict[int, list[Op]], list[Op], list[Op]]:
        """For a crash after the first ``k`` ops: per file its durable and pending data
        ops, and the durable and pending directory ops."""
        last_sync: dict[int, int] = {}
        last_dir = -1
        for op in self.ops[:k]:
            if op.kind == "fsync":
                last_sync[op.file] = op.index
            elif op.kind == "fsync_dir":
                last_dir = op.index
        durable: dict[int, list[Op]] = {}
        pending: dict[int, list[Op]] = {}
        dir_durable: list[Op] = []
        dir_pending: list[Op] = []
        for op in self.ops[:k]:
            if op.kind in _DATA:
                target = durable if op.index < last_sync.get(op.file, -1) else pending
                target.setdefault(op.file, []).append(op)
            elif op.kind in _DIR:
                (dir_durable if op.index < last_dir else dir_pending).append(op)
        return durable, pending, dir_durable, dir_pending

    def build(self, k: int, choice: Choice, dir_prefix: int | None) -> dict[str, bytes]:
        """The files (name -> bytes) after a crash at ``k``: durable ops kept, pending data
        ops as ``choice`` says, the first ``dir_prefix`` pending directory ops (None: all)."""
        durable, pending, dir_durable, dir_pending = self.split(k)
        names = dict(self.rec.base_names)
        for op in dir_durable + dir_pending[: len(dir_pending) if dir_prefix is None else dir_prefix]:
            if op.kind == "create":
                names[op.name] = op.file
            elif op.kind == "rename":
                if op.name in names:
                    names[op.dst] = names.pop(op.name)
            else:
                names.pop(op.name, None)
        out = {}
        for name, file in names.items():
            content = bytearray(self.rec.base_content[file])
            for op in durable.get(file, []):
                _apply(content, op, "apply", op.index)
            for position, op in enumerate(pending.get(file, [])):
                _apply(content, op, choice(file, position), op.index)
            out[name] = bytes(content)
        return out

    def variants(self, k: int) -> Iterator[tuple[str, Choice, int | None]]:
        """The crash states considered at point ``k`` (see the module docstring)."""
        _durable, pending, _dir_durable, dir_pending = self.split(k)
        yield "all pending ops arrived", everything, None
        yield "no pending op arrived", _nothing, 0
        if dir_pending:
            yield "file data arrived, no directory op", everything, 0
            yield "directory ops arrived, no file data", _nothing, None
            for m in range(1, len(dir_pending)):
                yield f"the first {m} pending directory ops arrived", everything, m
                yield f"the first {m} pending directory ops arrived, no file data", _nothing, m
        for file, ops in pending.items():
            yield f"file {file}: its pending data lost", _lost(file), None
            for position, op in enumerate(ops):
                if op.kind == "write" and len(op.data) > ATOMIC_WRITE_BYTES:
                    for cut in sorted({len(op.data) // 2, len(op.data) - 1}):
                        for fill in ("partial", "zeros", "garbage"):
                            label = f"file {file}: write of {len(op.data)} bytes at {op.offset} torn at +{cut} ({fill})"
                            yield label, _torn(file, position, cut, fill), None
                if len(ops) > 1:
                    yield (f"file {file}: pending op {position} lost, the later ones arrived",
                           _dropped(file, position), None)


def everything(_file: int, _position: int) -> Any:
    return "apply"


def _nothing(_file: int, _position: int) -> Any:
    return "drop"


def _lost(lost: int) -> Choice:
    def choice(file: int, _position: int) -> Any:
        return "drop" if file == lost else "apply"

    return choice


def _dropped(target: int, at: int) -> Choice:
    def choice(file: int, position: int) -> Any:
        return "drop" if (file, position) == (target, at) else "apply"

    return choice


def _torn(target: int, at: int, cut: int, fill: str) -> Choice:
    def choice(file: int, position: int) -> Any:
        if file != target or position < at:
            return "apply"
        return ("torn", cut, fill) if position == at else "drop"

    return choice


__all__ = ["ATOMIC_WRITE_BYTES", "Op", "Recorder", "Step", "Timeline", "everything"]
