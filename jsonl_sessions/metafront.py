"""The metadata API shared by the database backends (SQLite, PostgreSQL): names,
attribution, ownership, run state and the trim breadcrumb, written in terms of four
primitives each backend provides:

- ``_update(key, change)``: apply ``change`` to the metadata object of an existing session
  in one transaction (:class:`SessionNotFoundError` for a missing one; an unreadable
  object raises :class:`CorruptMetadataError` and is never overwritten);
- ``_meta_of(key)``: the metadata object, None for a missing session;
- ``_where(keep)``: the metadata of every session whose object (None: unreadable) ``keep``
  accepts, in key order, from one snapshot;
- ``_reattribute(old, new)``: set ``agent_alias`` from ``old`` to ``new`` on every session,
  in one transaction; the number changed.

The rules are the JSONL backend's: setters never create a session, values are checked
first (TypeError / ValueError, nothing written).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .arguments import check_context, check_number, check_state, check_text
from .jsonl import sidecar
from .types import SessionMetadata, SessionState


class MetadataFront:
    """The metadata methods of a database backend (a base class of its store)."""

    _clock: Callable[[], int]

    def _update(self, key: str, change: Callable[[dict[str, Any]], None]) -> None:
        raise NotImplementedError

    def _meta_of(self, key: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def _where(self, keep: Callable[[dict[str, Any] | None], bool]) -> list[SessionMetadata]:
        raise NotImplementedError

    def _reattribute(self, old: str, new: str | None) -> int:
        raise NotImplementedError

    # -- setters and getters ------------------------------------------------------------
    def set_session_name(self, key: str, name: str) -> None:
        """Set the name (any string). :class:`SessionNotFoundError` for a missing session."""
        value = check_text("name", name)
        self._update(key, lambda meta: meta.__setitem__("name", value))

    def get_session_name(self, key: str) -> str | None:
        return sidecar.text(self._meta_of(key), "name")

    def set_session_agent_alias(self, key: str, agent_alias: str) -> None:
        """Record the agent alias. :class:`SessionNotFoundError` for a missing session."""
        value = check_text("agent_alias", agent_alias)
        self._update(key, lambda meta: meta.__setitem__("agent_alias", value))

    def get_session_agent_alias(self, key: str) -> str | None:
        return sidecar.text(self._meta_of(key), "agent_alias")

    def set_session_context(self, key: str, context: Mapping[str, str]) -> None:
        """Replace the context (a str -> str map; ``{}`` clears it). TypeError / ValueError
        for a bad value; :class:`SessionNotFoundError` for a missing session."""
        value = check_context(context)
        self._update(key, lambda meta: meta.__setitem__("context", value))

    def set_session_principal(self, key: str, principal_id: str) -> None:
        """Record the owning principal (non-empty). :class:`SessionNotFoundError` for a
        missing session."""
        value = check_text("principal_id", principal_id, empty=False)
        self._update(key, lambda meta: meta.__setitem__("principal_id", value))

    def set_session_trim_breadcrumb(self, key: str, present: bool) -> None:
        """Record whether the transcript starts with a synthetic trim breadcrumb.
        :class:`SessionNotFoundError` for a missing session."""
        self._update(key, lambda meta: meta.__setitem__("trim_breadcrumb", bool(present)))

    def get_session_trim_breadcrumb(self, key: str) -> bool | None:
        """The recorded flag; None when the session is missing or never set it."""
        meta = self._meta_of(key)
        value = None if meta is None else meta.get("trim_breadcrumb")
        return value if isinstance(value, bool) else None

    # -- run state ------------------------------------------------------------------------
    def set_session_state(self, key: str, state: str, turn_id: str | None = None) -> None:
        """Set the run state (``idle``, ``running``, ``error``; else ValueError) and turn
        (cleared on ``idle``). ``since`` changes only when the state or the turn changes.
        :class:`SessionNotFoundError` for a missing session."""
        new_state, turn = check_state(state, turn_id)
        self._update(key, lambda meta: sidecar.set_state(meta, new_state, turn, self._clock()))

    def get_session_state(self, key: str) -> SessionState | None:
        """The run state; None when the session is missing or never had one."""
        return sidecar.run_state(self._meta_of(key))

    def list_running_sessions(self) -> list[SessionMetadata]:
        """Every session in state ``running``, in key order."""
        return self._where(lambda meta: sidecar.state(meta) == "running")

    def list_stuck_sessions(self, threshold_secs: float) -> list[SessionMetadata]:
        """Every session that entered ``running`` more than ``threshold_secs`` ago (store clock)."""
        threshold_ms = check_number("threshold_secs", threshold_secs) * 1000
        now = self._clock()

        def stuck(meta: dict[str, Any] | None) -> bool:
            since = sidecar.millis(meta, "state_since")
            return sidecar.state(meta) == "running" and since is not None and now - since > threshold_ms

        return self._where(stuck)

    # -- attribution ----------------------------------------------------------------------
    def count_agent_attribution(self, agent_alias: str) -> int:
        """How many sessions are attributed to ``agent_alias``."""
        alias = check_text("agent_alias", agent_alias)
        return len(self._where(lambda meta: sidecar.text(meta, "agent_alias") == alias))

    def rename_agent_attribution(self, old_alias: str, new_alias: str) -> int:
        """Re-attribute every session of ``old_alias`` to ``new_alias`` in one transaction;
        the number changed (equal aliases: nothing written, the count returned)."""
        old = check_text("old_alias", old_alias)
        new = check_text("new_alias", new_alias)
        if old == new:
            return self.count_agent_attribution(old)
        return self._reattribute(old, new)

    def clear_agent_attribution(self, agent_alias: str) -> int:
        """Remove the attribution to ``agent_alias`` from every session; the number changed."""
        return self._reattribute(check_text("agent_alias", agent_alias), None)


__all__ = ["MetadataFront"]
