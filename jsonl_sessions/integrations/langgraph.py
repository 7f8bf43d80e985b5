"""``JsonlCheckpointSaver``: a durable, multi-process LangGraph checkpointer.

::

    from jsonl_sessions.integrations.langgraph import JsonlCheckpointSaver

    saver = JsonlCheckpointSaver("sessions")            # a store directory (or a SessionStore)
    graph = builder.compile(checkpointer=saver)
    graph.invoke(inputs, {"configurable": {"thread_id": "t-1"}})   # resumes where a crash left it

It implements ``langgraph.checkpoint.base.BaseCheckpointSaver`` (``get_tuple``, ``list``,
``put``, ``put_writes``, ``delete_thread``, ``delete_for_runs``, ``copy_thread``,
``prune`` and their async forms) on any session backend (a :class:`jsonl_sessions.SessionStore`
by default): a thread is
the store's session whose key is ``key_prefix + str(thread_id)`` (``"langgraph/t-1"``),
each ``put`` and each ``put_writes`` one line appended to it (the line formats are in
``docs/integrations.md``).

Atomic and durable: every ``put`` / ``put_writes`` is one append (all or nothing, also
after SIGKILL; on stable storage when it returns with ``durability="fsync"``), so after a
crash the thread holds exactly the checkpoints and writes that were acknowledged, plus
possibly the one in flight, whole. Writes name their checkpoint by id and are matched at
read time, so their order against ``put`` does not matter. Channel values are stored
once per version (as LangGraph's in-memory and Postgres savers do) and versions carry a
random suffix, so forks from an old checkpoint never overwrite each other's values.

Cost: reads load the thread's transcript (O(thread)); ``put`` and ``put_writes`` cost
O(what they write), independent of the thread's size. ``prune`` and ``delete_for_runs``
rewrite a thread atomically under its guard (the backend's ``lock(key)``), so a ``put``
from another process waits for the rewrite instead of being lost.

Needs ``langgraph-checkpoint``: ``pip install 'jsonl-sessions[langgraph]'``.
"""

from __future__ import annotations

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # pragma: no cover - exercised with the package hidden
    from ..extras import install_hint

    raise ImportError(
        "jsonl_sessions.integrations.langgraph needs LangGraph (langgraph-checkpoint): "
        f"{install_hint('langgraph')} ({exc})"
    ) from exc

import asyncio
import random
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from ..errors import SessionExistsError
from ..protocol import SessionBackend
from ..types import ChatMessage
from ._common import StoreLike, check_prefix, default_prefix, finish, open_store, where
from ._langgraph_records import (
    ThreadIndex,
    checkpoint_line,
    dump,
    load,
    writes_line,
)

__all__ = ["JsonlCheckpointSaver"]

#: The default prefix of a thread's session key.
KEY_PREFIX = default_prefix("langgraph")


class JsonlCheckpointSaver(BaseCheckpointSaver[str]):
    """``JsonlCheckpointSaver(store=None, *, key_prefix="langgraph/", serde=None, **store_options)``.

    ``store``: any session backend (a :class:`~jsonl_sessions.SessionStore`, a SQLite
    store...), an :class:`~jsonl_sessions.AsyncSessionStore`, or the path of a store
    directory, opened with ``store_options`` (``durability``, ``lock_timeout``...); None
    means the command line's store (``$JSONL_SESSIONS_ROOT``, else the per-user data
    directory). ``serde``: LangGraph's serializer (its default ``JsonPlusSerializer``
    when None). Any number of savers, threads and processes may share a store and a thread.

    A value the serializer cannot encode raises :class:`~jsonl_sessions.SerializationError`
    (a TypeError) before anything is written. The async methods run the store in a worker
    thread; an async write whose caller is cancelled is awaited to its end first.
    """

    def __init__(
        self,
        store: StoreLike = None,
        *,
        key_prefix: str = KEY_PREFIX,
        serde: SerializerProtocol | None = None,
        **store_options: Any,
    ) -> None:
        super().__init__(serde=serde)
        check_prefix(key_prefix)
        self.key_prefix = key_prefix
        self._store = open_store(store, store_options)

    @property
    def store(self) -> SessionBackend:
        """The store holding the threads."""
        return self._store

    def __repr__(self) -> str:
        return f"JsonlCheckpointSaver({where(self._store)!r}, key_prefix={self.key_prefix!r})"


    def thread_key(self, thread_id: object) -> str:
        """The session key of thread ``thread_id``."""
        return f"{self.key_prefix}{thread_id}"

    def _index(self, key: str) -> ThreadIndex:
        return ThreadIndex.build(self._store.load(key))

    # -- reads -------------------------------------------------------------------------------
    def _tuple(self, index: ThreadIndex, thread_id: object, ns: str, checkpoint_id: str) -> CheckpointTuple:
        extra = index.checkpoints[(ns, checkpoint_id)].extra
        checkpoint = load(self.serde, extra["checkpoint"])
        checkpoint["channel_values"] = index.values(self.serde, ns, checkpoint.get("channel_versions", {}))
        parent_id = extra.get("parent_id")

        def config(cid: str) -> RunnableConfig:
            return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}

        return CheckpointTuple(
            config=config(checkpoint_id),
            checkpoint=checkpoint,
            metadata=load(self.serde, extra["metadata"]),
            parent_config=config(parent_id) if parent_id else None,
            pending_writes=[(w.task_id, w.channel, load(self.serde, w.value))
                            for w in index.ordered_writes(ns, checkpoint_id)],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``; the newest of the thread's
        namespace when it has none) with its pending writes, or None. Lock-free, one
        consistent state of the thread. O(thread)."""
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        index = self._index(self.thread_key(thread_id))
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id is None:
            ids = index.ids(ns)
            if not ids:
                return None
            checkpoint_id = ids[0]
        elif (ns, checkpoint_id) not in index.checkpoints:
            return None
        return self._tuple(index, thread_id, ns, checkpoint_id)

    def _thread_ids(self, config: RunnableConfig | None) -> list[object]:
        if config is not None:
            return [config["configurable"]["thread_id"]]
        n = len(self.key_prefix)
        return [key[n:] for key in self._store.list_sessions() if key.startswith(self.key_prefix) and len(key) > n]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """The checkpoints of ``config``'s thread (every thread of the store when None),
        namespace (all when it has none) and ``checkpoint_id`` (when given), newest first
        within a namespace, older than ``before``'s checkpoint, whose metadata holds every
        item of ``filter``; at most ``limit``. Each thread is read once, lock-free. O(store)
        for ``config=None``, else O(thread)."""
        conf = config["configurable"] if config else {}
        want_ns, want_id = conf.get("checkpoint_ns"), conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        left = limit
        for thread_id in self._thread_ids(config):
            index = self._index(self.thread_key(thread_id))
            for ns in index.namespaces():
                if want_ns is not None and ns != want_ns:
                    continue
                for checkpoint_id in index.ids(ns):
                    if (want_id and checkpoint_id != want_id) or (before_id and checkpoint_id >= before_id):
                        continue
                    if filter:
                        metadata = load(self.serde, index.checkpoints[(ns, checkpoint_id)].extra["metadata"])
                        if not all(metadata.get(k) == v for k, v in filter.items()):
                            continue
                    if left is not None:
                        if left <= 0:
                            return
                        left -= 1
                    yield self._tuple(index, thread_id, ns, checkpoint_id)

    # -- writes ------------------------------------------------------------------------------
    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        """Store ``checkpoint`` (child of ``config``'s ``checkpoint_id``) with its metadata and
        the values of the channels in ``new_versions``: one append of one line, all or
        nothing, durable on return in fsync mode. O(new values)."""
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        key = self.thread_key(thread_id)
        rest = dict(checkpoint)
        values: dict[str, Any] = rest.pop("channel_values", {})  # type: ignore[assignment]
        blobs = [
            [channel, version, *(dump(self.serde, key, values[channel]) if channel in values else ("empty", ""))]
            for channel, version in new_versions.items()
        ]
        line = checkpoint_line(
            ns=ns, checkpoint_id=checkpoint["id"], parent_id=conf.get("checkpoint_id"),
            checkpoint=dump(self.serde, key, rest), metadata=dump(self.serde, key, get_checkpoint_metadata(config, metadata)),
            blobs=blobs,
        )
        self._store.append(key, line)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """Store the pending writes of task ``task_id`` against ``config``'s checkpoint: one
        append of one line, all or nothing, durable on return in fsync mode. A regular write
        a task already stored is kept as first stored (idempotent); a special one (error,
        interrupt, resume...) replaces it. O(writes)."""
        if not writes:
            return
        conf = config["configurable"]
        key = self.thread_key(conf["thread_id"])
        encoded = [[WRITES_IDX_MAP.get(channel, idx), channel, *dump(self.serde, key, value)]
                   for idx, (channel, value) in enumerate(writes)]
        self._store.append(key, writes_line(
            ns=conf.get("checkpoint_ns", ""), checkpoint_id=conf["checkpoint_id"], task_id=task_id,
            task_path=task_path, writes=encoded,
        ))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of the thread (its session): atomic, durable."""
        self._store.delete_session(self.thread_key(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread to another. A new target is a
        byte-for-byte fork of the source's transcript (``copy_messages``, crash-atomic,
        records the source as its parent); an existing target gets the source's lines in
        one append. A missing source copies nothing. O(source)."""
        source, target = self.thread_key(source_thread_id), self.thread_key(target_thread_id)
        if source == target or not self._store.session_exists(source):
            return
        try:
            self._store.copy_messages(source, target)
        except SessionExistsError:
            lines = self._store.try_load(source)
            if lines:
                self._store.append_many(target, [ChatMessage(m.role, m.content, kind=m.kind, extra=m.extra) for m in lines])

    def _rewrite(self, key: str, keep: Callable[[ThreadIndex], set[tuple[str, str]]]) -> None:
        """Reduce thread ``key`` to the checkpoints ``keep(index)`` returns and their writes,
        as one atomic replace under the thread's lock."""
        with self._store.lock(key):
            lines = self._store.try_load(key)
            index = ThreadIndex.build(lines)
            kept = keep(index)
            if kept != set(index.checkpoints):
                self._store.rewrite_messages(key, index.kept_lines(self.serde, kept, lines))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep only the newest checkpoint of each namespace of each
        thread, with its writes and the values it references (one atomic rewrite per thread,
        under its lock; a graph using the beta ``DeltaChannel`` loses the older writes those
        channels replay). ``"delete"``: delete the threads. Other strategies: ValueError."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r} (keep_latest or delete)")
        for thread_id in thread_ids:
            key = self.thread_key(thread_id)
            if strategy == "delete":
                self._store.delete_session(key)
            elif self._store.session_exists(key):
                self._rewrite(key, lambda index: {(ns, index.ids(ns)[0]) for ns in index.namespaces()})

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata ``run_id`` is one of ``run_ids``, with their
        writes, in every thread of the store (each an atomic rewrite under its lock, values
        still referenced moved to the lines kept). O(store)."""
        runs = set(run_ids)
        if not runs:
            return

        def keep(index: ThreadIndex) -> set[tuple[str, str]]:
            return {at for at, line in index.checkpoints.items()
                    if load(self.serde, line.extra["metadata"]).get("run_id") not in runs}

        for thread_id in self._thread_ids(None):
            self._rewrite(self.thread_key(thread_id), keep)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """A version above ``current`` with a random suffix (``"<n:032>.<random:016>"``, as
        LangGraph's own savers): two forks of one checkpoint get different versions."""
        if current is None:
            n = 0
        elif isinstance(current, int):
            n = current
        else:
            n = int(str(current).split(".")[0])
        return f"{n + 1:032}.{random.random():016}"

    # -- async -------------------------------------------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple` in a worker thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list`, collected in a worker thread."""
        found = await asyncio.to_thread(lambda: [*self.list(config, filter=filter, before=before, limit=limit)])
        for item in found:
            yield item

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        """:meth:`put` in a worker thread."""
        return await finish(asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """:meth:`put_writes` in a worker thread."""
        await finish(asyncio.to_thread(self.put_writes, config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread` in a worker thread."""
        await finish(asyncio.to_thread(self.delete_thread, thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread` in a worker thread."""
        await finish(asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune` in a worker thread."""
        await finish(asyncio.to_thread(self.prune, thread_ids, strategy=strategy))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs` in a worker thread."""
        await finish(asyncio.to_thread(self.delete_for_runs, run_ids))
