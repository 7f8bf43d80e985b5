"""``jsonl-sessions serve``: the local read-only web viewer (:mod:`jsonl_sessions.viewer`)
over a JSONL directory, a SQLite file or a PostgreSQL store.

The store is opened for reading: a missing one is a usage error (nothing is created), a
PostgreSQL session is read-only on the server's side (``default_transaction_read_only``),
and the viewer only calls read methods. The viewer's dependencies are imported only here,
when the command runs; without them it says how to install them and exits 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import webbrowser
from typing import TYPE_CHECKING

from ..location import resolve_root
from ..protocol import SessionBackend

if TYPE_CHECKING:
    from ..viewer.app import Viewer
from ..display import clean
from .output import EXIT_FAILURE, EXIT_OK, UsageError, err, json_out, out
from .stores import is_sqlite_path, open_path

POSTGRES_PREFIXES = ("postgresql://", "postgres://")


def read_only_dsn(dsn: str) -> str:
    """``dsn`` with ``default_transaction_read_only=on`` added to its server options, so
    PostgreSQL itself refuses any write of the session."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    options = str(conninfo_to_dict(dsn).get("options") or "")
    return make_conninfo(dsn, options=f"{options} -c default_transaction_read_only=on".strip())


def open_for_reading(args: argparse.Namespace) -> tuple[SessionBackend, str]:
    """The store to view and how to name it: ``STORE`` (else ``--root``, else the default
    root), a PostgreSQL DSN (``postgresql://...`` or ``--postgres``), a SQLite file or a
    JSONL directory (``--backend``), which must exist; with ``--from claude-code|codex``,
    that tool's session folder read into memory (:mod:`jsonl_sessions.viewer.foreign`)."""
    where = args.store if args.store is not None else resolve_root(args.root)
    if args.source is not None:
        from ..viewer.foreign import MEMORY_HINT, load_folder

        try:
            return load_folder(args.source, os.path.expanduser(where)), f"{args.source} folder {where}"
        except ImportError:
            raise UsageError(MEMORY_HINT) from None
        except FileNotFoundError as exc:
            raise UsageError(str(exc)) from None
    backend = getattr(args, "backend", "auto")
    if args.postgres or where.startswith(POSTGRES_PREFIXES):
        try:
            from ..postgres import PostgresSessionStore
        except ImportError as exc:
            raise UsageError(str(exc)) from None
        store = PostgresSessionStore(read_only_dsn(where), schema=args.schema, lock_timeout=args.lock_timeout)
        return store, f"PostgreSQL schema {args.schema}"
    path = os.path.abspath(os.path.expanduser(where))
    sqlite = is_sqlite_path(path, backend)
    if not (os.path.isfile(path) if sqlite else os.path.isdir(path)):
        raise UsageError(f"no SQLite store at {path}" if sqlite else f"no store at {path}: not a directory")
    return open_path(path, sqlite=sqlite, lock_timeout=args.lock_timeout), path


def cmd_serve(args: argparse.Namespace) -> int:
    from .. import viewer

    missing = viewer.missing()
    if missing:
        err(f"error: serve needs {', '.join(missing)}; {viewer.INSTALL_HINT}")
        return EXIT_FAILURE
    from ..viewer.app import Viewer
    from ..viewer.server import ViewerServer, serve

    store, name = open_for_reading(args)
    if args.get is not None:
        try:
            return _get(Viewer(store, name), args.get, args.json)
        finally:
            store.close()

    def ready(server: ViewerServer) -> None:
        if args.json:
            json_out({"url": server.url, "store": name})
        else:
            out(f"Serving {clean(name, one_line=True)} (read-only) at:")
            out(f"    {server.url}")
            out("Open that address (it holds this run's token); Ctrl-C stops.")
        sys.stdout.flush()
        if args.open:
            webbrowser.open(server.url)

    try:
        serve(Viewer(store, name), host=args.host, port=args.port, ready=ready)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    except KeyboardInterrupt:
        pass
    finally:
        store.close()
    return EXIT_OK


def _get(viewer: Viewer, target: str, as_json: bool) -> int:
    """``serve --get PATH``: the response to ``GET PATH`` without a server (no token needed:
    nothing listens); the body on stdout, or with ``--json`` one object {"path", "status",
    "content_type", "body"}. Exit status 0 for 200, else 1."""
    from urllib.parse import parse_qs, urlsplit

    if not target.startswith("/"):
        raise UsageError(f"--get takes a path starting with /, not {target!r}")
    parts = urlsplit(target)
    response = viewer.handle(parts.path, parse_qs(parts.query, keep_blank_values=True))
    if as_json:
        json_out({"path": target, "status": response.status, "content_type": response.content_type,
                  "body": response.body.decode("utf-8", "replace")})
    else:
        sys.stdout.buffer.write(response.body)
        sys.stdout.flush()
    return EXIT_OK if response.status == 200 else EXIT_FAILURE
