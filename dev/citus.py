"""A local Citus cluster for development and the tests: a coordinator and two workers.

    python dev/citus.py build            # pgvector + Citus from ../shared/vendor into the cache
    python dev/citus.py start [--data D] # build if missing, then start 3 nodes; prints the URL
    python dev/citus.py stop  [--data D] # stop every node of D by its PID
    python dev/citus.py status [--data D]

``make citus`` and ``make citus-stop`` call it. Nothing of Citus or pgvector is vendored into
the project: their released sources (``../shared/vendor``, or ``$KS_VENDOR``) are checked against
``SHA256SUMS``, built against the machine's PostgreSQL server headers (Debian:
``postgresql-server-dev-15``), and installed — with a copy of that PostgreSQL — into one cache
directory (``$KS_CITUS_CACHE``, default ``~/.cache/knowledge-store/citus``). PostgreSQL finds its
share and library directories relative to its binaries, so the copy runs the extensions from
the cache without writing to the system's directories.

The nodes listen on 127.0.0.1 (coordinator ``--port``, default 9700; workers the next two
ports), trust local connections, and keep their data, sockets and logs under ``--data``
(default ``.ks/citus``). As root, they run as the ``postgres`` system user (PostgreSQL refuses
root). :class:`Cluster` is what the test fixtures use: ``start()`` and ``stop()`` by PID.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITUS = "citus-12.1.12"
PGVECTOR = "pgvector-0.8.6"
PG_MAJOR = "15"
SYSTEM_PG = Path(f"/usr/lib/postgresql/{PG_MAJOR}")
SYSTEM_SHARE = Path(f"/usr/share/postgresql/{PG_MAJOR}")
APT_PACKAGES = (
    f"postgresql-{PG_MAJOR} postgresql-server-dev-{PG_MAJOR} libcurl4-openssl-dev"
    " liblz4-dev libzstd-dev libkrb5-dev"
)
DEFAULT_PORT = 9700
WORKERS = 2
DATABASE = "ks"
USER = "postgres"


class ClusterError(RuntimeError):
    """The cluster could not be built, started or stopped; the message says why and what to do."""


def vendor_dir() -> Path:
    return Path(os.environ.get("KS_VENDOR") or ROOT.parent / "shared" / "vendor")


def cache_dir() -> Path:
    base = os.environ.get("KS_CITUS_CACHE") or Path.home() / ".cache" / "knowledge-store" / "citus"
    return Path(base) / f"{CITUS}-{PGVECTOR}-pg{PG_MAJOR}"


def bin_dir() -> Path:
    return cache_dir() / "usr" / "lib" / "postgresql" / PG_MAJOR / "bin"


def _stamp() -> Path:
    return cache_dir() / "BUILT"


def _checked_tarballs() -> dict[str, Path]:
    """The two tarballs, each checked against the vendor directory's SHA256SUMS."""
    vendor = vendor_dir()
    sums_file = vendor / "SHA256SUMS"
    if not sums_file.is_file():
        raise ClusterError(f"{sums_file} is missing: set KS_VENDOR to the vendored sources")
    sums = {}
    for line in sums_file.read_text().splitlines():
        digest, _, name = line.strip().partition("  ")
        sums[name] = digest
    tarballs = {}
    for name in (CITUS, PGVECTOR):
        path = vendor / f"{name}.tar.gz"
        expected = sums.get(path.name)
        if expected is None:
            raise ClusterError(f"{sums_file} has no checksum for {path.name}")
        actual = hashlib.sha256(path.read_bytes()).hexdigest()
        if actual != expected:
            raise ClusterError(f"{path} has sha256 {actual}, SHA256SUMS says {expected}")
        tarballs[name] = path
    return tarballs


def built() -> bool:
    return _stamp().is_file() and (bin_dir() / "postgres").is_file()


def build(*, log: Path | None = None) -> Path:
    """Build pgvector and Citus into the cache (once); the cache directory."""
    if built():
        return cache_dir()
    pg_config = SYSTEM_PG / "bin" / "pg_config"
    if not pg_config.is_file() or not (SYSTEM_PG / "lib" / "pgxs").is_dir():
        raise ClusterError(
            f"building Citus needs PostgreSQL {PG_MAJOR} with its server headers:"
            f" apt-get install -y {APT_PACKAGES}"
        )
    tarballs = _checked_tarballs()
    target = cache_dir()
    staging = Path(tempfile.mkdtemp(prefix="ks-citus-build-"))
    out = log or staging / "build.log"
    started = time.monotonic()
    try:
        with out.open("w") as sink:

            def run(args: Sequence[str], cwd: Path) -> None:
                print("+", " ".join(args), file=sink, flush=True)
                done = subprocess.run(args, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT)
                if done.returncode:
                    raise ClusterError(f"{' '.join(args)} failed in {cwd}; its output is in {out}")

            for path in tarballs.values():
                with tarfile.open(path) as archive:
                    archive.extractall(staging, filter="data")
                print(f"extracted {path.name}", file=sink, flush=True)
            stage = staging / "stage"
            config = f"PG_CONFIG={pg_config}"
            vector = staging / PGVECTOR
            run(["make", "-s", "-j2", config, "OPTFLAGS="], vector)
            run(["make", "-s", "install", config, f"DESTDIR={stage}"], vector)
            citus = staging / CITUS
            run(["./configure", "-q", config, "--without-libcurl"], citus)
            run(["make", "-s", "-j2"], citus)
            run(["make", "-s", "install", f"DESTDIR={stage}"], citus)
            fresh = target.with_name(target.name + ".tmp")
            shutil.rmtree(fresh, ignore_errors=True)
            (fresh / "usr" / "lib" / "postgresql").mkdir(parents=True)
            (fresh / "usr" / "share" / "postgresql").mkdir(parents=True)
            shutil.copytree(
                SYSTEM_PG, fresh / "usr" / "lib" / "postgresql" / PG_MAJOR, symlinks=True
            )
            shutil.copytree(
                SYSTEM_SHARE, fresh / "usr" / "share" / "postgresql" / PG_MAJOR, symlinks=True
            )
            shutil.copytree(stage / "usr", fresh / "usr", symlinks=True, dirs_exist_ok=True)
            seconds = time.monotonic() - started
            (fresh / "BUILT").write_text(
                f"{CITUS} {PGVECTOR} pg{PG_MAJOR} built in {seconds:.0f} s\n"
            )
            shutil.rmtree(target, ignore_errors=True)
            fresh.rename(target)
    finally:
        if log is None and out.exists():
            kept = target.parent / "last-build.log"
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(out, kept)
        shutil.rmtree(staging, ignore_errors=True)
    return target


@dataclass(frozen=True)
class Node:
    name: str
    port: int
    data: Path

    @property
    def pgdata(self) -> Path:
        return self.data / self.name

    def pid(self) -> int | None:
        """The postmaster's PID from its postmaster.pid, when that process is alive."""
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        return pid


class Cluster:
    """A coordinator and ``WORKERS`` workers on 127.0.0.1, under one data directory."""

    def __init__(self, data: str | Path, port: int = DEFAULT_PORT) -> None:
        self.data = Path(data).resolve()
        self.port = port
        self.nodes = [Node("coordinator", port, self.data)] + [
            Node(f"worker{i}", port + i, self.data) for i in range(1, WORKERS + 1)
        ]

    @property
    def coordinator(self) -> Node:
        return self.nodes[0]

    @property
    def workers(self) -> list[Node]:
        return self.nodes[1:]

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    # -- running as the postgres system user when we are root ---------------------------------

    def _run(self, args: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = list(args)
        if os.geteuid() == 0:
            command = ["runuser", "-u", USER, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True)
        if check and done.returncode:
            raise ClusterError(f"{' '.join(args)} failed: {done.stderr.strip() or done.stdout}")
        return done

    def _own(self, path: Path) -> None:
        if os.geteuid() == 0:
            entry = pwd.getpwnam(USER)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    # -- lifecycle ----------------------------------------------------------------------------

    def _init(self, node: Node) -> None:
        if (node.pgdata / "PG_VERSION").is_file():
            return
        node.pgdata.mkdir(parents=True, exist_ok=True)
        self._own(node.pgdata)
        self._run([str(bin_dir() / "initdb"), "-D", str(node.pgdata), "-U", USER,
                   "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"])  # fmt: skip
        settings = {
            "port": str(node.port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{node.pgdata}'",
            "shared_preload_libraries": "'citus'",
            "max_connections": "200",
            "shared_buffers": "128MB",
            "max_worker_processes": "32",
            "wal_level": "logical",  # the shard rebalancer moves shards by logical replication
            "max_wal_senders": "20",
            "max_replication_slots": "20",
            "citus.shard_count": "8",
            "logging_collector": "off",
            "fsync": "off" if os.environ.get("KS_CITUS_FSYNC") == "off" else "on",
        }
        with (node.pgdata / "postgresql.conf").open("a") as conf:
            conf.write("\n# knowledge-store dev/citus.py\n")
            for key, value in settings.items():
                conf.write(f"{key} = {value}\n")

    def _start_node(self, node: Node) -> None:
        if node.pid() is not None:
            return
        log = node.data / f"{node.name}.log"
        log.touch()
        self._own(log)
        self._run([str(bin_dir() / "pg_ctl"), "-D", str(node.pgdata), "-l", str(log),
                   "-w", "-t", "60", "start"])  # fmt: skip

    def start(self) -> str:
        """Build if needed, start every node, join the workers; the coordinator's URL."""
        build()
        self.data.mkdir(parents=True, exist_ok=True)
        self._own(self.data)
        fresh = not (self.coordinator.pgdata / "PG_VERSION").is_file()
        try:
            for node in self.nodes:
                self._init(node)
            for node in self.nodes:
                self._start_node(node)
            if fresh:
                self._join()
        except BaseException:
            self.stop()
            raise
        return self.url()

    def _psql(self, node: Node, sql: str, database: str = DATABASE) -> str:
        done = self._run([str(bin_dir() / "psql"), "-h", "127.0.0.1", "-p", str(node.port),
                          "-U", USER, "-d", database, "-v", "ON_ERROR_STOP=1", "-qAtc", sql])  # fmt: skip
        return done.stdout.strip()

    def _join(self) -> None:
        for node in self.nodes:
            self._psql(node, f"CREATE DATABASE {DATABASE}", database="postgres")
            self._psql(node, "CREATE EXTENSION IF NOT EXISTS citus")
            self._psql(node, "CREATE EXTENSION IF NOT EXISTS vector")
        self._psql(self.coordinator, f"SELECT citus_set_coordinator_host('127.0.0.1', {self.port})")
        for worker in self.workers:
            self._psql(self.coordinator, f"SELECT citus_add_node('127.0.0.1', {worker.port})")

    def add_worker(self) -> Node:
        """One more worker, started and added to the cluster (for rebalancing)."""
        node = Node(f"worker{len(self.nodes)}", self.port + len(self.nodes), self.data)
        self._init(node)
        self._start_node(node)
        self._psql(node, f"CREATE DATABASE {DATABASE}", database="postgres")
        self._psql(node, "CREATE EXTENSION IF NOT EXISTS citus")
        self._psql(node, "CREATE EXTENSION IF NOT EXISTS vector")
        self._psql(self.coordinator, f"SELECT citus_add_node('127.0.0.1', {node.port})")
        self.nodes.append(node)
        return node

    def stop_node(self, node: Node, *, mode: str = "fast") -> None:
        pid = node.pid()
        if pid is None:
            return
        done = self._run([str(bin_dir() / "pg_ctl"), "-D", str(node.pgdata), "-m", mode,
                          "-w", "-t", "30", "stop"], check=False)  # fmt: skip
        if done.returncode and node.pid() is not None:
            os.kill(pid, signal.SIGKILL)  # the postmaster; its children exit with it
            _wait_gone(pid)

    def start_node(self, node: Node) -> None:
        self._start_node(node)

    def stop(self) -> None:
        """Stop every node under the data directory by its PID (also those added later)."""
        nodes = {node.pgdata: node for node in self.nodes}
        if self.data.is_dir():
            for pgdata in sorted(self.data.iterdir()):
                if (pgdata / "PG_VERSION").is_file() and pgdata not in nodes:
                    nodes[pgdata] = Node(pgdata.name, 0, self.data)
        for node in nodes.values():
            self.stop_node(node)

    def running(self) -> dict[str, int | None]:
        return {node.name: node.pid() for node in self.nodes}


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


@contextmanager
def running_cluster(data: str | Path, port: int = DEFAULT_PORT) -> Iterator[Cluster]:
    """A cluster started for the block and stopped by PID after it, whatever happened."""
    cluster = Cluster(data, port)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dev/citus.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["build", "start", "stop", "status"])
    parser.add_argument("--data", default=str(ROOT / ".ks" / "citus"), help="the nodes' directory")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="the coordinator's port")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            started = time.monotonic()
            was_built = built()
            where = build()
            note = "already built" if was_built else f"built in {time.monotonic() - started:.0f} s"
            print(f"{CITUS} and {PGVECTOR} for PostgreSQL {PG_MAJOR}: {where} ({note})")
            return 0
        cluster = Cluster(args.data, args.port)
        if args.command == "start":
            started = time.monotonic()
            url = cluster.start()
            print(f"Citus: a coordinator and {WORKERS} workers under {cluster.data}"
                  f" (started in {time.monotonic() - started:.1f} s)")  # fmt: skip
            print(f"  ks --store '{url}' stats     ·  stop: make citus-stop")
            print(url)
            return 0
        if args.command == "stop":
            started = time.monotonic()
            cluster.stop()
            print(f"stopped every node under {cluster.data} ({time.monotonic() - started:.1f} s)")
            return 0
        for name, pid in cluster.running().items():
            print(f"{name:12} {'running, pid ' + str(pid) if pid else 'stopped'}")
        return 0
    except ClusterError as exc:
        print(f"dev/citus.py {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
