"""``pg:DIR``: a local PostgreSQL 16 + pgvector started with pgserver, for people without a server.

The data directory is ``DIR/pgdata``; the server listens on a Unix socket only.
Lifetime: pgserver counts the processes that use the directory; the **last
one to exit stops the server** (``pg_ctl stop``, a clean shutdown), so a
``ks --store pg:DIR …`` command leaves nothing running, a ``ks serve`` keeps it
up while it serves, and concurrent commands share one server. ``keep_running``
leaves it running after exit (``ks`` sets it from ``KS_PG_KEEP_RUNNING=1``; the
next command then connects in milliseconds instead of starting it, ~1 s).
"""

from __future__ import annotations

import warnings
from pathlib import Path

from knowledge_store.errors import StoreError

__all__ = ["local_server_url"]


def local_server_url(directory: str | Path, *, keep_running: bool = False) -> str:
    """Start (or reuse) the local server of ``directory``; its connection URL."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR at import
        try:
            from pgserver.postgres_server import get_server
        except ImportError as exc:  # pragma: no cover - the extra is installed in dev
            raise StoreError(
                "pg:DIR needs pgserver; install the postgres extra:"
                " pip install 'knowledge-store[postgres]'"
            ) from exc
    root = Path(directory).expanduser().resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = get_server(root / "pgdata", cleanup_mode=None if keep_running else "stop")
        return str(server.get_uri())
    except Exception as exc:  # pgserver raises bare subprocess/OS errors
        raise StoreError(
            f"cannot start the local PostgreSQL server in {root}: {exc}"
            f" (its log is {root / 'pgdata' / 'log'})"
        ) from exc
