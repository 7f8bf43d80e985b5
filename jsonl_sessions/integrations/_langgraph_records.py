"""The transcript lines of a LangGraph thread, and the thread rebuilt from them.

A thread is one store session holding two kinds of line, each written by one append:

- a checkpoint line (``role="checkpoint"``): ``ns``, ``checkpoint_id``, ``parent_id``,
  ``checkpoint`` (the serialized checkpoint without its channel values), ``metadata``
  (serialized), ``blobs`` (``[channel, version, type, data]`` for each channel of
  ``new_versions``: its value at that version, ``"empty"`` when the checkpoint has none);
- a writes line (``role="writes"``): ``ns``, ``checkpoint_id``, ``task_id``,
  ``task_path`` and ``writes`` (``[idx, channel, type, data]``), the pending writes of one
  ``put_writes`` call.

Serialized values are the saver's serde output ``(type, bytes)`` with the bytes in
base64. Nothing here reads or writes files: :class:`ThreadIndex` is built from lines
already loaded, and the line builders return messages for one append.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import SerializationError
from ..types import ChatMessage

CHECKPOINT_ROLE = "checkpoint"
WRITES_ROLE = "writes"

Typed = tuple[str, str]  # (serde type, base64 data)
BlobKey = tuple[str, str, Any]  # (ns, channel, version)


class Serde(Protocol):
    """What the records need of LangGraph's ``SerializerProtocol``."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]: ...

    def loads_typed(self, data: tuple[str, bytes]) -> Any: ...


def dump(serde: Serde, key: str, value: Any) -> Typed:
    """``value`` serialized for a line; what the serde cannot encode is a
    :class:`SerializationError` (nothing has been written yet when it is raised)."""
    try:
        kind, data = serde.dumps_typed(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise SerializationError(key=key, reason=f"{type(value).__name__}: {exc}") from exc
    return kind, base64.b64encode(data).decode("ascii")


def load(serde: Serde, typed: Sequence[str]) -> Any:
    return serde.loads_typed((typed[0], base64.b64decode(typed[1])))


def checkpoint_line(
    *, ns: str, checkpoint_id: str, parent_id: str | None, checkpoint: Sequence[str], metadata: Sequence[str],
    blobs: list[list[Any]], id: str = "", created_at: int | None = None,
) -> ChatMessage:
    """One checkpoint line (see the module docstring)."""
    return ChatMessage(CHECKPOINT_ROLE, None, id=id, created_at=created_at, extra={
        "ns": ns, "checkpoint_id": checkpoint_id, "parent_id": parent_id,
        "checkpoint": list(checkpoint), "metadata": list(metadata), "blobs": blobs,
    })


def writes_line(*, ns: str, checkpoint_id: str, task_id: str, task_path: str, writes: list[list[Any]]) -> ChatMessage:
    """One writes line (see the module docstring)."""
    return ChatMessage(WRITES_ROLE, None, extra={
        "ns": ns, "checkpoint_id": checkpoint_id, "task_id": task_id, "task_path": task_path, "writes": writes,
    })


@dataclass
class Write:
    task_id: str
    channel: str
    value: Typed
    task_path: str
    idx: int


@dataclass
class ThreadIndex:
    """A thread as its lines describe it. Later lines win, as later calls do on a live
    saver: a checkpoint put twice is the second one, a blob key stored twice holds the
    second value. A regular write (idx >= 0) of a task already recorded for that
    checkpoint is ignored (``put_writes`` is idempotent); a special write (error,
    interrupt...: idx < 0) replaces the earlier one."""

    #: (ns, checkpoint_id) -> its line, in first-put order.
    checkpoints: dict[tuple[str, str], ChatMessage] = field(default_factory=dict)
    blobs: dict[BlobKey, Typed] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], Write]] = field(default_factory=dict)

    @classmethod
    def build(cls, lines: Iterable[ChatMessage]) -> ThreadIndex:
        index = cls()
        for line in lines:
            extra = line.extra
            ns, checkpoint_id = extra.get("ns"), extra.get("checkpoint_id")
            if not isinstance(ns, str) or not isinstance(checkpoint_id, str):
                continue  # not a line of this adapter
            if line.role == CHECKPOINT_ROLE:
                index.checkpoints[(ns, checkpoint_id)] = line
                for channel, version, kind, data in extra.get("blobs") or ():
                    index.blobs[(ns, channel, version)] = (kind, data)
            elif line.role == WRITES_ROLE:
                stored = index.writes.setdefault((ns, checkpoint_id), {})
                task_id, task_path = str(extra.get("task_id")), str(extra.get("task_path") or "")
                for idx, channel, kind, data in extra.get("writes") or ():
                    if idx >= 0 and (task_id, idx) in stored:
                        continue
                    stored[(task_id, idx)] = Write(task_id, channel, (kind, data), task_path, idx)
        return index

    def namespaces(self) -> list[str]:
        return list(dict.fromkeys(ns for ns, _ in self.checkpoints))

    def ids(self, ns: str) -> list[str]:
        """The checkpoint ids of ``ns``, newest first (ids are time-ordered uuid6)."""
        return sorted((cid for n, cid in self.checkpoints if n == ns), reverse=True)

    def ordered_writes(self, ns: str, checkpoint_id: str) -> list[Write]:
        """The pending writes of a checkpoint in LangGraph's replay order (task path, task id, idx)."""
        stored = self.writes.get((ns, checkpoint_id), {})
        return sorted(stored.values(), key=lambda w: (w.task_path, w.task_id, w.idx))

    def values(self, serde: Serde, ns: str, versions: Mapping[str, Any]) -> dict[str, Any]:
        """The channel values at ``versions`` (channels whose blob is missing or empty are left out)."""
        out: dict[str, Any] = {}
        for channel, version in versions.items():
            blob = self.blobs.get((ns, channel, version))
            if blob is not None and blob[0] != "empty":
                out[channel] = load(serde, blob)
        return out

    def kept_lines(self, serde: Serde, keep: set[tuple[str, str]], lines: Iterable[ChatMessage]) -> list[ChatMessage]:
        """The lines of a thread reduced to the checkpoints ``keep`` and their writes, in
        their order, each kept checkpoint line carrying every blob it needs that no
        earlier kept line carries (the blobs of dropped lines move to the lines kept)."""
        out: list[ChatMessage] = []
        carried: set[BlobKey] = set()
        for line in lines:
            extra = line.extra
            at = (extra.get("ns"), extra.get("checkpoint_id"))
            if at not in keep:
                continue
            if line.role == WRITES_ROLE:
                out.append(line)
                continue
            if line.role != CHECKPOINT_ROLE or self.checkpoints.get(at) is not line:
                continue  # superseded by a later put of the same checkpoint
            ns = str(at[0])
            versions = load(serde, extra["checkpoint"]).get("channel_versions", {})
            blobs = []
            for channel, version in versions.items():
                key = (ns, channel, version)
                if key in self.blobs and key not in carried:
                    carried.add(key)
                    blobs.append([channel, version, *self.blobs[key]])
            out.append(checkpoint_line(
                ns=ns, checkpoint_id=str(at[1]), parent_id=extra.get("parent_id"), checkpoint=extra["checkpoint"],
                metadata=extra["metadata"], blobs=blobs, id=line.id, created_at=line.created_at,
            ))
        return out
