"""A throwaway PostgreSQL server for tests and benchmarks (``jsonl_sessions.testing.pgserver``).

:class:`TempCluster` makes a new cluster in a temporary directory with ``initdb
--no-sync``, starts it with ``pg_ctl -w`` listening on a Unix socket only (a socket
directory inside the temporary directory, ``listen_addresses=''``: nothing on the network),
and stops and removes it again. Run as root, the server runs as the ``postgres`` OS user
(``initdb`` refuses root) and the directory is handed to that user. The binaries are
found through ``pg_config --bindir``, then Debian's ``/usr/lib/postgresql/<version>/bin``,
then ``PATH``.

``dsn`` is a libpq connection string for the superuser ``postgres`` (trust auth on the
socket: the socket directory is reachable only by this machine's users).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Self


def find_bindir() -> str | None:
    """The directory holding ``initdb`` and ``pg_ctl``; None when PostgreSQL is not installed."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
        if os.path.exists(os.path.join(out, "initdb")):
            return out
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]) if
                   p.split("/")[4].isdigit() else 0)
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return None if initdb is None else os.path.dirname(os.path.realpath(initdb))


class TempCluster:
    """A PostgreSQL cluster in a temporary directory; :meth:`start`, :meth:`stop`,
    :meth:`restart`, :meth:`destroy` (a context manager does start and destroy)."""

    def __init__(self, *, bindir: str | None = None, fsync: bool = True) -> None:
        found = bindir or find_bindir()
        if found is None:
            raise FileNotFoundError("PostgreSQL is not installed (no initdb): apt-get install postgresql")
        self.bindir = found
        self.fsync = fsync
        self.dir = tempfile.mkdtemp(prefix="jsonl-pg-")
        self.data = os.path.join(self.dir, "data")
        self.sockets = os.path.join(self.dir, "run")
        self.log = os.path.join(self.dir, "server.log")
        self._user = "postgres" if os.geteuid() == 0 else None
        os.mkdir(self.sockets, 0o700)
        if self._user is not None:
            import pwd

            entry = pwd.getpwnam(self._user)
            for path in (self.dir, self.sockets):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "--no-sync", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-locale")
        with open(os.path.join(self.data, "postgresql.conf"), "a", encoding="utf-8") as f:
            f.write(f"\nlisten_addresses = ''\nunix_socket_directories = '{self.sockets}'\n"
                    f"fsync = {'on' if fsync else 'off'}\nmax_connections = 200\n")

    @property
    def dsn(self) -> str:
        return f"host={self.sockets} user=postgres dbname=postgres"

    def _run(self, tool: str, *args: str) -> None:
        proc = subprocess.run([os.path.join(self.bindir, tool), *args], capture_output=True, text=True,
                              user=self._user, cwd=self.dir, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{tool} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")

    def start(self) -> None:
        self._run("pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m mode`` (``immediate``: like a crash, recovery at the next start)."""
        self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def destroy(self) -> None:
        """Stop the server if it runs and remove the directory."""
        with contextlib.suppress(RuntimeError):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


@contextlib.contextmanager
def temp_cluster(*, fsync: bool = True) -> Iterator[TempCluster]:
    """A started :class:`TempCluster`, destroyed when the block ends."""
    cluster = TempCluster(fsync=fsync)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


__all__ = ["TempCluster", "find_bindir", "temp_cluster"]
