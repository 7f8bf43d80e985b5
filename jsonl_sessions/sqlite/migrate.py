"""Copy a whole store between the backends (JSONL directory, SQLite file, PostgreSQL schema).

:func:`migrate` copies every session of ``source`` into ``target``: the messages as their
exact stored lines (byte-identical, corrupt ones included: nothing is dropped or
re-encoded), the metadata object whole (name, alias, owner, run state, context,
breadcrumb, creation time, lineage ``parent`` / ``fork_point``, fields a newer writer
added) and the last-activity time. Each session is all or nothing, also after a crash:

- into SQLite or PostgreSQL: one transaction per session (the store's ``import_session``);
- into a JSONL directory: under the session's guard, the sidecar is written first (a
  sidecar alone is not a session), then the transcript to ``.<stem>.jsonl.tmp``, fsync,
  rename, directory fsync: the transcript appearing is the commit (the format's own
  creation protocol, docs/format.md).

A session that already exists in the target with the same lines and metadata is already
there (``unchanged``: running a migration again changes nothing and fails nothing). One
that exists with other content is, by ``existing``: ``"refuse"`` (the default) left as
it is and reported as failed (:class:`SessionExistsError`); ``"skip"`` left as it is and
reported as ``skipped``; ``"overwrite"`` replaced by the source's, under the target
session's guard: deleted, then copied (each step all or nothing; a crash between the two
leaves it absent from the target, and running the migration again copies it). A session
whose copy failed for another reason is reported as failed. The source is only read (a JSONL session under its guard, so that the transcript and sidecar
read belong together; a database session in one read transaction).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

from .. import rows
from ..errors import SessionExistsError, SessionStoreError
from ..jsonl.store import SessionStore
from ..keys import key_to_stem
from ..sidecar import FORMAT_VERSION
from .store import SessionSnapshot, SqliteSessionStore


class DatabaseStore(Protocol):
    """A database backend's side of a migration (SQLite, PostgreSQL): a session's snapshot
    out (None: no such session), a snapshot in as one transaction."""

    def export_session(self, key: str) -> SessionSnapshot | None: ...
    def import_session(self, snapshot: SessionSnapshot) -> None: ...
    def list_sessions(self) -> list[str]: ...
    def delete_session(self, key: str) -> bool: ...
    def lock(self, key: str) -> contextlib.AbstractContextManager[object]: ...
    def close(self) -> None: ...


Store = SessionStore | SqliteSessionStore | DatabaseStore
#: ``progress(done, total, key)``: called after each session (``key``: the one just copied).
Progress = Callable[[int, int, str], None]
#: What :func:`migrate` does with a session that exists in the target with other content.
Existing = Literal["refuse", "skip", "overwrite"]
_BOM = b"\xef\xbb\xbf"


@dataclass
class MigrateReport:
    """What :func:`migrate` did: the keys copied; those already in the target with the same
    content (``unchanged``); those left as they were because the target holds other
    content (``skipped``, with ``existing="skip"``); the keys that failed with their error."""

    copied: list[str] = field(default_factory=list)
    failed: dict[str, SessionStoreError | OSError] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


def migrate(source: Store, target: Store, *, keys: Iterable[str] | None = None,
            progress: Progress | None = None, existing: Existing = "refuse") -> MigrateReport:
    """Copy every session of ``source`` (or only ``keys``) into ``target``; ``existing``
    says what happens to a session the target holds with other content (see the module
    docstring). Returns a report; never raises for one session's failure (an OSError of
    the target as a whole, e.g. a full disk, is reported per session too)."""
    if existing not in ("refuse", "skip", "overwrite"):
        raise ValueError(f"existing must be 'refuse', 'skip' or 'overwrite', not {existing!r}")
    todo = sorted(source.list_sessions() if keys is None else keys)
    report = MigrateReport()
    for n, key in enumerate(todo, 1):
        try:
            snapshot = export_session(source, key)
            if snapshot is None:
                raise SessionStoreError(f"session {key!r} does not exist in the source")
            outcome = _copy(target, snapshot, existing)
        except (SessionStoreError, OSError) as exc:
            report.failed[key] = exc
        else:
            {"copied": report.copied, "unchanged": report.unchanged, "skipped": report.skipped}[outcome].append(key)
        if progress is not None:
            progress(n, len(todo), key)
    return report


def _copy(target: Store, snapshot: SessionSnapshot, existing: Existing) -> str:
    """Copy one session: ``"copied"``, ``"unchanged"`` (the target holds the same) or
    ``"skipped"``; :class:`SessionExistsError` when it holds other content and
    ``existing`` is ``"refuse"``."""
    key = snapshot.key
    try:
        import_session(target, snapshot)
        return "copied"
    except SessionExistsError:
        there = export_session(target, key)
        if there is not None and there.lines == snapshot.lines and there.meta == {**snapshot.meta, "key": key}:
            return "unchanged"
        if existing == "skip":
            return "skipped"
        if existing == "refuse":
            raise SessionExistsError(f"session {key!r} already exists in the target with other content",
                                     key=key) from None
    with target.lock(key):  # replaced as one unit for every other writer
        target.delete_session(key)
        import_session(target, snapshot)
    return "copied"


# -- reading a session ---------------------------------------------------------------------
def export_session(store: Store, key: str) -> SessionSnapshot | None:
    """A session's stored lines, metadata and activity; None when it does not exist."""
    if isinstance(store, SessionStore):
        return _export_jsonl(store, key)
    return store.export_session(key)


def _paths(store: SessionStore, key: str) -> tuple[str, str, str, str]:
    stem = key_to_stem(key)
    root = store.root
    return (os.path.join(root, stem + ".jsonl"), os.path.join(root, stem + ".meta.json"),
            os.path.join(root, "." + stem + ".jsonl.tmp"), os.path.join(root, "." + stem + ".meta.json.tmp"))


def _export_jsonl(store: SessionStore, key: str) -> SessionSnapshot | None:
    transcript, sidecar, _tmp, _tmp_sidecar = _paths(store, key)
    with store.lock(key):  # taking the guard completes an interrupted write first
        try:
            with open(transcript, "rb") as f:
                data = f.read()
                mtime = os.fstat(f.fileno()).st_mtime_ns
        except FileNotFoundError:
            return None
        try:
            with open(sidecar, "rb") as f:
                meta = rows.decode_meta(f.read(), key, sidecar)
                mtime = max(mtime, os.fstat(f.fileno()).st_mtime_ns)
        except FileNotFoundError:
            meta = {"format": FORMAT_VERSION, "key": key}
    data = data.removeprefix(_BOM)
    committed = data[: data.rfind(b"\n") + 1]  # a torn tail is not a message
    return SessionSnapshot(key, committed.split(b"\n")[:-1], meta, mtime)


# -- writing a session ---------------------------------------------------------------------
def import_session(store: Store, snapshot: SessionSnapshot) -> None:
    """Create ``snapshot.key`` in ``store`` holding exactly the snapshot, all or nothing.
    :class:`SessionExistsError` (nothing written) when it exists."""
    if isinstance(store, SessionStore):
        _import_jsonl(store, snapshot)
    else:
        store.import_session(snapshot)


def _import_jsonl(store: SessionStore, snapshot: SessionSnapshot) -> None:
    key = snapshot.key
    transcript, sidecar, tmp, tmp_sidecar = _paths(store, key)
    durable = store.durability == "fsync"
    with store.lock(key):
        if store.session_exists(key):
            raise SessionExistsError(key=key)
        meta: dict[str, Any] = {**snapshot.meta, "key": key}
        _write_replace(sidecar, tmp_sidecar, [orjson.dumps(meta, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_INDENT_2)],
                       durable, store.root)
        try:
            _write_replace(transcript, tmp, (line + b"\n" for line in snapshot.lines), durable, store.root)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(transcript)
            with contextlib.suppress(OSError):
                os.unlink(sidecar)
            raise
        if snapshot.activity_ns > 0:  # the session's last activity is its files' modification time
            with contextlib.suppress(OSError):
                for path in (sidecar, transcript):
                    os.utime(path, ns=(snapshot.activity_ns, snapshot.activity_ns))


def _write_replace(path: str, tmp: str, chunks: Iterable[bytes], durable: bool, directory: str) -> None:
    """Write ``chunks`` to ``tmp`` (0600), fsync it (``durable``), rename it over ``path``,
    fsync the directory. On error the temp file is removed."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
