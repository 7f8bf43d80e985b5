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
file) is indexed again from the start. Sessions that no longer exist are dropped from it.
Only complete lines up to the committed end are indexed (a torn tail never is).

**Crashes.** The file is in WAL mode; each session's update (rows and mark) is one
transaction, so a process killed in the middle of an update leaves every session at its
old or its new mark, both consistent: the next search goes on from there. A file that is
not such an index (another version, damage) is deleted and built again.

Each line is stored once in the index (the candidate a search confirms comes from there);
the FTS5 table is contentless (it keeps the trigrams of each line's casefolded text, not
the text: a text is deleted by folding the same line again, which the Unicode version the
file records guarantees; another version makes the file anew). Lines that are not
messages or have no text are not indexed. Row ids follow ``created_at`` (:func:`_row_ids`),
so FTS5 gives candidates newest first and a search stops once its page is full. A file
this process cannot open or write is left alone, and the search scans.

Cost of a search: an ``lstat`` of each session it looks at (the control file is read only
for a transcript changed within :data:`RACY_NS` of its mark; sidecars only when the search
filters by alias or name), the new lines of changed sessions, then the FTS5 query and the
candidates it returns, newest first, until the page is full.
"""

from __future__ import annotations

import contextlib
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
from ..rows import created_column
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
VERSION = 6
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
    ("CREATE TABLE lines (id INTEGER PRIMARY KEY, session INTEGER NOT NULL, position INTEGER NOT NULL, "
     "created_at INTEGER, line BLOB NOT NULL)"),
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


def _remove(path: str) -> None:
    for name in (path, path + "-wal", path + "-shm", path + "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


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
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    conn.execute("INSERT INTO meta VALUES (?)", (unicodedata.unidata_version,))
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    conn.execute(f"PRAGMA user_version = {VERSION}")
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


# -- row ids in time order ----------------------------------------------------------------
#: A row id is ``second << _K_BITS | k`` (``second``: ``created_at // 1000``; k: a free
#: slot of that second, or the next free id above when its slots are taken), so that FTS5
#: returns candidates newest first by reading its row ids backwards, and ids stay dense
#: (FTS5 stores the gaps between them). A row's id never claims an earlier time than its
#: own: :func:`_latest` of an id is at or after the ``created_at`` of its row, so stopping
#: at the first id whose time cannot make the page is safe. Times from 0 to ``_TOP``
#: seconds (the year 2500) are exact; later ones share the top (ties keep the search
#: going); a message without a time or before 1970 gets a negative id (read last, never
#: a reason to stop).
_K_BITS = 8
_TOP = (1 << 35) - 1
_NEGATIVE = -1  # the key of the negative ids in _row_ids' cache


def _latest(rowid: int) -> int:
    """The latest ``created_at`` (ms) a row with this (non-negative) id can have."""
    return ((rowid >> _K_BITS) + 1) * 1000 - 1


def _row_ids(conn: sqlite3.Connection, times: list[int | None]) -> list[int]:
    """A free row id for a line created at each of ``times``."""
    out: list[int] = []
    used: set[int] = set()
    last: dict[int, int] = {}  # base of a second (or _NEGATIVE) -> the last id taken from it
    for created in times:
        if created is None or created < 0:
            if _NEGATIVE not in last:
                row = conn.execute("SELECT min(id) FROM lines WHERE id < 0").fetchone()
                last[_NEGATIVE] = row[0] if row[0] is not None else 0
            rowid = last[_NEGATIVE] = last[_NEGATIVE] - 1  # downwards from -1
            out.append(rowid)
            continue
        base = min(created // 1000, _TOP) << _K_BITS
        if base not in last:
            row = conn.execute("SELECT max(id) FROM lines WHERE id BETWEEN ? AND ?",
                               (base, base | ((1 << _K_BITS) - 1))).fetchone()
            last[base] = row[0] if row[0] is not None else base - 1
        rowid = last[base] + 1
        while rowid in used or (rowid > base | ((1 << _K_BITS) - 1)
                                and conn.execute("SELECT 1 FROM lines WHERE id = ?", (rowid,)).fetchone()):
            rowid += 1  # past its second's slots: the next free id (a later second's: never earlier)
        last[base] = rowid
        used.add(rowid)
        out.append(rowid)
    return out


# -- keeping it current ------------------------------------------------------------------
def _current(mark: tuple[int, ...] | None, st: os.stat_result, size: int, head: Head) -> bool:
    return mark is not None and mark[1:6] == (st.st_dev, st.st_ino, head.seq, st.st_mtime_ns, size)


def _sync_session(conn: sqlite3.Connection, root: Root, files: SessionFiles) -> int | None:
    """Bring one session up to its committed end; its id in the index (None: it vanished).
    One transaction, begun again when the read must be retried (the file changed in place
    during it)."""

    def read(fd: int, size: int, st: os.stat_result, head: Head) -> int:
        marked = time.time_ns()  # before this read: a change after it has a later time
        if conn.in_transaction:  # an earlier attempt of this read: start over
            conn.execute("ROLLBACK")
        conn.execute("BEGIN IMMEDIATE")
        mark = conn.execute("SELECT id, dev, ino, seq, mtime_ns, end_byte, lines, tail FROM sessions WHERE key = ?",
                            (files.key,)).fetchone()
        if _current(mark, st, size, head):
            return int(mark[0])
        start = number = 0
        if mark is not None:
            sid = int(mark[0])
            end, lines, tail = mark[5], mark[6], mark[7]
            if (mark[1:4] == (st.st_dev, st.st_ino, head.seq) and end <= size
                    and _platform.pread(fd, len(tail), end - len(tail)) == tail):
                start, number = end, lines  # it grew: index the new lines
            else:
                _forget(conn, sid)
        else:
            sid = int(conn.execute("INSERT INTO sessions (key, dev, ino, seq, mtime_ns, end_byte, lines, tail) "
                                   "VALUES (?, 0, 0, 0, 0, 0, 0, x'')", (files.key,)).lastrowid or 0)
        end = start
        for at, block, stop in line_blocks(fd, size, first=start):
            pos = len(BOM) if at == 0 and block.startswith(BOM) else 0
            rows: list[tuple[int, int, int | None, bytes]] = []
            texts: list[str] = []
            while pos < stop:
                nl = block.index(b"\n", pos)
                line = block[pos:nl]
                found = fts.indexed(line)
                if found is not None:
                    rows.append((sid, number, created_column(found[0]), line))
                    texts.append(found[1])
                number += 1
                pos = nl + 1
            end = at + stop
            if rows:
                ids = _row_ids(conn, [row[2] for row in rows])
                conn.executemany("INSERT INTO lines (id, session, position, created_at, line) VALUES (?, ?, ?, ?, ?)",
                                 [(rowid, *row) for rowid, row in zip(ids, rows)])
                conn.executemany("INSERT INTO texts (rowid, folded) VALUES (?, ?)", zip(ids, texts))
        tail = _platform.pread(fd, min(TAIL_BYTES, end), end - min(TAIL_BYTES, end)) if end else b""
        conn.execute("UPDATE sessions SET dev = ?, ino = ?, seq = ?, mtime_ns = ?, end_byte = ?, lines = ?, tail = ?, "
                     "marked_ns = ? WHERE id = ?",
                     (st.st_dev, st.st_ino, head.seq, st.st_mtime_ns, end, number, tail, marked, sid))
        return sid

    try:
        sid = with_transcript_state(root, files, read)
        if conn.in_transaction:
            # None: the file vanished after an attempt that read it, whose work must not stand
            conn.execute("COMMIT" if sid is not None else "ROLLBACK")
        return sid
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _forget(conn: sqlite3.Connection, sid: int) -> None:
    """Remove a session's lines and their texts (in the caller's transaction). The table
    keeps no copy of a text: each is deleted by giving it again (the same folding of the
    same line, guaranteed by the Unicode version the file records)."""
    rows = conn.execute("SELECT id, line FROM lines WHERE session = ?", (sid,)).fetchall()
    conn.executemany("INSERT INTO texts (texts, rowid, folded) VALUES ('delete', ?, ?)",
                     [(rowid, fts.folded_text(line)) for rowid, line in rows])
    conn.execute("DELETE FROM lines WHERE session = ?", (sid,))


def _sessions(root: Root, search: MessageSearch | None) -> tuple[list[tuple[SessionFiles, os.stat_result]], set[str]]:
    """The sessions ``search`` looks at (None: all), each with its transcript's ``lstat``, and
    the keys of every session. The sidecars are read only when a filter needs them."""
    if search is not None and (search.agent_alias is not None or search.name is not None):
        everything = list(looks(root))
        return ([(f, lk.transcript) for f, lk in everything if search.wants_session(f.key, lk.meta)],
                {f.key for f, _lk in everything})
    entries, _controls = scan(root.path)
    prefix = os.path.join(root.path, "")
    chosen = []
    for key, stem in entries:
        if search is not None and search.keys is not None and key not in search.keys:
            continue
        files = SessionFiles.in_dir(prefix, root.path, key, stem)
        try:
            st = _platform.lstat(files.transcript)
        except OSError:  # gone meanwhile, or unreadable: as a listing, skipped
            continue
        if stat.S_ISREG(st.st_mode):
            chosen.append((files, st))
    return chosen, {key for key, _stem in entries}


def _sync(conn: sqlite3.Connection, root: Root, sessions: list[tuple[SessionFiles, os.stat_result]],
          present: set[str]) -> dict[int, str]:
    """Bring ``sessions`` up to date and drop the indexed sessions not in ``present`` (the
    keys of every existing session); ``{id: key}`` of those indexed."""
    marks = {key: tuple(rest) for key, *rest in conn.execute(
        "SELECT key, id, dev, ino, seq, mtime_ns, end_byte, marked_ns FROM sessions")}
    gone = [marks[key][0] for key in marks if key not in present]
    if gone:
        conn.execute("BEGIN IMMEDIATE")
        for sid in gone:
            _forget(conn, sid)
            conn.execute("DELETE FROM sessions WHERE id = ?", (sid,))
        conn.execute("COMMIT")
    out: dict[int, str] = {}
    for files, st in sessions:
        mark = marks.get(files.key)
        # Unchanged by its look (inode, time, size): current when its time is well before the
        # mark was taken (a later change would carry a later time: as git trusts a file whose
        # time is older than its index), else one read of the counter makes sure (a change
        # of the same size in the same clock tick moves the counter, not the time).
        if mark is not None and mark[1:3] == (st.st_dev, st.st_ino) and mark[4:6] == (st.st_mtime_ns, st.st_size):
            if st.st_mtime_ns < mark[6] - RACY_NS:
                out[mark[0]] = files.key
                continue
            try:
                if read_head(files.lock, key=files.key).seq == mark[3]:
                    out[mark[0]] = files.key
                    continue
            except OSError:
                pass
        try:
            sid = _sync_session(conn, root, files)
        except OSError as exc:  # unreadable: not indexed now, searched by nobody (as a scan skips it)
            log.warning("cannot index session %r: %s", files.key, exc)
            continue
        if sid is not None:
            out[sid] = files.key
    return out


def _byte_test(terms: tuple[str, ...]) -> Callable[[bytes], bool]:
    """False only for a line that cannot hold every term, by byte searches
    (:meth:`jsonl_sessions.records.Prefilter.may_hold` of each term)."""
    tests = [records.Prefilter(t).may_hold for t in terms if t]

    def may_hold(line: bytes) -> bool:
        return all(test(line) for test in tests)

    return may_hold


# -- the operations ------------------------------------------------------------------------
def find_messages(root: Root, search: MessageSearch, collector: Collector) -> bool:
    """Answer ``search`` from the index, brought up to date first; False (nothing offered)
    when there is no index or no term of three characters (the caller scans)."""
    expr = fts.match_expression(search.terms)
    if expr is None or not exists(root.path):
        return False
    for attempt in range(2):
        try:
            # it exists (checked above): one that cannot be read is made anew and filled here
            with _opened(root.path, create=True) as conn:
                assert conn is not None
                wanted, present = _sessions(root, search)
                ids = _sync(conn, root, wanted, present)
                part = collector.fork()
                # Row ids follow created_at (see _row_ids): FTS5 streams the candidates newest
                # first without sorting them, and the confirmation stops once no later one can
                # make the page. A byte test of the line rules out most trigram matches that
                # hold no term before the line is decoded.
                may_hold = _byte_test(search.terms)
                fetch = conn.cursor()
                for (rowid,) in conn.execute("SELECT rowid FROM texts WHERE texts MATCH ? ORDER BY rowid DESC",
                                             (expr,)):
                    if rowid >= 0 and part.past(_latest(rowid), _latest(_TOP << _K_BITS)):
                        break
                    sid, position, line = fetch.execute("SELECT session, position, line FROM lines WHERE id = ?",
                                                        (rowid,)).fetchone()
                    key = ids.get(sid)
                    if key is not None and may_hold(line):
                        part.offer(key, position, line)
            collector.merge(part)
            return True
        except OSError as exc:  # the file cannot be opened or written (permissions): scan
            log.warning("cannot use the search index of %s (%s): searching without it", root.path, exc)
            return False
        except sqlite3.DatabaseError as exc:
            if attempt or (isinstance(exc, sqlite3.OperationalError) and "readonly" in str(exc)):
                log.warning("the search index of %s failed (%s): searching without it", root.path, exc)
                return False
            log.warning("the search index of %s is damaged (%s): built again", root.path, exc)
            try:
                _remove(path_of(root.path))
                build(root)
            except (OSError, sqlite3.DatabaseError) as again:
                log.warning("cannot build the search index of %s again (%s): searching without it", root.path, again)
                return False
    return False


def build(root: Root) -> Status:
    """Create the index when missing (or unreadable) and bring every session up to date."""
    with _opened(root.path, create=True) as conn:
        assert conn is not None
        _sync(conn, root, *_sessions(root, None))
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
        lines = conn.execute("SELECT count(*) FROM lines").fetchone()[0]
    stale = 0
    keys = set()
    for files, look in looks(root):
        keys.add(files.key)
        st = look.transcript
        if marks.get(files.key) != (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size):
            stale += 1
    stale += len(set(marks) - keys)
    size = sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
    return Status(path, True, len(marks), lines, size, stale)


def drop(root: Root) -> bool:
    """Delete the index (a search scans again); whether there was one."""
    had = os.path.exists(path_of(root.path))
    _remove(path_of(root.path))
    return had


__all__ = ["APPLICATION_ID", "INDEX_NAME", "VERSION", "Status", "build", "close_connections", "drop", "exists",
           "find_messages", "path_of", "status"]
