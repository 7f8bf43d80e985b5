"""The state machine's rules for a backend that offers the storage capability
(``make_state_machine(storage=...)``): another tool damages a transcript (a retried line
written twice, a line that does not parse, a torn tail) or the session's storage is aged
past a TTL; and the invariant that storage holds only the store's files and shows the
times and sizes the metadata reports. Without the capability these rules never run."""

from __future__ import annotations

import time

from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from .machine_base import AGED_NS, Lines, MachineBase, StorageProbe

TORN_TAIL = b'{"id":"01ZZZZZZZZZZZZZZZZZZZZZZZZ","role":"user","content":"alpha'
JUNK_LINES = (b"garbage alpha", b"", b'{"role": 5}', b'{"content":"beta"')


def _has_storage(self: MachineBase) -> bool:
    return type(self).storage is not None and bool(self.model)


class StorageRules(MachineBase):
    """Damage and aging through the storage capability."""

    def _target(self, data: st.DataObject) -> tuple[str, StorageProbe, Lines] | None:
        """A session whose stored transcript ends with a complete line (a torn tail first
        needs the next write to go), its probe and its lines; None if the draw has a torn tail."""
        key = data.draw(st.sampled_from(sorted(self.model)), label="key")
        probe = self.probe()
        assert probe is not None
        raw = probe.raw(key)
        if raw and not raw.endswith(b"\n"):
            return None
        lines = self.damaged.get(key) or [("msg", m) for m in self.model[key].messages]
        return key, probe, lines

    @precondition(_has_storage)
    @rule(data=st.data())
    def duplicate_last_line(self, data: st.DataObject) -> None:
        """A tool retried an append: the newest line is written twice."""
        target = self._target(data)
        if target is None or not target[2] or target[2][-1][0] != "msg":
            return
        key, probe, lines = target
        raw = probe.raw(key)
        probe.append_raw(key, raw[raw.rfind(b"\n", 0, len(raw) - 1) + 1 :])
        self.damaged[key] = [*lines, ("dup", lines[-1][1])]
        self.stats["damaged lines"] += 1

    @precondition(_has_storage)
    @rule(data=st.data(), junk=st.sampled_from(JUNK_LINES))
    def corrupt_line(self, data: st.DataObject, junk: bytes) -> None:
        target = self._target(data)
        if target is not None:
            key, probe, lines = target
            probe.append_raw(key, junk + b"\n")
            self.damaged[key] = [*lines, ("bad", None)]
            self.stats["damaged lines"] += 1

    @precondition(_has_storage)
    @rule(data=st.data())
    def torn_tail(self, data: st.DataObject) -> None:
        """A writer died mid-line: reads ignore the fragment, the next write removes it."""
        target = self._target(data)
        if target is not None:
            target[1].append_raw(target[0], TORN_TAIL)
            self.stats["torn tails"] += 1

    @precondition(_has_storage)
    @rule(data=st.data())
    def age(self, data: st.DataObject) -> None:
        """The session's storage looks untouched for 3 hours (stale for a 2-hour TTL)."""
        key = data.draw(st.sampled_from(sorted(self.model)), label="key")
        probe = self.probe()
        assert probe is not None
        then = time.time_ns() - AGED_NS
        probe.age(key, then)
        self.aged[key] = (then, self.model[key].activity)
        self.stats["sessions aged"] += 1

    @precondition(lambda self: type(self).storage is not None)
    @invariant()
    def storage_agrees(self) -> None:
        """Only the store's files, as many quarantine files as repairs made; a session
        the model saw change is no longer aged (a no-op may also refresh it)."""
        probe = self.probe()
        assert probe is not None
        assert probe.check_layout() == self.quarantined, "quarantine files"
        for key, (then, activity) in list(self.aged.items()):
            session = self.model.get(key)
            shown = probe.changed_at(key) if session is not None else None
            if session is not None and session.activity != activity:
                assert shown != then, f"{key!r} changed, but its storage still shows the time it was aged"
            if shown != then:
                del self.aged[key]


__all__ = ["StorageRules"]
