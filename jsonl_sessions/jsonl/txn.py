"""Mutations of one session: ``with mutate(root, files) as tx:`` and a few primitives.

:func:`mutate` takes the session's guard (waiting up to the store's ``lock_timeout``;
:func:`~jsonl_sessions.jsonl.control.acquire`, which completes whatever a dead writer left:
:func:`~jsonl_sessions.jsonl.control.recover`) and hands out a :class:`Tx`. Every primitive of the :class:`Tx` is all-or-nothing on disk,
also after SIGKILL or an I/O error at any point, keeps lock-free readers safe (the
sequence counter is odd around anything that rewrites bytes in place) and keeps the
count cache current:

- appending is :mod:`jsonl_sessions.jsonl.append` (which uses the guard directly);
- :meth:`Tx.truncate_to`: one ``ftruncate`` at a line boundary;
- :meth:`Tx.rewrite_tail`: journaled (:class:`~jsonl_sessions.jsonl.control.TailRewrite`);
- :meth:`Tx.install` / :meth:`Tx.create`: temp file, fsync, rename, directory fsync;
- :meth:`Tx.move_together`: transcript and sidecar replaced as one unit (journaled
  :class:`~jsonl_sessions.jsonl.control.Moves`);
- :meth:`Tx.write_sidecar`, :meth:`Tx.delete`.

A primitive that fails past its commit point (the record is on disk) settles: it tries
to complete the mutation at once, else the next guard holder does. In ``"fsync"`` mode
everything a primitive did is on stable storage when it returns (file fsync, directory
fsync after create / rename / unlink); ``"flush"`` skips every fsync.

The transcript is opened for writing by :meth:`Tx.open` (and by the append path, which
checks the kept descriptor the same way). The descriptor is
kept open on the guard after a successful mutation (a
:class:`~jsonl_sessions.jsonl.guard.TranscriptView`) and reused by the next one when one
``lstat`` of the path shows the same inode: a warm append makes no ``open`` and, when
size and counter are also as the view left them, no tail read.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Literal

from .. import _platform, sidecar
from ..errors import SessionStoreError
from ..types import Durability
from ._atomic import atomic_write, unlink_quietly, write_temp
from .control import (
    DEFAULT,
    Moves,
    RollForward,
    TailRewrite,
    acquire,
    cut,
    enter,
    recover,
    rename_over,
    try_recover,
)
from .guard import SessionGuard, TranscriptView
from .layout import FileState, SessionFiles
from .lines import Tail, read_tail
from .root import Root
from .torn import cut_torn, save_torn

log = logging.getLogger("jsonl_sessions")


def mutate(root: Root, files: SessionFiles, timeout: float | None | Literal[False] = DEFAULT) -> Mutation:
    """Hold the session's guard for a ``with`` block and give a :class:`Tx` to mutate it
    with (taken at ``__enter__``: :class:`LockTimeoutError`)."""
    return Mutation(root, files, timeout)


class Mutation:
    """The context manager :func:`mutate` returns (a class: cheaper than a generator)."""

    __slots__ = ("files", "root", "timeout", "tx")

    def __init__(self, root: Root, files: SessionFiles, timeout: float | None | Literal[False]) -> None:
        self.root, self.files, self.timeout = root, files, timeout

    def __enter__(self) -> Tx:
        self.tx = Tx(self.root, self.files, acquire(self.root, self.files, self.timeout))
        return self.tx

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        tx = self.tx
        try:
            if exc_type is None:
                tx.close()
            else:
                tx.forget()
        finally:
            tx.guard.release()


class Tx:
    """One session's mutation in progress (use through :func:`mutate`)."""

    def __init__(self, root: Root, files: SessionFiles, guard: SessionGuard) -> None:
        self.root = root
        self.files = files
        self.guard = guard
        self.durable = root.durable
        self.fd = -1
        #: The open transcript as last stat'ed (what :attr:`size` and the tail describe).
        self.st: os.stat_result | None = None
        self._tail: Tail | None = None
        #: ``guard.changes`` when this Tx last knew the file (at open, after its own changes):
        #: a mutation nested in this one's block moves it, and the tail is then read again.
        self._seen = -1
        #: Whether :attr:`st` was taken after this Tx's last change (no fstat needed at close).
        self._fresh = False
        #: Whether :attr:`fd` came from the guard's kept view (it counts towards the limit).
        self._counted = False
        #: Whether every line of the open transcript is known to parse (see :meth:`open`).
        self.clean = False
        #: The quarantine file holding the open transcript's torn tail, once saved (see :meth:`save_torn`).
        self.torn_saved: str | None = None

    # -- the transcript ----------------------------------------------------------------
    def open(self) -> bool:
        """Open the transcript for writing (once); False when the session does not exist.
        Reuses the descriptor the guard kept when one ``lstat`` of the path shows the same
        file (and its tail when size and counter are unchanged too).
        :class:`UnsafePathError` for a symlink or a non-regular file."""
        if self.fd != -1:
            return True
        view = self.guard.take_view()
        if view is not None:
            try:
                st: os.stat_result | None = _platform.lstat(self.files.transcript)
            except FileNotFoundError:
                st = None
            except BaseException:
                self.guard.close_taken(view.fd, counted=True)
                raise
            if st is not None and stat.S_ISREG(st.st_mode) and view.same_file(st):
                self.fd, self.st, self._seen, self._counted = view.fd, st, self.guard.changes, True
                unchanged = view.unchanged(st, self.guard.seq)
                self._tail = view.tail if unchanged else None
                self.clean = unchanged and view.clean
                return True
            self.guard.close_taken(view.fd, counted=True)
            if st is None:
                return False
        opened = self.files.open_transcript_for_write()
        if opened is None:
            return False
        self.fd, self.st = opened
        st = self.st
        self._tail, self._seen, self._counted = None, self.guard.changes, False
        self.clean = self.guard.clean_mark == (FileState.of(st), self.guard.seq)
        return True

    def close(self) -> None:
        """End of a successful mutation: keep the transcript open on the guard (with what
        is known of it) for the next one."""
        if self.fd == -1:
            return
        fd, st, tail = self.fd, self.st, self._tail
        self.fd, self.st, self._tail = -1, None, None
        clean = self.clean
        if self._seen != self.guard.changes:
            tail, clean, self._fresh = None, False, False
        try:
            if not self._fresh or st is None:
                now = _platform.fstat(fd)
                if st is None or not FileState.of(st).unchanged(now):
                    tail, clean = None, False
                st = now
        except OSError:  # the mutation is done; only the view is lost
            self.guard.close_taken(fd, counted=self._counted)
            return
        if tail is not None and tail.size != st.st_size:
            tail = None
        self.guard.keep_view(TranscriptView.of(fd, st, self.guard.seq, tail, clean), counted=self._counted)

    def changed(self, st: os.stat_result | None = None, tail: Tail | None = None) -> None:
        """Note a change this Tx made to the transcript: ``st`` (fstat'ed after it) and
        ``tail`` describe the file now, when given; otherwise both are read again."""
        self.guard.changes += 1
        self._seen = self.guard.changes
        self._tail = tail
        self._fresh = st is not None
        if st is not None:
            self.st = st

    def forget(self) -> None:
        """Close the transcript and drop whatever the guard kept of it (after an error, or
        before the file is replaced or deleted)."""
        self.guard.changes += 1
        self.clean = False
        if self.fd != -1:
            fd, self.fd, self.st, self._tail = self.fd, -1, None, None
            self.guard.close_taken(fd, counted=self._counted)
        self.guard.drop_view()

    @property
    def size(self) -> int:
        assert self.st is not None, "open() first"
        return self.st.st_size

    def tail(self) -> Tail:
        """The end of the open transcript as it was opened. O(last line)."""
        if self._tail is None:
            self._tail = read_tail(self.fd, self.size)
        return self._tail

    def save_torn(self) -> str | None:
        """Before a change that replaces the open transcript: save its torn tail (see
        :func:`~jsonl_sessions.jsonl.torn.save_torn`), once per Tx; the quarantine file's
        path, or None when there is no torn tail. Raises ``OSError`` when the copy cannot
        be made: the caller's change must not run then."""
        if self.torn_saved is None:
            self.torn_saved = save_torn(self.root, self.files, self.fd, self.tail())
        return self.torn_saved

    def _end_as_read(self) -> None:
        """Before a change in place computed from :meth:`tail`: cut a torn tail (settled,
        saved and checked: :func:`~jsonl_sessions.jsonl.torn.cut`) and check that the file
        still ends where the tail was read, so the change removes no line another process
        appended meanwhile without the session's lock (:class:`SessionStoreError`, nothing
        changed by the caller then). One ``fstat``; more only with a torn tail."""
        tail = self.tail()
        if tail.torn:
            after, st = cut_torn(self.root, self.files, self.guard, self.fd, tail)
            self.changed(st, after)
            end = after.size
        else:
            end = _platform.fstat(self.fd).st_size
        if end != tail.committed:
            raise SessionStoreError(f"session {self.files.key!r}: {self.files.transcript} grew while it was being "
                                    "changed (another process appends to it without the session's lock); "
                                    "nothing removed, try again")

    def read_all(self) -> bytes:
        """Every byte of the open transcript. O(transcript)."""
        return _platform.pread(self.fd, self.size, 0)

    def known_count(self) -> int | None:
        """The complete lines of the transcript as opened, if the count cache vouches for
        it (same inode, size and counter); None otherwise. O(1)."""
        cache = self.guard.count
        return cache.lines if cache is not None and self.st is not None and cache.matches(self.st, self.guard.seq) \
            else None

    def note_count(self, lines: int | None, st: os.stat_result | None = None) -> None:
        """Keep the count cache current: the transcript now holds ``lines`` complete lines
        (``st``: its stat taken after the change, else stat'ed now). Nothing when unknown:
        the cache no longer matches, and the next reader rebuilds it. A cache: a failure
        to write it is ignored."""
        if lines is None:
            return
        with contextlib.suppress(OSError):
            if st is None:
                st = _platform.fstat(self.fd) if self.fd != -1 else _platform.lstat(self.files.transcript)
            self.guard.write_count(st.st_ino, st.st_size, lines)

    def _stat_after_change(self) -> os.stat_result | None:
        """fstat of the open transcript after this Tx changed it (None if that fails: the
        change stands; the view and the count cache are then rebuilt later)."""
        try:
            return _platform.fstat(self.fd)
        except OSError:
            return None

    # -- journaled steps -----------------------------------------------------------------
    def journaled(self, record: RollForward) -> None:
        """Commit ``record`` and complete it; past the commit, a failure settles."""
        self.guard.write_record(record, self.durable)
        try:
            record.apply(self.guard, self.files, durable=self.durable)
            self.guard.clear_record(self.durable)
        except BaseException:
            self.settle()
            raise

    def settle(self) -> None:
        """After a failure past a commit point: complete the mutation now if possible, else
        leave it to the next guard holder."""
        with contextlib.suppress(OSError):
            recover(self.guard, self.files)

    # -- primitives ----------------------------------------------------------------------
    def truncate_to(self, at: int, removed: int, *, remaining: int | None = None) -> None:
        """Cut the open transcript at ``at`` (a line boundary), removing ``removed``
        complete lines (``remaining``: the lines left, when the caller knows). One
        ``ftruncate``, counter odd around it; a torn tail is saved first
        (:meth:`_end_as_read`). O(1), and O(torn bytes) when there is one."""
        self._end_as_read()
        before = self.known_count()
        self.guard.changes += 1
        cut(self.guard, self.fd, at, durable=self.durable)
        st = self._stat_after_change()
        self.changed(st)
        if remaining is None and before is not None:
            remaining = before - removed
        if st is not None:
            self.note_count(remaining, st)

    def rewrite_tail(self, at: int, line: bytes) -> None:
        """Replace the open transcript's bytes from ``at`` (the last line's start) with
        ``line`` (one line with its newline), through a :class:`TailRewrite` record
        (a torn tail cut first, and the end checked: :meth:`_end_as_read`)."""
        self._end_as_read()
        before = self.known_count()
        self.guard.changes += 1
        self.journaled(TailRewrite(at, line))
        st = self._stat_after_change()
        self.changed(st)
        if st is not None:
            self.note_count(before, st)

    def install(self, chunks: Iterable[bytes]) -> None:
        """Replace (or create) the transcript with whole-line ``chunks`` (streamed in ~1 MiB
        writes): temp file, fsync, rename (counter odd), directory fsync; count follows.
        A torn tail of the open transcript it replaces is saved first (:meth:`save_torn`)."""
        if self.fd != -1 and self.tail().torn:
            self.save_torn()
        self.forget()
        lines = write_temp(self.files.tmp_transcript, chunks, self.durable).lines
        try:
            rename_over(self.guard, self.files.tmp_transcript, self.files.transcript)
        except BaseException:
            unlink_quietly(self.files.tmp_transcript)
            raise
        if self.durable:
            _platform.fsync_dir(self.root.path)
        self.note_count(lines)

    def mark_clean(self) -> None:
        """After :meth:`install` of lines the store encoded: remember that the new
        transcript, as it is now, is known to parse (a later replace in this process need
        not check it again while it is unchanged). One ``lstat``; never raises."""
        with contextlib.suppress(OSError):
            st = _platform.lstat(self.files.transcript)
            self.guard.clean_mark = (FileState.of(st), self.guard.seq)

    def create(self, chunks: Iterable[bytes], meta: dict[str, Any]) -> None:
        """Create the session: sidecar ``meta`` first (so its key is on disk before the
        transcript exists), then the transcript as :meth:`install`. On error nothing that
        looks like a session remains. Called when the transcript does not exist.

        Durable mode: the visible end hides the new transcript's bytes from lock-free
        readers from before its rename until the directory fsync returned, so a session
        whose creation then fails (and is taken away again) was never read with messages."""
        self.write_sidecar(meta, touch=False)
        try:
            if self.durable:
                self.guard.hide_from(0)
            self.install(chunks)
            if self.durable:
                self.guard.show_all()
        except BaseException:
            # The rename may already have happened (the directory fsync failed): take the
            # transcript away again; drop the sidecar only once no transcript is known to
            # be left (a stat that fails keeps it: a sidecar alone is not a session).
            unlink_quietly(self.files.transcript)
            with contextlib.suppress(OSError):
                if not _platform.exists(self.files.transcript):
                    unlink_quietly(self.files.sidecar)
                if self.guard.hidden is not None:
                    self.guard.show_all()  # else the next guard holder clears it
            raise

    def move_together(self, lines: list[bytes], meta: dict[str, Any]) -> None:
        """Replace transcript and sidecar as one crash-atomic unit: both temp files written
        and fsynced (directory too), a :class:`Moves` record committed, both renamed."""
        files = self.files
        if self.fd != -1 and self.tail().torn:
            self.save_torn()
        self.forget()
        write_temp(files.tmp_transcript, lines, self.durable)
        try:
            write_temp(files.tmp_sidecar, [sidecar.encode(meta)], self.durable)
            if self.durable:
                _platform.fsync_dir(self.root.path)
            record = Moves(((os.path.basename(files.tmp_sidecar), os.path.basename(files.sidecar)),
                            (os.path.basename(files.tmp_transcript), os.path.basename(files.transcript))))
            self.guard.write_record(record, self.durable)
        except BaseException:
            for temp in files.temps:
                unlink_quietly(temp)
            with contextlib.suppress(OSError):
                self.guard.clear_record(self.durable)
            raise
        try:
            record.apply(self.guard, files, durable=self.durable)
            self.guard.clear_record(self.durable)
        except BaseException:
            self.settle()
            raise
        self.note_count(len(lines))

    def write_sidecar(self, meta: dict[str, Any], *, touch: bool = True) -> None:
        """Replace the sidecar with ``meta`` (``touch``: stamping ``updated_at`` now): temp,
        fsync, rename, directory fsync."""
        if touch:
            meta["updated_at"] = self.root.clock()
        atomic_write(self.files.sidecar, self.files.tmp_sidecar, [sidecar.encode(meta)], durable=self.durable,
                     directory=self.root.path)

    def read_sidecar(self) -> dict[str, Any]:
        """The sidecar, or a new one when there is none. :class:`CorruptMetadataError`.
        A new one next to an existing transcript replaces a lost sidecar: it says so
        (``recreated_at``), so ``verify`` can tell that the metadata held before is gone."""
        meta = self.files.read_sidecar()
        if meta is not None:
            return meta
        meta = sidecar.new_sidecar(self.files.key, self.root.clock())
        if _platform.exists(self.files.transcript):
            meta["recreated_at"] = meta["created_at"]
        return meta

    def delete(self) -> None:
        """Unlink the transcript first (the session is gone), then the sidecar and temp
        files; directory fsync. A crash half-way leaves a sidecar, which is not a session."""
        self.forget()
        if self.guard.count is not None:
            self.guard.drop_count()
        for path in (self.files.transcript, self.files.sidecar):
            with contextlib.suppress(FileNotFoundError):
                _platform.unlink(path)
        for temp in self.files.temps:
            unlink_quietly(temp)
        if self.durable:
            _platform.fsync_dir(self.root.path)


__all__ = ["DEFAULT", "Durability", "Mutation", "Root", "Tx", "acquire", "enter", "mutate", "recover",
           "save_torn", "try_recover"]
