"""The optional full-text index of a JSONL store: ``<root>/.search-index.sqlite3``, an SQLite
file with an FTS5 table (:mod:`jsonl_sessions.fts`), derived from the transcripts and never
the source of truth: deleting it loses nothing, and :func:`build` makes it again.

**Use.** While the file exists, ``search_messages`` brings it up to date for the sessions
the search looks at, then asks it for candidates and confirms each with the exact matcher
(so it returns what a scan returns); a search without a term of three characters or more
scans instead. ``jsonl-sessions index build`` (or :func:`build`) creates it, ``drop``
deletes it; without it, searches scan.

**Currency.** Each session has a high-water mark: the transcript's identity (device,
inode), the control file's sequence counter (every in-place change of a transcript,
truncate or tail rewrite, moves it), the modification time, the byte end and line count
indexed so far, and the last bytes before that end. A session whose transcript still has
that identity, counter and time and ends there is current; one that only grew (same
identity and counter, the bytes before the old end unchanged) gets its new lines
indexed from the old end; anything else (a rewrite, truncation, replaced or recreated
file) is read again from the start, and the lines still at the same offset with the same
bytes keep their rows. Sessions that no longer exist are dropped from it.
Only complete lines up to the committed end are indexed (a torn tail never is).

**Crashes.** The file is in WAL mode; each session's update (rows and mark) is one
transaction, so a process killed in the middle of an update leaves every session at its
old or its new mark, both consistent: the next search goes on from there. A file that is
not such an index (another version, damage) is deleted and built again. A build from
nothing (:func:`build`) writes a private file and moves it into place once complete: a
build killed before leaves no index, never a part of one.

**Layout.** The index keeps where each line is (session, line number, byte offset, length
and a digest of its bytes), not a copy: a search reads each candidate from its
transcript and checks it (:class:`_Transcripts`). The FTS5 table is contentless and
keeps which rows hold each trigram of a line's casefolded text, without positions
(:mod:`jsonl_sessions.fts`). A contentless table can delete a row only given its text
again, which is gone once its line changed: such a row becomes dead (:func:`_forget`),
skipped by searches, until the file is made anew (``index build --rebuild``; never
done behind the back of a process that may have the file open). Texts folded by another Unicode
version could make a term miss them: a file recording another version is made anew.
Lines that are not messages or have no text are not indexed. Row ids are dense and
each row carries a bound on the times of the rows up to it (:class:`_Ids`): FTS5 gives
candidates by id descending and a search stops once no lower one can make its page. A
file this process cannot open or write is left alone, and the search scans.

Cost of a search: an ``lstat`` of each session it looks at (the control file is read only
for a transcript changed within :data:`RACY_NS` of its mark; sidecars only when the search
filters by alias or name), the new lines of changed sessions, then the FTS5 query and the
candidates it returns, newest first, until the page is full: for each, a row lookup and a
``pread`` of its line (and one control-file read per session that gave one).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sqlite3
import stat
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .. import _platform, fts, records
from ..corruption import BOM
from ..finding import Collector, MessageSearch
from ..rows import MAX_INTEGER, created_column
from .control import with_transcript_state
from .controlfile import Head, read_head
from .layout import SessionFiles, scan
from .metadata import looks
from .search import line_blocks
from .txn import Root

log = logging.getLogger("jsonl_sessions")

#: The index file's name in the store's root (starts with a dot and does not end in
#: ``.jsonl``: never a session).
INDEX_NAME = ".search-index.sqlite3"
#: ``PRAGMA application_id`` of an index file ("JSIX") and its ``user_version``.
APPLICATION_ID = 0x4A534958
VERSION = 7
#: A transcript whose modification time is this much older than its mark is trusted by
#: its look alone (file-system timestamps are coarse: a change within one tick of the
#: mark keeps the time, so a younger one has its counter read).
RACY_NS = 2_000_000_000
#: Bytes before the indexed end kept in the mark, to tell an appended file from a new one.
TAIL_BYTES = 64

_SCHEMA = (
    """CREATE TABLE sessions (
        id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, dev INTEGER NOT NULL, ino INTEGER NOT NULL,
        seq INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, end_byte INTEGER NOT NULL, lines INTEGER NOT NULL,
        tail BLOB NOT NULL, marked_ns INTEGER NOT NULL DEFAULT 0)""",
    # where each indexed line is in its transcript (no copy of it); session 0: a dead row
    # (its line changed or went away; its trigrams stay in texts until the file is made anew)
    ("CREATE TABLE lines (id INTEGER PRIMARY KEY, session INTEGER NOT NULL, position INTEGER NOT NULL, "
     "bound INTEGER, offset INTEGER NOT NULL, length INTEGER NOT NULL, digest INTEGER NOT NULL)"),
    "CREATE INDEX lines_by_session ON lines (session)",
    f"CREATE VIRTUAL TABLE texts USING fts5(folded, {fts.TABLE_OPTIONS}, content='')",
    "CREATE TABLE meta (unicode TEXT NOT NULL)",
)


def path_of(root: str) -> str:
    return os.path.join(root, INDEX_NAME)


def exists(root: str) -> bool:
    """Whether the store at ``root`` has an index file."""
    return os.path.isfile(path_of(root))


@dataclass
class Status:
    """What :func:`status` and :func:`build` report."""

    path: str
    exists: bool
    sessions: int = 0
    lines: int = 0
    bytes: int = 0
    #: Sessions whose mark was behind their transcript (before a build: still to index).
    stale: int = 0
    #: Rows of lines that changed or went away (see :func:`_forget`).
    dead: int = 0


def _remove(path: str) -> None:
    for name in (path, path + "-wal", path + "-shm", path + "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def _make_schema(conn: sqlite3.Connection) -> None:
    for statement in _SCHEMA:
        conn.execute(statement)
    conn.execute("INSERT INTO meta VALUES (?)", (unicodedata.unidata_version,))
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {VERSION}")


def _connect(path: str, create: bool) -> sqlite3.Connection | None:
    """The index at ``path`` (created when ``create``); None when there is none. A file
    that is not an index of this version is deleted first (and made anew when ``create``)."""
    for _attempt in range(2):
        if not create and not os.path.isfile(path):
            return None
        if create:  # made by us with the store's file mode (SQLite's would follow the umask)
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600))
        conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            app = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if app == APPLICATION_ID and version == VERSION:
                if conn.execute("SELECT unicode FROM meta").fetchone() == (unicodedata.unidata_version,):
                    return conn
                # the texts were folded by another Unicode version: their trigrams could not be
                # deleted exactly (a contentless FTS5 table deletes by the text it was given)
                raise sqlite3.DatabaseError(f"folded by Unicode {unicodedata.unidata_version}")
            if app == 0 and version == 0:
                conn.execute("BEGIN IMMEDIATE")
                if conn.execute("PRAGMA user_version").fetchone()[0] == 0:  # not made meanwhile
                    _make_schema(conn)
                conn.execute("COMMIT")
                return conn
            log.warning("%s is not a search index of this version: made anew", path)
        except sqlite3.DatabaseError as exc:
            log.warning("the search index %s cannot be read (%s): made anew", path, exc)
        conn.close()
        _remove(path)
    return None


#: This thread's open index connections, by path, with the file's identity when opened: a
#: search reuses one (no open, no schema check, no WAL checkpoint at close) while the file
#: at the path is the one it opened, unchanged (device, inode, modification time, size: in
#: WAL mode SQLite writes the file itself only at a checkpoint, so any other change, such
#: as damage, makes the next search open it again and check it).
_KEPT = threading.local()


@contextlib.contextmanager
def _opened(root: str, create: bool) -> Iterator[sqlite3.Connection | None]:
    path = path_of(root)
    kept: dict[str, tuple[sqlite3.Connection, tuple[int, ...]]] = _KEPT.__dict__.setdefault("conns", {})
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    found = kept.pop(path, None)
    if found is not None:
        if st is not None and found[1] == _identity(st):
            conn: sqlite3.Connection | None = found[0]
        else:  # dropped, replaced, changed, or inherited across a fork: open it again
            if found[1][-1] == os.getpid():
                found[0].close()
            conn = None
        if conn is not None:
            try:
                yield conn
            except BaseException:
                conn.close()
                raise
            kept[path] = (conn, _identity(os.stat(path)))
            return
    conn = _connect(path, create)
    try:
        yield conn
    except BaseException:
        if conn is not None:
            conn.close()
        raise
    if conn is not None:
        kept[path] = (conn, _identity(os.stat(path)))


def close_connections() -> None:
    """Close the index connections this thread keeps (the next search opens them again)."""
    kept: dict[str, tuple[sqlite3.Connection, tuple[int, ...]]] = _KEPT.__dict__.setdefault("conns", {})
    while kept:
        conn, identity = kept.popitem()[1]
        if identity[-1] == os.getpid():
            conn.close()


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, os.getpid()


# -- row ids ------------------------------------------------------------------------------
#: Row ids are dense, in the order lines are indexed (FTS5 stores the gaps between the ids
#: of a trigram's rows as varints: consecutive ids take one byte each, which keeps the
#: table at about half the size that ids spread over time took). Each row also has a
#: ``bound``: the largest ``created_at`` (clamped as :func:`created_column` does; NULL for
#: none) of the rows with its id or a lower one. As ids only grow, a row's bound never
#: changes once set, and a search that reads candidates by id descending may stop at the
#: first whose bound cannot make its page: no lower id can either. Lines come in time
#: order (a build takes sessions by modification time, lines of a session in file order,
#: appends are the newest), so bounds are close to the rows' own times and the search
#: stops early; a line out of order only makes it read on further, never miss a hit.
class _Ids:
    """The next row id and bound, for one transaction (read from the highest row once)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        row = conn.execute("SELECT id, bound FROM lines ORDER BY id DESC LIMIT 1").fetchone()
        self.next: int = row[0] + 1 if row is not None else 1
        self.bound: int | None = row[1] if row is not None else None

    def take(self, created: int | None) -> tuple[int, int | None]:
        """``(id, bound)`` of a new row created at ``created`` (a :func:`created_column` value)."""
        if created is not None and (self.bound is None or created > self.bound):
            self.bound = created
        rowid = self.next
        self.next += 1
        return rowid, self.bound


# -- keeping it current ------------------------------------------------------------------
def _digest(line: bytes) -> int:
    """A 64-bit digest of a line (signed, as SQLite stores integers): tells a line still in
    place from one changed at the same offset and length."""
    return int.from_bytes(hashlib.blake2b(line, digest_size=8).digest(), "little", signed=True)


@dataclass(frozen=True)
class _Mark:
    """What a search checks of a session it read candidates from (see :func:`_candidate`)."""

    files: SessionFiles
    dev: int
    ino: int
    seq: int


def _current(mark: tuple[int, ...] | None, st: os.stat_result, size: int, head: Head) -> bool:
    return mark is not None and mark[1:6] == (st.st_dev, st.st_ino, head.seq, st.st_mtime_ns, size)


def _sync_session(conn: sqlite3.Connection, root: Root, files: SessionFiles) -> _Mark | None:
    """Bring one session up to its committed end; its mark (None: it vanished). One
    transaction, begun again when the read must be retried (the file changed in place
    during it). A session that grew gets its new lines indexed; one changed otherwise is
    read again in full, and each of its indexed lines still at the same offset with the
    same bytes (length and digest) keeps its row, the others become dead rows."""

    def read(fd: int, size: int, st: os.stat_result, head: Head) -> _Mark:
        marked = time.time_ns()  # before this read: a change after it has a later time
        if conn.in_transaction:  # an earlier attempt of this read: start over
            conn.execute("ROLLBACK")
        conn.execute("BEGIN IMMEDIATE")
        mark = conn.execute("SELECT id, dev, ino, seq, mtime_ns, end_byte, lines, tail FROM sessions WHERE key = ?",
                            (files.key,)).fetchone()
        if _current(mark, st, size, head):
            return _Mark(files, st.st_dev, st.st_ino, head.seq)
        start = number = 0
        # the rows of a session read again in full, by offset: (id, position, length, digest)
        before: dict[int, tuple[int, int, int, int]] = {}
        if mark is not None:
            sid = int(mark[0])
            end, lines, tail = mark[5], mark[6], mark[7]
            if (mark[1:4] == (st.st_dev, st.st_ino, head.seq) and end <= size
                    and _platform.pread(fd, len(tail), end - len(tail)) == tail):
                start, number = end, lines  # it grew: index the new lines
            else:
                before = {offset: (rowid, position, length, digest) for rowid, position, offset, length, digest
                          in conn.execute("SELECT id, position, offset, length, digest FROM lines WHERE session = ?",
                                          (sid,))}
        else:
            sid = int(conn.execute("INSERT INTO sessions (key, dev, ino, seq, mtime_ns, end_byte, lines, tail) "
                                   "VALUES (?, 0, 0, 0, 0, 0, 0, x'')", (files.key,)).lastrowid or 0)
        end = start
        ids = _Ids(conn)
        dead: list[tuple[int]] = []  # ids of rows whose line changed
        moved: list[tuple[int, int]] = []  # (position, id) of kept rows whose line number changed
        for at, block, stop in line_blocks(fd, size, first=start):
            pos = len(BOM) if at == 0 and block.startswith(BOM) else 0
            rows: list[tuple[int, int, int, int | None, int, int, int]] = []
            texts: list[str] = []
            while pos < stop:
                nl = block.index(b"\n", pos)
                line = block[pos:nl]
                old = before.pop(at + pos, None) if before else None
                if old is not None and old[2] == nl - pos and old[3] == _digest(line):
                    if old[1] != number:
                        moved.append((number, old[0]))
                else:
                    if old is not None:
                        dead.append((old[0],))
                    found = fts.indexed(line)
                    if found is not None:
                        rowid, bound = ids.take(created_column(found[0]))
                        rows.append((rowid, sid, number, bound, at + pos, nl - pos, _digest(line)))
                        texts.append(found[1])
                number += 1
                pos = nl + 1
            end = at + stop
            if rows:
                conn.executemany("INSERT INTO lines (id, session, position, bound, offset, length, digest) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
                conn.executemany("INSERT INTO texts (rowid, folded) VALUES (?, ?)",
                                 zip([row[0] for row in rows], texts))
        dead += [(old[0],) for old in before.values()]  # the rows of lines no longer there
        if dead:
            conn.executemany("UPDATE lines SET session = 0 WHERE id = ?", dead)
        if moved:
            conn.executemany("UPDATE lines SET position = ? WHERE id = ?", moved)
        tail = _platform.pread(fd, min(TAIL_BYTES, end), end - min(TAIL_BYTES, end)) if end else b""
        conn.execute("UPDATE sessions SET dev = ?, ino = ?, seq = ?, mtime_ns = ?, end_byte = ?, lines = ?, tail = ?, "
                     "marked_ns = ? WHERE id = ?",
                     (st.st_dev, st.st_ino, head.seq, st.st_mtime_ns, end, number, tail, marked, sid))
        return _Mark(files, st.st_dev, st.st_ino, head.seq)

    try:
        found = with_transcript_state(root, files, read)
        if conn.in_transaction:
            # None: the file vanished after an attempt that read it, whose work must not stand
            conn.execute("COMMIT" if found is not None else "ROLLBACK")
        return found
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _forget(conn: sqlite3.Connection, sid: int) -> None:
    """Make a session's rows dead (in the caller's transaction). The table keeps no copy of
    a line, and a contentless FTS5 table can only delete a row given its text again: the
    row's trigrams stay in ``texts`` (a search skips them), and its id stays taken (never
    given to another line: ids only grow), until the file is made anew (:func:`drop` then
    :func:`build`: ``jsonl-sessions index build --rebuild``)."""
    conn.execute("UPDATE lines SET session = 0 WHERE session = ?", (sid,))


def _sessions(root: Root, search: MessageSearch | None) -> tuple[list[tuple[SessionFiles, os.stat_result]], set[str]]:
    """The sessions ``search`` looks at (None: all), each with its transcript's ``lstat``, and
    the keys of every session. The sidecars are read only when a filter needs them."""
    if search is not None and (search.agent_alias is not None or search.name is not None):
        everything = list(looks(root))
        return ([(f, lk.transcript) for f, lk in everything if search.wants_session(f.key, lk.meta)],
                {f.key for f, _lk in everything})
    listed = _listing(root.path)
    chosen = []
    for files in listed:
        if search is not None and search.keys is not None and files.key not in search.keys:
            continue
        try:
            st = _platform.lstat(files.transcript)
        except OSError:  # gone meanwhile, or unreadable: as a listing, skipped
            continue
        if stat.S_ISREG(st.st_mode):
            chosen.append((files, st))
    return chosen, {files.key for files in listed}


#: This thread's last listing of each store's directory: ``{root: ((device, inode, mtime),
#: when listed, files)}``.
_LISTED = threading.local()


def _listing(root: str) -> list[SessionFiles]:
    """The files of every session in ``root`` (:func:`~jsonl_sessions.jsonl.layout.scan`),
    the last listing reused while the directory is unchanged: same identity and
    modification time, and that time :data:`RACY_NS` older than the listing (creating,
    removing or renaming a file in it moves its time; one made within a clock tick of the
    listing might not, so a directory changed that recently is listed again). One ``stat``
    instead of a ``scandir`` and the decoding of every name."""
    cache: dict[str, tuple[tuple[int, int, int], int, list[SessionFiles]]] = _LISTED.__dict__.setdefault("roots", {})
    st = _platform.stat_of(root)
    identity = (st.st_dev, st.st_ino, st.st_mtime_ns)
    found = cache.get(root)
    if found is not None and found[0] == identity and st.st_mtime_ns < found[1] - RACY_NS:
        return found[2]
    listed_ns = time.time_ns()  # before the listing: a change after it has a later time
    prefix = os.path.join(root, "")
    files = [SessionFiles.in_dir(prefix, root, key, stem) for key, stem in scan(root)[0]]
    cache[root] = (identity, listed_ns, files)
    return files


def _sync(conn: sqlite3.Connection, root: Root, sessions: list[tuple[SessionFiles, os.stat_result]],
          present: set[str]) -> dict[int, _Mark]:
    """Bring ``sessions`` up to date and drop the indexed sessions not in ``present`` (the
    keys of every existing session); ``{id: mark}`` of those indexed."""
    marks = {key: tuple(rest) for key, *rest in conn.execute(
        "SELECT key, id, dev, ino, seq, mtime_ns, end_byte, marked_ns FROM sessions")}
    gone = [marks[key][0] for key in marks if key not in present]
    if gone:
        conn.execute("BEGIN IMMEDIATE")
        for sid in gone:
            _forget(conn, sid)
            conn.execute("DELETE FROM sessions WHERE id = ?", (sid,))
        conn.execute("COMMIT")
    out: dict[int, _Mark] = {}
    # oldest change first: lines are indexed in about the order of their times (see _Ids)
    for files, st in sorted(sessions, key=lambda item: item[1].st_mtime_ns):
        mark = marks.get(files.key)
        # Unchanged by its look (inode, time, size): current when its time is well before the
        # mark was taken (a later change would carry a later time: as git trusts a file whose
        # time is older than its index), else one read of the counter makes sure (a change
        # of the same size in the same clock tick moves the counter, not the time).
        if mark is not None and mark[1:3] == (st.st_dev, st.st_ino) and mark[4:6] == (st.st_mtime_ns, st.st_size):
            if st.st_mtime_ns < mark[6] - RACY_NS:
                out[mark[0]] = _Mark(files, *mark[1:4])
                continue
            try:
                if read_head(files.lock, key=files.key).seq == mark[3]:
                    out[mark[0]] = _Mark(files, *mark[1:4])
                    continue
            except OSError:
                pass
        try:
            found = _sync_session(conn, root, files)
        except OSError as exc:  # unreadable: not indexed now, searched by nobody (as a scan skips it)
            log.warning("cannot index session %r: %s", files.key, exc)
            continue
        if found is not None:
            out[conn.execute("SELECT id FROM sessions WHERE key = ?", (files.key,)).fetchone()[0]] = found
    return out


def _byte_test(terms: tuple[str, ...]) -> Callable[[bytes], bool]:
    """False only for a line that cannot hold every term, by byte searches
    (:meth:`jsonl_sessions.records.Prefilter.may_hold` of each term)."""
    tests = [records.Prefilter(t).may_hold for t in terms if t]

    def may_hold(line: bytes) -> bool:
        return all(test(line) for test in tests)

    return may_hold


class _Moved(Exception):
    """A transcript changed between bringing the index up to date and reading a candidate."""


class _Transcripts:
    """The transcripts a search reads its candidates from, each opened once and checked to
    be the file its mark describes (device, inode), then the counter read again at the end
    (:meth:`check`): a line read is the line indexed, at the line number indexed."""

    def __init__(self) -> None:
        self._fds: dict[int, tuple[int, _Mark]] = {}

    def line(self, sid: int, mark: _Mark, offset: int, length: int) -> bytes:
        """The ``length`` bytes at ``offset`` of the session's transcript."""
        opened = self._fds.get(sid)
        if opened is None:
            got = mark.files.open_transcript(os.O_RDONLY)
            if got is None:
                raise _Moved(mark.files.key)
            opened = self._fds[sid] = (got[0], mark)
            if (got[1].st_dev, got[1].st_ino) != (mark.dev, mark.ino):
                raise _Moved(mark.files.key)
        return _platform.pread(opened[0], length, offset)

    @staticmethod
    def check_line(mark: _Mark, line: bytes, digest: int) -> None:
        """:class:`_Moved` unless ``line`` is the line indexed (checked for the lines a search
        offers: a candidate ruled out by its bytes is not a hit whatever it was)."""
        if _digest(line) != digest:
            raise _Moved(mark.files.key)

    def check(self) -> None:
        """:class:`_Moved` when a transcript read was changed in place meanwhile (the counter moved)."""
        for _fd, mark in self._fds.values():
            if read_head(mark.files.lock, key=mark.files.key).seq != mark.seq:
                raise _Moved(mark.files.key)

    def close(self) -> None:
        while self._fds:
            _platform.close(self._fds.popitem()[1][0])


# -- the operations ------------------------------------------------------------------------
#: How many times a search brings the index up to date again when a transcript changed
#: under it, before it answers by a scan.
ATTEMPTS = 3


def find_messages(root: Root, search: MessageSearch, collector: Collector) -> bool:
    """Answer ``search`` from the index, brought up to date first; False (nothing offered)
    when there is no index or no term of three characters (the caller scans)."""
    expr = fts.match_expression(search.terms)
    if expr is None or not exists(root.path):
        return False
    rebuilt = False
    for _attempt in range(ATTEMPTS):
        try:
            # it exists (checked above): one that cannot be read is made anew and filled here
            with _opened(root.path, create=True) as conn:
                assert conn is not None
                wanted, present = _sessions(root, search)
                marks = _sync(conn, root, wanted, present)
                part = collector.fork()
                # FTS5 streams the candidates by row id descending without sorting them; the
                # confirmation stops at the first whose bound (see _Ids) cannot make the page.
                # A byte test of the line rules out most trigram matches that hold no term
                # before the line is decoded.
                may_hold = _byte_test(search.terms)
                files = _Transcripts()
                try:
                    for sid, position, offset, length, digest, bound in conn.execute(
                            "SELECT l.session, l.position, l.offset, l.length, l.digest, l.bound FROM texts "
                            "JOIN lines l ON l.id = texts.rowid WHERE texts MATCH ? ORDER BY texts.rowid DESC",
                            (expr,)):
                        if part.past(bound, MAX_INTEGER):
                            break
                        mark = marks.get(sid)
                        if mark is None:  # a dead row, or a session the search does not look at
                            continue
                        line = files.line(sid, mark, offset, length)
                        if may_hold(line):
                            files.check_line(mark, line, digest)
                            part.offer(mark.files.key, position, line, offset)
                    files.check()
                finally:
                    files.close()
            collector.merge(part)
            return True
        except _Moved:  # changed since it was indexed: bring it up to date again
            continue
        except OSError as exc:  # the file cannot be opened or written (permissions): scan
            log.warning("cannot use the search index of %s (%s): searching without it", root.path, exc)
            return False
        except sqlite3.DatabaseError as exc:
            if rebuilt or (isinstance(exc, sqlite3.OperationalError) and "readonly" in str(exc)):
                log.warning("the search index of %s failed (%s): searching without it", root.path, exc)
                return False
            log.warning("the search index of %s is damaged (%s): built again", root.path, exc)
            rebuilt = True
            try:
                close_connections()
                _remove(path_of(root.path))
                build(root)
            except (OSError, sqlite3.DatabaseError) as again:
                log.warning("cannot build the search index of %s again (%s): searching without it", root.path, again)
                return False
    log.warning("the sessions of %s kept changing under the search index: searching without it", root.path)
    return False


# -- building it anew ----------------------------------------------------------------------
#: The SQLite page size of a file made anew (SQLite's default: larger pages made the file
#: bigger and the build no faster; measured in benchmarks/README.md).
PAGE_SIZE = 4096
#: The page cache of a build (KiB): the pages FTS5 merges stay in memory.
CACHE_KIB = 65536
#: A build file (``<index>.build-<pid>``) not written for this long is a killed build's: removed.
STALE_BUILD_NS = 600 * 1_000_000_000


def _build_path(path: str) -> str:
    return f"{path}.build-{os.getpid()}-{threading.get_ident()}"


def _remove_stale_builds(root: str) -> None:
    prefix = INDEX_NAME + ".build-"
    now = time.time_ns()
    for name in _platform.listdir(root):
        if name.startswith(prefix):
            with contextlib.suppress(OSError):
                if now - os.stat(os.path.join(root, name)).st_mtime_ns > STALE_BUILD_NS:
                    os.unlink(os.path.join(root, name))


def _make_anew(root: Root) -> None:
    """Index every session into a new file beside the index's name, then move it into place.

    The new file is private until it is renamed to the index's name, so it is written
    without a journal's syncs (``synchronous=OFF``, the rollback journal in memory) and
    with FTS5's automatic merges off (one ``optimize`` at the end merges its segments
    into one, then a ``VACUUM`` drops the pages they took); then it is fsynced, switched
    to WAL mode, fsynced and renamed into place, and the directory fsynced. A build killed
    before the rename leaves its file and no index, never a part of one: the next build
    removes the file once it is :data:`STALE_BUILD_NS` old. A build never replaces an
    index file (another process may have it open, and SQLite names a WAL file after its
    database): when one was made meanwhile, it stands (the name is taken with a hard link
    when the platform has them, else by a rename only while the name is free)."""
    path = path_of(root.path)
    tmp = _build_path(path)
    _remove(tmp)
    os.close(os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600))
    try:
        conn = sqlite3.connect(tmp, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            conn.execute("PRAGMA journal_mode = MEMORY")
            conn.execute("PRAGMA synchronous = OFF")
            conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
            _make_schema(conn)
            conn.execute("INSERT INTO texts (texts, rank) VALUES ('automerge', 0)")
            _sync(conn, root, *_sessions(root, None))
            conn.execute("INSERT INTO texts (texts) VALUES ('optimize')")
            conn.execute("INSERT INTO texts (texts, rank) VALUES ('automerge', 4)")  # FTS5's default, for updates
            conn.execute("VACUUM")  # the pages of the segments optimize merged: a third of the file
            conn.execute("PRAGMA journal_mode = WAL")
        finally:
            conn.close()
        fd = os.open(tmp, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        try:
            _platform.fsync(fd)
        finally:
            os.close(fd)
        if not os.path.exists(path):
            for leftover in (path + "-wal", path + "-shm", path + "-journal"):  # of a dropped index: not ours
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(leftover)
        try:
            os.link(tmp, path)
        except FileExistsError:  # another build (or search) made one meanwhile: it stands
            pass
        except OSError:  # no hard links here
            if not os.path.exists(path):
                _platform.replace(tmp, path)
        _platform.fsync_dir(root.path)
    finally:
        _remove(tmp)


def build(root: Root) -> Status:
    """Bring the index up to date: made anew (:func:`_make_anew`) when there is none (or it
    cannot be read, or is of another version), else every session brought up to date in
    place (per-session transactions). Dead rows stay: :func:`drop` then :func:`build`
    drops them. Removes the files of killed builds (:data:`STALE_BUILD_NS`)."""
    _remove_stale_builds(root.path)
    with _opened(root.path, create=False) as conn:
        if conn is not None:
            _sync(conn, root, *_sessions(root, None))
            return status(root)
    _make_anew(root)
    return status(root)


def status(root: Root) -> Status:
    """How many sessions and lines the index holds, its size, and how many sessions it is
    behind (each looked at as a search would: O(sessions))."""
    path = path_of(root.path)
    if not os.path.isfile(path):
        return Status(path, False)
    with _opened(root.path, create=False) as conn:
        if conn is None:
            return Status(path, False)
        marks = {key: (dev, ino, mtime, end) for key, dev, ino, mtime, end in conn.execute(
            "SELECT key, dev, ino, mtime_ns, end_byte FROM sessions")}
        dead, total = conn.execute("SELECT count(*) FILTER (WHERE session = 0), count(*) FROM lines").fetchone()
    stale = 0
    keys = set()
    for files, look in looks(root):
        keys.add(files.key)
        st = look.transcript
        if marks.get(files.key) != (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size):
            stale += 1
    stale += len(set(marks) - keys)
    size = sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
    return Status(path, True, len(marks), total - dead, size, stale, dead)


def drop(root: Root) -> bool:
    """Delete the index (a search scans again); whether there was one."""
    had = os.path.exists(path_of(root.path))
    _remove(path_of(root.path))
    return had


__all__ = ["APPLICATION_ID", "INDEX_NAME", "VERSION", "Status", "build", "close_connections", "drop", "exists",
           "find_messages", "path_of", "status"]
