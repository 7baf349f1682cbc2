"""Shared fixtures: the engine under test, the embedders, fresh stores, a small estate.

``engine`` is parametrised over both engines for every test that uses a store
(``store``, ``estate_store``, or a module's estate opened with
:meth:`EngineUnderTest.location`). A test, class or module marked
``embedded_only(reason=…)`` runs on the embedded engine alone — the reason says
why (it reads SQLite or Tantivy directly, or it tests a surface over the store,
not the engine). Nothing is deselected behind the reader's back.

``embedder`` is deterministic feature hashing (``hash:384``, STYLE 17): the
tests that use it are about permissions, SQL, graphs, surfaces or storage, and
texts that share words are near each other, which is all they need of vectors.
``real_embedder`` is the real model (memoised); a test that uses it — or that
runs the default model another way, e.g. ``ks`` in a subprocess on a store of
the default model — is marked ``real_model(reason=…)``, the reason saying what
of the model it measures. ``pytest -m real_model`` lists them; a test that asks
for ``real_embedder`` without the mark is a collection error.
"""

from __future__ import annotations

import itertools
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
#: This test run, named before any xdist worker starts (they inherit it): the PostgreSQL
#: servers it starts live in directories named after it, which the run sweeps at its end.
os.environ.setdefault("KS_TEST_RUN", uuid.uuid4().hex[:12])
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from knowledge_store.ingest.embedding import Embedder, open_embedder
from knowledge_store.store import KnowledgeStore

#: The suite's embedder where vectors are not what a test measures (see the module docstring).
HASH_SPEC = "hash:384"

#: ``ks`` and the servers the suite runs (in-process or as subprocesses) make new stores with
#: the hashing embedder too; a ``real_model`` test that runs them drops this from its env.
os.environ["KS_EMBEDDER"] = HASH_SPEC

#: query_graph's bound is wall-clock time (250 ms), and a loaded CI machine has paused a 3 ms
#: statement past it: ``ks`` and the servers the suite runs answer under a 30 s bound. The
#: bound itself is tested on engines opened without the environment (graphquery/test_timeout.py,
#: test_bounds.py, conformance/test_postgres_engine.py).
os.environ["KS_GRAPH_TIME_LIMIT_MS"] = "30000"

ESTATE: list[dict[str, Any]] = [
    {
        "uid": "guide:vacuum",
        "type": "page",
        "title": "Routine Vacuuming",
        "body": "# Routine Vacuuming\n\nVACUUM reclaims storage occupied by dead tuples.\n\n"
        "## Autovacuum\n\nThe autovacuum daemon automates VACUUM and ANALYZE.\n\n"
        "```sql\nVACUUM (VERBOSE, ANALYZE) orders;\n```\n",
        "source": "docs",
        "status": "published",
        "created_at": "2024-01-10",
        "updated_at": "2024-03-01",
        "acl": ["everyone"],
        "edges": [{"label": "partOf", "to": "guide:admin", "position": 2}],
    },
    {
        "uid": "guide:admin",
        "type": "chapter",
        "title": "Server Administration",
        "body": "# Server Administration\n\nHow to run, tune and maintain a database server.",
        "source": "docs",
        "status": "published",
        "created_at": "2024-01-01",
        "updated_at": "2024-01-02",
        "acl": ["everyone"],
    },
    {
        "uid": "guide:monitoring",
        "type": "page",
        "title": "Monitoring Database Activity",
        "body": "# Monitoring Database Activity\n\nThe view pg_stat_activity shows one row per"
        " server process, with its current query and state.",
        "source": "docs",
        "status": "published",
        "created_at": "2024-02-01",
        "updated_at": "2024-02-15",
        "acl": ["everyone"],
        "edges": [
            {"label": "partOf", "to": "guide:admin", "position": 1},
            {"label": "xref", "to": "guide:vacuum"},
        ],
    },
    {
        "uid": "ticket:1042",
        "type": "ticket",
        "title": "Replica lag alert",
        "body": "Error ERR-1042: the standby replica falls behind the primary during bulk loads.",
        "source": "tickets",
        "status": "open",
        "created_at": "2024-05-03",
        "updated_at": "2024-05-04",
        "acl": ["group:sre"],
        "edges": [{"label": "xref", "to": "guide:monitoring"}],
    },
    {
        "uid": "ticket:2001",
        "type": "ticket",
        "title": "Payroll export secrets",
        "body": "The payroll export job stores salary figures; restricted to finance.",
        "source": "tickets",
        "status": "closed",
        "created_at": "2024-06-01",
        "updated_at": "2024-06-02",
        "acl": ["group:finance"],
    },
]


ENGINES = ("embedded", "postgres")

#: No hypothesis deadlines: speed is measured in bench/, and a loaded machine (or a second
#: xdist worker) once stretched a 0.06 ms example of a pure function past the 200 ms default.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "embedded_only(reason): runs on the embedded engine only; the reason says why",
    )
    config.addinivalue_line(
        "markers",
        "real_model(reason): uses the real embedding model; the reason says what of it is measured",
    )


@pytest.fixture(scope="session", autouse=True)
def _postgres_stopped() -> Iterator[None]:
    """This process's PostgreSQL server, if a test started one, stops (by PID) when the
    session ends — in every xdist worker too, where ``atexit`` never runs."""
    yield
    support = sys.modules.get("tests.postgres_support")
    if support is not None:
        support.stop_server()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The run's controller (or a run without workers) sweeps: no PostgreSQL server that
    this run started outlives it (``postgres_support.sweep``), whatever a worker did."""
    if hasattr(session.config, "workerinput"):
        return
    from tests import postgres_support

    factory = getattr(session.config, "_tmp_path_factory", None)
    places = [factory.getbasetemp()] if factory is not None else []
    stopped = postgres_support.sweep(places)
    if stopped:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"stopped {len(stopped)} PostgreSQL server(s) left running: "
                + ", ".join(map(str, stopped))
            )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files that hold a ``slow`` test are collected first; the order is otherwise unchanged.

    ``make test`` doesn't run them first: xdist's ``--dist loadfile`` reorders the files, most
    tests first (its default ``--loadscope-reorder``), which starts the one-test Inspector and
    README tour files near the end. Starting them first instead (``--no-loadscope-reorder``)
    was measured and was no faster: the suite is bound by its CPU time on two cores, and those
    files are CPU-heavy themselves.

    The real model is a choice a test states: ``real_embedder`` needs ``real_model(reason)``.
    """
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)
    unmarked = [
        item.nodeid
        for item in items
        if "real_embedder" in getattr(item, "fixturenames", ())
        and item.get_closest_marker("real_model") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            "these tests use real_embedder without @pytest.mark.real_model(reason=...): "
            + ", ".join(unmarked[:5])
        )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that uses ``engine`` runs once per engine, unless marked ``embedded_only``."""
    chosen = any(
        "engine" in str(m.args[0]) for m in metafunc.definition.iter_markers("parametrize")
    )
    if "engine" in metafunc.fixturenames and not chosen:
        only = metafunc.definition.get_closest_marker("embedded_only")
        kinds = ["embedded"] if only is not None else list(ENGINES)
        metafunc.parametrize("engine", kinds, indirect=True, scope="session")


@dataclass
class EngineUnderTest:
    """One engine of the suite: where its fresh stores go."""

    kind: str
    root: Path
    database: str | None = None  # PostgreSQL: one database for the session, a schema a store
    _names: Iterator[int] = field(default_factory=itertools.count)

    def location(self, name: str = "store") -> str | Path:
        """A new, empty store location: a directory, or a fresh PostgreSQL schema."""
        if self.database is not None:
            from tests import postgres_support

            return postgres_support.store_url(self.database)
        return self.root / f"{name}-{next(self._names)}"

    def open(self, embedder: Embedder, name: str = "store") -> KnowledgeStore:
        return KnowledgeStore.open(self.location(name), embedder=embedder)


@pytest.fixture(scope="session")
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    kind = str(request.param)
    database = None
    if kind == "postgres":
        from tests import postgres_support

        database = postgres_support.fresh_database("suite")
    return EngineUnderTest(kind, tmp_path_factory.mktemp(f"engine-{kind}"), database)


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """Feature hashing, ``hash:384``: no model, the same vectors everywhere, microseconds."""
    return open_embedder(HASH_SPEC)


@pytest.fixture(scope="session")
def real_embedder(request: pytest.FixtureRequest) -> Embedder:
    """The real model, memoised: each distinct text is embedded once per run (same vectors),
    and the vectors of the fixture texts are kept in pytest's cache directory between runs.
    Only for tests marked ``real_model(reason=…)``."""
    from tests.conformance import memo

    shared = memo.shared()
    cache = getattr(request.config, "cache", None)
    if cache is not None:
        path = Path(cache.mkdir("ks-embeddings")) / "conformance.npz"
        shared.load(path)
        request.addfinalizer(lambda: shared.save(path))
    return shared


@pytest.fixture
def store(engine: EngineUnderTest, embedder: Embedder) -> Iterator[KnowledgeStore]:
    with engine.open(embedder) as s:
        yield s


@pytest.fixture
def estate_store(store: KnowledgeStore) -> KnowledgeStore:
    store.ingest_records(ESTATE)
    store.add_member("group:sre", "user:sam")
    return store
