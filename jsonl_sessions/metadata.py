"""Session metadata: names, attribution, ownership, run state, and lock-free looks at sessions.

The contracts are those of the :class:`jsonl_sessions.SessionStore` methods of the same
names. Rules shared by everything here:

- **Setters** never create a session (:class:`SessionNotFoundError` on a missing one);
  each takes the session's guard, reads the sidecar, changes it and replaces it
  atomically (:func:`jsonl_sessions.messages.update_sidecar`). An unreadable sidecar
  (:class:`CorruptMetadataError`) is never overwritten.
- **Getters** take no lock. The sidecar is always read whole (it is replaced by rename),
  but it and the transcript's stats are two reads, not one snapshot.
- **Activity** is the newest modification time of transcript and sidecar (the file
  system's clock); ``created_at`` and ``state_since`` come from the store's clock.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from . import sidecar, snapshot
from .errors import CorruptMetadataError
from .layout import SessionFiles, list_keys, read_sidecar
from .messages import delete, log, update_sidecar
from .txn import Root, mutate
from .types import SESSION_STATES, SessionMetadata, SessionState

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def from_ms(ms: int | None) -> datetime | None:
    return None if ms is None else EPOCH + timedelta(milliseconds=ms)


def from_ns(ns: int) -> datetime:
    return EPOCH + timedelta(microseconds=ns // 1000)


def check_text(what: str, value: object, *, empty: bool = True) -> str:
    """``value`` if it is a string JSON can hold (TypeError / ValueError otherwise)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not empty and not value:
        raise ValueError(f"{what} must not be empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid Unicode text (lone surrogate): {value!r}") from None
    return str(value)


def check_number(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a finite number >= 0, not {value!r}")
    return float(value)


class Look(NamedTuple):
    """A lock-free look at one session: its sidecar (None when absent or unreadable, then
    ``error`` says why), the transcript's stat, the sidecar's mtime."""

    meta: dict[str, Any] | None
    error: CorruptMetadataError | None
    transcript: os.stat_result
    sidecar_mtime_ns: int | None

    @property
    def activity_ns(self) -> int:
        """Newest modification time of transcript and sidecar (ns since the epoch)."""
        return max(self.transcript.st_mtime_ns, self.sidecar_mtime_ns or 0)

    @property
    def state(self) -> str | None:
        value = sidecar.text(self.meta, "state")
        return value if value in SESSION_STATES else None


def look(files: SessionFiles) -> Look | None:
    """The session's sidecar and stats without a lock; None when the session does not
    exist (or its transcript is not a regular file). An unreadable sidecar is ``error``."""
    try:
        st = os.lstat(files.transcript)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    try:
        meta, mtime = read_sidecar(files.sidecar, files.key)
    except CorruptMetadataError as exc:
        try:
            mtime = os.lstat(files.sidecar).st_mtime_ns
        except OSError:
            mtime = None
        return Look(None, exc, st, mtime)
    return Look(meta, None, st, mtime)


def look_strict(files: SessionFiles) -> Look | None:
    """:func:`look`, raising the :class:`CorruptMetadataError` of an unreadable sidecar."""
    found = look(files)
    if found is not None and found.error is not None:
        raise found.error
    return found


def meta_of(files: SessionFiles) -> dict[str, Any] | None:
    """The sidecar of an existing session (``{}`` when it has none); None when the session
    does not exist. Raises :class:`CorruptMetadataError`."""
    found = look_strict(files)
    if found is None:
        return None
    return found.meta if found.meta is not None else {}


def metadata(root: Root, files: SessionFiles, found: Look) -> SessionMetadata | None:
    """The session's metadata from a look plus its message count (O(1): the count cache);
    None when it vanished meanwhile. Parses no transcript."""
    count = snapshot.count(root, files)
    if count is None:
        return None
    meta = found.meta
    crumb = None if meta is None else meta.get("trim_breadcrumb")
    state = found.state
    return SessionMetadata(
        key=files.key,
        name=sidecar.text(meta, "name"),
        agent_alias=sidecar.text(meta, "agent_alias"),
        principal_id=sidecar.text(meta, "principal_id"),
        state=state,
        turn_id=sidecar.text(meta, "turn_id") if state is not None else None,
        created_at=from_ms(sidecar.millis(meta, "created_at")),
        updated_at=from_ns(found.activity_ns),
        message_count=count,
        size_bytes=found.transcript.st_size,
        trim_breadcrumb=crumb if isinstance(crumb, bool) else None,
        context=sidecar.context(meta),
        parent=sidecar.text(meta, "parent"),
        fork_point=sidecar.text(meta, "fork_point"),
    )


def looks(root: Root) -> Iterator[tuple[SessionFiles, Look]]:
    """Every session with a look at it, in key order; unreadable sidecars are logged."""
    for key in list_keys(root.path):
        files = root.files(key)
        found = look(files)
        if found is None:
            continue
        if found.error is not None:
            log.warning("%s", found.error)
        yield files, found


def get_session_metadata(root: Root, files: SessionFiles) -> SessionMetadata | None:
    found = look_strict(files)
    return None if found is None else metadata(root, files, found)


def where(root: Root, keep: Callable[[Look], bool]) -> list[SessionMetadata]:
    """The metadata of every session whose look passes ``keep``, in key order."""
    out = []
    for files, found in looks(root):
        if keep(found):
            md = metadata(root, files, found)
            if md is not None:
                out.append(md)
    return out


def set_field(root: Root, files: SessionFiles, name: str, value: object) -> None:
    """Set one sidecar field of an existing session (atomic, under the guard)."""
    update_sidecar(root, files, lambda meta: meta.__setitem__(name, value))


def check_context(context: object) -> dict[str, str]:
    if not isinstance(context, Mapping):
        raise TypeError(f"context must be a mapping of str to str, not {type(context).__name__}")
    return {check_text("context key", k): check_text(f"context[{k!r}]", v) for k, v in context.items()}


def delete_session_owned(root: Root, files: SessionFiles, owner_principal_id: str) -> bool:
    owner = check_text("owner_principal_id", owner_principal_id)
    with mutate(root, files):
        if not owner or not files.transcript_exists():
            return False
        if sidecar.text(files.read_sidecar(), "principal_id") != owner:
            return False
        return delete(root, files)


# -- run state ------------------------------------------------------------------------------
def set_session_state(root: Root, files: SessionFiles, state: str, turn_id: str | None) -> None:
    if not isinstance(state, str) or state not in SESSION_STATES:
        raise ValueError(f"state must be one of {sorted(SESSION_STATES)}, not {state!r}")
    turn = None if turn_id is None else check_text("turn_id", turn_id)
    if state == "idle":
        turn = None

    def change(meta: dict[str, Any]) -> None:
        same = meta.get("state") == state and meta.get("turn_id") == turn
        if not (same and sidecar.millis(meta, "state_since") is not None):
            meta["state_since"] = root.clock()
        meta["state"] = state
        meta["turn_id"] = turn

    update_sidecar(root, files, change)


def get_session_state(files: SessionFiles) -> SessionState | None:
    meta = meta_of(files)
    state = sidecar.text(meta, "state")
    if meta is None or state not in SESSION_STATES:
        return None
    since = sidecar.millis(meta, "state_since")
    if since is None:
        since = sidecar.millis(meta, "updated_at") or 0
    return SessionState(str(state), sidecar.text(meta, "turn_id"), EPOCH + timedelta(milliseconds=since))


def list_stuck_sessions(root: Root, threshold_secs: float) -> list[SessionMetadata]:
    threshold_ms = check_number("threshold_secs", threshold_secs) * 1000
    now = root.clock()

    def stuck(found: Look) -> bool:
        since = sidecar.millis(found.meta, "state_since")
        return found.state == "running" and since is not None and now - since > threshold_ms

    return where(root, stuck)


# -- agent attribution ------------------------------------------------------------------------
def count_agent_attribution(root: Root, agent_alias: str) -> int:
    alias = check_text("agent_alias", agent_alias)
    return sum(1 for _files, found in looks(root) if sidecar.text(found.meta, "agent_alias") == alias)


def reattribute(root: Root, old: str, new: str | None) -> int:
    """Move every session of alias ``old`` to ``new`` (None: clear), each under its own
    guard; the number changed."""
    changed = 0
    for files, found in looks(root):
        if sidecar.text(found.meta, "agent_alias") != old:
            continue  # lock-free prefilter; re-checked under the guard
        with mutate(root, files) as tx:
            if not files.transcript_exists():
                continue
            try:
                meta = files.read_sidecar()
            except CorruptMetadataError as exc:
                log.warning("%s", exc)
                continue
            if meta is None or sidecar.text(meta, "agent_alias") != old:
                continue
            meta["agent_alias"] = new
            tx.write_sidecar(meta)
            changed += 1
    return changed
