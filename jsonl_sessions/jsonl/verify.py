"""``SessionStore.verify()``: a read-only health check (fsck) of a store directory.

It reads the files directly, following docs/format.md, and changes nothing: no recovery
runs, no guard is taken, no temp file is removed. To tell a crashed writer's leftovers
from a write in progress it probes a session's lock for a moment (non-blocking
``flock``, released at once); what a live writer holds is a note, not a problem. With
``fix`` it then clears what a killed writer left (:data:`FIXABLE`), each session
under its guard (recovery runs, then :func:`jsonl_sessions.jsonl.store.clear_leftovers`
re-checks and removes), and reports the store as it is after; transcripts are never
touched. The clearing comes from the caller (the store's module, which imports this one),
so this module never opens a store itself.

Problems, by kind: ``torn-tail``, ``corrupt-line`` (1-based line number and byte
offset), ``id-order`` (ids that do not strictly increase), ``missing-sidecar``,
``corrupt-sidecar``, ``key-mismatch``, ``orphan-sidecar``, ``unknown-key`` (a long key
whose sidecar cannot tell it), ``temp-file``, ``pending-record`` (a roll-forward record
a dead writer left), ``odd-counter``, ``permissions`` (files not mode 0600, the root not
0700), ``symlink`` and ``not-regular`` (where the store keeps its files),
``unreadable``, ``missing-session`` (a key asked for that has no files). Notes:
``quarantine`` files, ``bom`` (a byte-order mark), ``foreign`` (files that are not the
store's), ``busy`` (a write in progress), ``sidecar-recreated`` (a metadata write made a
new sidecar for a session whose sidecar was gone: what the lost one held is lost too).
Both ``missing-sidecar`` and ``sidecar-recreated`` say what was lost.

Opening a :class:`~jsonl_sessions.SessionStore` removes the temp files of sessions
nobody holds, so ``store.verify()`` only sees those left since; :func:`verify_directory`
checks a directory without opening a store (what the command line does).

Cost: every transcript is streamed once (1 MiB blocks, each line decoded, nothing kept),
so O(total bytes) time and O(longest line) memory.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import _platform, codec, sidecar
from ..corruption import BOM, BadLine
from ..errors import CorruptControlError, CorruptMetadataError, SessionStoreError
from ..ids import IdOrder
from ..keys import is_hashed, key_to_stem, stem_to_key
from ..verification import Finding, VerifyReport, wanted_keys
from .control import RECORD_OFFSET, parse_record, read_head
from .layout import LOCK_SUFFIX, SIDECAR_SUFFIX, TRANSCRIPT_SUFFIX, FileState, classify, key_of_stem, read_sidecar
from .lines import iter_lines_forward

BLOCK = 1 << 20
#: At most this many findings of one kind are listed per file; the rest are counted.
MAX_PER_FILE = 20
_HASHED = re.compile(r"~[0-9a-f]{32}$")
_SETTLE_SECONDS = 0.3  # how long a changing file or an odd counter is re-read before reporting
#: The problems ``fix`` clears: what a writer killed mid-create, mid-fork or mid-replace leaves.
FIXABLE = frozenset({"temp-file", "orphan-sidecar", "pending-record", "odd-counter"})

#: ``progress(done, total)``: called after each transcript is checked.
Progress = Callable[[int, int], None]
#: ``clear(stem)``: under its guard, remove what killed writers left for the session with file
#: stem ``stem`` (:func:`jsonl_sessions.jsonl.store.clear_leftovers` on a store).
Clear = Callable[[str], object]


def verify_directory(root: str | os.PathLike[str], keys: Iterable[str] | None = None, *,
                     fix: Callable[[], Clear] | None = None, progress: Progress | None = None) -> VerifyReport:
    """Check the store directory ``root`` (all of it, or only the sessions ``keys``),
    reading its files without opening a store; see the module docstring. With ``fix``,
    clear the :data:`FIXABLE` problems and report the store as it is after, with what was
    cleared in ``fixed``: ``fix()`` is called once, only when there is something to clear,
    and returns the :data:`Clear` to use (:func:`jsonl_sessions.jsonl.store.fixer` makes one
    that opens a store then, since opening one removes temp files the check must see).

    :raises InvalidSessionKeyError: a key of ``keys`` is invalid (nothing checked).
    :raises InvalidArgumentError: ``keys`` is a string, not a collection of keys.
    :raises OSError: ``root`` cannot be listed."""
    path = os.path.abspath(os.fspath(root))
    wanted = wanted_keys(keys)
    report = _check(path, wanted, progress)
    if fix is not None:
        report = _fix(path, wanted, report, fix, progress)
    return report


def _fix(root: str, keys: list[str] | None, report: VerifyReport, fix: Callable[[], Clear],
         progress: Progress | None) -> VerifyReport:
    """Clear the :data:`FIXABLE` problems of ``report``: each session concerned under its
    guard (waiting up to the store's ``lock_timeout``; a session still busy, or whose record
    this version cannot complete, is left as it is), recovery first, then its temp files
    and a sidecar without a transcript (checked again under the guard). Returns the
    store's report after, with the problems it no longer has in ``fixed``. Never touches
    a transcript."""
    todo = [f for f in report.problems if f.fixable]
    if not todo:
        return report
    clear = fix()
    for stem in sorted({found[1] for f in todo if (found := classify(f.file)) is not None and found[1]}):
        try:
            clear(stem)
        except (SessionStoreError, OSError):
            continue  # reported again below
    after = _check(root, keys, progress)
    still = {(f.kind, f.file) for f in after.problems}
    after.fixed = [f for f in todo if (f.kind, f.file) not in still]
    return after


def _f(kind: str, file: str, message: str, key: str | None = None, line: int | None = None,
       offset: int | None = None, *, problem: bool = True) -> Finding:
    return Finding(kind, message, key, file, line, offset, "problem" if problem else "note",
                   problem and kind in FIXABLE)


# -- the directory ------------------------------------------------------------------------
@dataclass
class _Entry:
    name: str
    st: os.stat_result


@dataclass
class _Stem:
    transcript: _Entry | None = None
    sidecar: _Entry | None = None
    lock: _Entry | None = None
    temps: list[_Entry] = field(default_factory=list)
    quarantine: list[_Entry] = field(default_factory=list)


def _check(root: str, keys: list[str] | None, progress: Progress | None) -> VerifyReport:
    report = VerifyReport(root, "jsonl")
    wanted = None if keys is None else {key_to_stem(k): k for k in keys}
    if not _platform.IS_WINDOWS:
        mode = stat.S_IMODE(_platform.stat_of(root).st_mode)
        if mode != 0o700:
            report.findings.append(_f("permissions", "", f"the store directory has mode {mode:04o}, expected 0700"))
    stems: dict[str, _Stem] = {}
    with _platform.scandir(root) as entries:
        for entry in entries:
            role_stem = classify(entry.name)
            if role_stem is None:
                if wanted is None:
                    report.findings.append(_f("foreign", entry.name, "ignored by the store", problem=False))
                continue
            role, stem = role_stem
            if wanted is not None and stem not in wanted:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            e = _Entry(entry.name, st)
            if role != "temp" and not _canonical(stem):
                if wanted is None:
                    report.findings.append(_f("foreign", entry.name, "not a name the store makes (ignored)",
                                              problem=False))
                continue
            if not _plain_file(report, e):
                continue
            slot = stems.setdefault(stem, _Stem())
            if role == "temp":
                slot.temps.append(e)
            elif role == "quarantine":
                slot.quarantine.append(e)
            else:
                setattr(slot, role, e)
    for stem, key in (wanted or {}).items():
        found = stems.get(stem)
        if found is None or (found.transcript is None and found.sidecar is None):
            report.findings.append(_f("missing-session", stem + TRANSCRIPT_SUFFIX, "the session does not exist",
                                      key=key))
    total = sum(1 for s in stems.values() if s.transcript)
    for stem in sorted(stems):
        _check_stem(report, root, stem, stems[stem])
        if progress is not None and stems[stem].transcript is not None:
            progress(report.sessions, total)
    report.findings.sort(key=lambda f: (not f.problem, f.file, f.line or 0))
    return report


def _canonical(stem: str) -> bool:
    """Whether ``stem`` is one the store makes (a key's stem, or a long key's hashed stem)."""
    if _HASHED.search(stem):
        return True
    return stem_to_key(stem) is not None


def _plain_file(report: VerifyReport, e: _Entry) -> bool:
    """Report a symlink, a non-regular file, or a mode other than 0600; True when it is a
    regular file (mode problems aside) that can be checked further."""
    if stat.S_ISLNK(e.st.st_mode):
        report.findings.append(_f("symlink", e.name, "a symlink where the store keeps its files "
                                  "(never followed)"))
        return False
    if not stat.S_ISREG(e.st.st_mode):
        report.findings.append(_f("not-regular", e.name, "not a regular file"))
        return False
    mode = stat.S_IMODE(e.st.st_mode)
    if not _platform.IS_WINDOWS and mode != 0o600:
        report.findings.append(_f("permissions", e.name, f"mode {mode:04o}, expected 0600"))
    return True


def _lock_busy(root: str, stem: str) -> bool:
    """Whether another process (or store) holds the session's lock right now. Probes with a
    non-blocking flock that is released at once; never waits, never creates the file."""
    if not stem:
        return False
    try:
        fd = _platform.open_file(os.path.join(root, stem + LOCK_SUFFIX), os.O_RDONLY)
    except OSError:
        return False
    try:
        if _platform.try_lock(fd):
            _platform.unlock(fd)
            return False
        return True
    except OSError:
        return False
    finally:
        _platform.close(fd)


def _check_stem(report: VerifyReport, root: str, stem: str, s: _Stem) -> None:
    meta: dict[str, Any] | None = None
    meta_error: str | None = None
    if s.sidecar is not None:
        try:
            meta = read_sidecar(os.path.join(root, s.sidecar.name))[0]
        except CorruptMetadataError as exc:
            meta_error = exc.reason or str(exc)
        except OSError as exc:
            meta_error = exc.strerror or str(exc)
            report.findings.append(_f("unreadable", s.sidecar.name, meta_error))
            meta_error = None
    key = key_of_stem(root, stem, meta, read=False)
    if s.transcript is not None:
        _check_transcript(report, root, stem, s.transcript, key)
        report.sessions += 1
        if s.sidecar is None:
            report.findings.append(_f("missing-sidecar", s.transcript.name, f"no {stem}{SIDECAR_SUFFIX} "
                                      f"next to the transcript: {_LOST}", key=key))
        if key is None:
            report.findings.append(_f("unknown-key", s.transcript.name, "the session's key (a long one, "
                                      "hashed in the file name) cannot be read from its sidecar"))
    if s.sidecar is not None:
        _check_sidecar(report, root, stem, s, meta, meta_error, key)
    if s.lock is not None:
        _check_lock(report, root, stem, s.lock, key)
    for temp in s.temps:
        if _lock_busy(root, stem):
            report.findings.append(_f("busy", temp.name, "temp file of a write in progress", key=key,
                                      problem=False))
        else:
            report.findings.append(_f("temp-file", temp.name, f"{_bytes(temp.st.st_size)} left by an "
                                      "interrupted write", key=key))
    for q in s.quarantine:
        report.findings.append(_f("quarantine", q.name, f"bytes saved by a repair or before a torn tail was cut "
                                  f"({_bytes(q.st.st_size)}); delete it when no longer needed",
                                  key=key, problem=False))


#: What a session loses with its sidecar (the transcript keeps every message).
_LOST = ("the session's metadata kept only there is lost (name, agent alias, owner, run state, context, "
         "fork origin, trim breadcrumb and creation time); the messages are intact")


def _check_sidecar(report: VerifyReport, root: str, stem: str, s: _Stem, meta: dict[str, Any] | None,
                   meta_error: str | None, key: str | None) -> None:
    assert s.sidecar is not None
    name = s.sidecar.name
    if s.transcript is None and not os.path.lexists(os.path.join(root, stem + TRANSCRIPT_SUFFIX)):
        if _lock_busy(root, stem):
            report.findings.append(_f("busy", name, "sidecar of a session being created or deleted", key=key,
                                      problem=False))
        else:
            report.findings.append(_f("orphan-sidecar", name, "a sidecar without a transcript (not a session)",
                                      key=key))
        return
    if meta_error is not None:
        report.findings.append(_f("corrupt-sidecar", name, meta_error, key=key))
        return
    if meta is None:
        return
    written = sidecar.text(meta, "key")
    named = stem_to_key(stem)
    if not is_hashed(stem) and written != named:
        report.findings.append(_f("key-mismatch", name, f"holds key {written!r}, the file name says "
                                  f"{named!r}", key=named))
    elif is_hashed(stem) and key is None:
        report.findings.append(_f("key-mismatch", name, f"holds key {written!r}, which does not hash to "
                                  "this file name"))
    recreated = sidecar.from_ms(sidecar.millis(meta, "recreated_at"))
    if recreated is not None:
        when = recreated.strftime("%Y-%m-%d %H:%M:%S UTC")
        report.findings.append(_f("sidecar-recreated", name, f"made anew at {when} after the "
                                  f"session's sidecar went missing: {_LOST}; its created_at is when it was made anew",
                                  key=key, problem=False))


def _check_lock(report: VerifyReport, root: str, stem: str, lock: _Entry, key: str | None) -> None:
    path = os.path.join(root, lock.name)
    deadline = time.monotonic() + _SETTLE_SECONDS
    while True:
        try:
            control = read_head(path)
        except (OSError, SessionStoreError) as exc:
            report.findings.append(_f("unreadable", lock.name, str(exc), key=key))
            return
        odd = bool(control.seq & 1)
        if not odd and not control.pending:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    if _lock_busy(root, stem):
        report.findings.append(_f("busy", lock.name, "a write is in progress", key=key, problem=False))
        return
    if control.pending:
        try:  # the whole record, read as recovery reads it (a tail record can be large)
            raw = read_head(path, record_bytes=None).record or b""
        except (OSError, SessionStoreError) as exc:
            report.findings.append(_f("unreadable", lock.name, str(exc), key=key))
            return
        try:
            record = parse_record(raw, path=path, key=key)
            what = (f"a committed {record.op!r} record whose writer died (rolled forward by the next access)"
                    if record is not None else "an uncommitted (torn) record (dropped by the next access)")
        except CorruptControlError as exc:
            what = f"a committed record this version cannot complete: {exc.reason}"
        report.findings.append(_f("pending-record", lock.name, what, key=key, offset=RECORD_OFFSET))
    if odd:
        report.findings.append(_f("odd-counter", lock.name, f"sequence counter {control.seq} is odd: an "
                                  "in-place write did not finish", key=key, offset=8))


# -- transcripts --------------------------------------------------------------------------
@dataclass
class _Scan:
    file: FileState  # the transcript as it was when the scan began
    messages: int = 0
    committed: int = 0
    bom: bool = False
    findings: list[Finding] = field(default_factory=list)


def _lines(fd: int, size: int, scan: _Scan) -> Iterator[tuple[int, bytes]]:
    """(offset, line) for each complete line of the first ``size`` bytes, read in blocks;
    sets ``scan.committed`` (the end of the last complete line) and ``scan.bom``."""
    scan.bom = size >= len(BOM) and _platform.pread(fd, len(BOM), 0) == BOM
    for start, line in iter_lines_forward(fd, 0, size, block=BLOCK):
        scan.committed = start + len(line) + 1
        yield start, line

def _scan(path: str, name: str, key: str | None) -> _Scan:
    fd = _platform.open_file(path, os.O_RDONLY)
    try:
        st = _platform.fstat(fd)
        scan = _Scan(FileState.of(st))
        bad = disorder = 0
        order = IdOrder()
        for number, (offset, line) in enumerate(_lines(fd, st.st_size, scan), 1):
            scan.messages += 1  # a corrupt line too: it holds a position, as get_message_count counts it
            try:
                record = codec.decode_record(line)
            except ValueError as exc:
                bad += 1
                if bad <= MAX_PER_FILE:
                    corrupt = BadLine.of(number, offset, exc)
                    scan.findings.append(_f("corrupt-line", name, f"byte offset {offset}: {corrupt.reason}",
                                            key, number, offset))
                continue
            why = order.check(record.get("id") or "")
            if why is not None:
                disorder += 1
                if disorder <= MAX_PER_FILE:
                    scan.findings.append(_f("id-order", name, f"byte offset {offset}: {why}", key, number, offset))
        if bad > MAX_PER_FILE:
            scan.findings.append(_f("corrupt-line", name, f"and {bad - MAX_PER_FILE} more corrupt lines", key))
        if disorder > MAX_PER_FILE:
            scan.findings.append(_f("id-order", name, f"and {disorder - MAX_PER_FILE} more ids out of order",
                                    key))
        torn = scan.file.size - scan.committed
        if torn and not (scan.bom and scan.file.size == len(BOM)):
            tail = _platform.pread(fd, min(torn, 4096), scan.committed)
            what = "NUL bytes (as a power loss leaves)" if not tail.strip(b"\0") else "bytes"
            scan.findings.append(_f("torn-tail", name, f"{torn} {what} after byte offset {scan.committed} "
                                    "without a final newline", key, offset=scan.committed))
        return scan
    finally:
        _platform.close(fd)


def _check_transcript(report: VerifyReport, root: str, stem: str, entry: _Entry, key: str | None) -> None:
    """Stream the transcript and check every line, in a state no in-place write overlapped
    (the control file's counter even and unchanged around the read; a torn tail or a file
    that grew meanwhile is read again for a moment, so an append in progress is not
    reported as damage)."""
    path = os.path.join(root, entry.name)
    lock_path = os.path.join(root, stem + LOCK_SUFFIX)
    deadline = time.monotonic() + _SETTLE_SECONDS
    while True:
        try:
            before = read_head(lock_path).seq
            scan = _scan(path, entry.name, key)
            after = read_head(lock_path).seq
            now = _platform.lstat(path)
        except (OSError, SessionStoreError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            report.findings.append(_f("unreadable", entry.name, reason, key=key))
            return
        settled = before == after and not before & 1 and scan.file.unchanged(now)
        torn = scan.committed != scan.file.size
        if (settled and not torn) or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    report.messages += scan.messages
    report.bytes += scan.file.size
    report.findings.extend(scan.findings)
    if scan.bom:
        report.findings.append(_f("bom", entry.name, "starts with a UTF-8 byte-order mark (tolerated)", key=key,
                                  problem=False))


def _bytes(n: int) -> str:
    return f"{n} byte{'s' if n != 1 else ''}"


__all__ = ["FIXABLE", "MAX_PER_FILE", "Clear", "Progress", "verify_directory"]
