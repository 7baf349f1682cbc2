"""Facets — filter fields whose value is a record key of their own — come from their declaration.

``FilterField(..., record=DOC)`` in ``model/vocabulary.py`` is all a facet needs:
the record model, the record schema, both catalogs' columns (added to an older
store on open), the Tantivy field (an index of another field set is rebuilt),
the requests, answers and surfaces derive it. Shown here generically over
``FACETS``, and end to end by a facet that exists only in a subprocess, declared
there by one line added to ``FILTER_FIELDS``.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge_store.engines.embedded.lexical import SCHEMA_ID, SIDECAR
from knowledge_store.ingest.record_schema import record_json_schema
from knowledge_store.ingest.records import record_to_entity
from knowledge_store.model import ENTITY_FIELDS, FACET_NAMES, FACETS, Entity
from knowledge_store.store import KnowledgeStore
from tests.conftest import HASH_SPEC, EngineUnderTest

pytestmark = pytest.mark.skipif(not FACETS, reason="no facet is declared")

_names = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=12)


def _record(uid: str, **facets: str) -> dict[str, Any]:
    return {"uid": uid, "type": "page", "title": uid.title(), "body": f"{uid} body", **facets}


@given(st.dictionaries(st.sampled_from(FACET_NAMES), st.one_of(st.just(""), _names)))
def test_a_facet_is_a_record_key_after_status_and_only_set_ones_count(
    facets: dict[str, str],
) -> None:
    entity = record_to_entity(
        _record("a", **facets), file="t.jsonl", line=1, default_acl=("everyone",), source=None
    )
    kept = {name: value for name, value in facets.items() if value}
    assert entity.facets == kept
    keys = list(entity.to_record())
    shown = [key for key in keys if key in FACET_NAMES]
    assert shown == [name for name in FACET_NAMES if name in kept]
    assert keys[keys.index("status") + 1 : keys.index("status") + 1 + len(shown)] == shown
    # an unset facet changes neither the record nor the content hash (nor a content root)
    bare = Entity("a", "page", "A", "a body", source=entity.source, acl=entity.acl)
    assert (entity.content_hash == bare.content_hash) == (not kept)
    fields = dict(zip(ENTITY_FIELDS, entity.field_values(), strict=True))
    assert Entity.from_fields(fields, acl=entity.acl) == entity


def test_an_undeclared_facet_is_refused() -> None:
    with pytest.raises(ValueError, match="not a facet: nope"):
        Entity("a", "page", "A", "", facets={"nope": "x"})


def test_the_record_schema_documents_each_facet() -> None:
    properties = record_json_schema()["properties"]
    for facet in FACETS:
        assert properties[facet.name]["description"] == facet.record


def _drop_facet_columns(engine: EngineUnderTest, store: KnowledgeStore, where: Any) -> None:
    if engine.kind == "embedded":
        conn = sqlite3.connect(Path(where) / "catalog.sqlite")
        for name in FACET_NAMES:
            conn.execute(f"DROP INDEX entities_by_{name}")
            conn.execute(f"ALTER TABLE entities DROP COLUMN {name}")
        conn.commit()
        conn.close()
        return
    with store.engine.db.write() as conn:  # type: ignore[attr-defined]
        for name in FACET_NAMES:
            conn.execute(f"ALTER TABLE entities DROP COLUMN {name}")


def test_a_store_made_before_a_facet_gains_its_column_on_open(engine: EngineUnderTest) -> None:
    where = engine.location()
    with KnowledgeStore.open(where, embedder=HASH_SPEC) as store:
        store.ingest_records([_record("old")], acl=["everyone"])
        _drop_facet_columns(engine, store, where)
    with KnowledgeStore.open(where, embedder=HASH_SPEC) as store:
        values = {name: f"{name}-value" for name in FACET_NAMES}
        store.ingest_records([_record("new", **values)], acl=["everyone"])
        for name, value in values.items():
            hits = store.sql(filters={name: [value]}).hits
            assert [h.uid for h in hits] == ["new"]
            rows = store.aggregate("count", name).pairs()
            assert sorted(rows, key=str) == sorted([("", 1), (value, 1)], key=str)
            assert store.content("old").entity.model_dump()[name] == ""


@pytest.mark.embedded_only(reason="the Tantivy index's sidecar")
def test_a_lexical_index_of_another_field_set_is_rebuilt_on_open(engine: EngineUnderTest) -> None:
    where = engine.location()
    values = {name: f"{name}-value" for name in FACET_NAMES}
    with KnowledgeStore.open(where, embedder=HASH_SPEC) as store:
        store.ingest_records([_record("alpha", **values), _record("beta")], acl=["everyone"])
    sidecar = Path(where) / "lexical" / SIDECAR
    written = json.loads(sidecar.read_text())
    assert written["schema"] == SCHEMA_ID
    # an index built before the last facet was declared: its id lacks that field
    older = SCHEMA_ID.replace(f",{FACETS[-1].name}={FACETS[-1].kind}", "")
    assert older != SCHEMA_ID
    sidecar.write_text(json.dumps({**written, "schema": older}))
    with KnowledgeStore.open(where, embedder=HASH_SPEC) as store:
        for name, value in values.items():
            hits = store.lexical("body", filters={name: [value]}).hits
            assert [h.uid for h in hits] == ["alpha"]
    assert json.loads(sidecar.read_text())["schema"] == SCHEMA_ID


#: Declares one more facet, ``team``, by adding one line to FILTER_FIELDS in the source of
#: model/vocabulary.py as it is imported — nothing else of the package changes.
_NEW_FACET = textwrap.dedent(
    """
    import importlib.abc, importlib.util, json, sys

    class AddTeam(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name != "knowledge_store.model.vocabulary":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            sys.meta_path.insert(0, self)
            self.origin = spec.origin
            return importlib.util.spec_from_file_location(name, spec.origin, loader=self)

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            source = open(self.origin).read()
            marker = "FILTER_FIELDS: tuple[FilterField, ...] = ("
            assert marker in source
            added = 'FilterField("team", "keyword", help="owning team", record="The owning team."),'
            exec(compile(source.replace(marker, marker + added), self.origin, "exec"), module.__dict__)

    sys.meta_path.insert(0, AddTeam())

    from typer.testing import CliRunner
    from knowledge_store.store import KnowledgeStore
    from knowledge_store.surfaces.cli import app

    where = sys.argv[1]
    with KnowledgeStore.open(where, embedder="hash:384") as store:
        store.ingest_records(
            [
                {"uid": "a", "type": "page", "title": "A", "body": "alpha text", "team": "search"},
                {"uid": "b", "type": "page", "title": "B", "body": "alpha text", "team": "infra"},
            ],
            acl=["everyone"],
        )
        out = {
            "sql": [h.uid for h in store.sql(filters={"team": ["search"]}).hits],
            "lexical": [h.uid for h in store.lexical("alpha", filters={"team": ["infra"]}).hits],
            "search": [r.uid for r in store.search("alpha", filters={"team": ["search"]}).results],
            "aggregate": sorted(store.aggregate("count", "team").pairs()),
            "content": store.content("a").to_dict()["entity"],
        }
    cli = CliRunner().invoke(app, ["--store", where, "sql", "--team", "infra", "--json"])
    out["cli"] = [h["uid"] for h in json.loads(cli.stdout)["hits"]]
    print(json.dumps(out))
    """
)


def test_a_new_facet_needs_only_its_declaration(engine: EngineUnderTest) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _NEW_FACET, str(engine.location())],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["sql"] == ["a"] and got["lexical"] == ["b"] and got["search"] == ["a"]
    assert got["aggregate"] == [["infra", 1], ["search", 1]]
    assert got["cli"] == ["b"]
    entity = got["content"]
    assert entity["team"] == "search"
    assert list(entity)[list(entity).index("status") + 1] == "team"  # declared first


@pytest.mark.embedded_only(reason="SQLite's write lock")
def test_processes_opening_an_older_store_at_once_add_each_facet_once(
    engine: EngineUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process adds the columns between this one's check and its ALTER TABLE (as
    the workers of ``ks serve`` open a store at once): the open still succeeds."""
    from knowledge_store.engines.embedded import migrate

    where = engine.location()
    with KnowledgeStore.open(where, embedder=HASH_SPEC) as store:
        store.ingest_records([_record("old")], acl=["everyone"])
        _drop_facet_columns(engine, store, where)
    checked = migrate.missing_facets
    raced: list[str] = []

    def the_other_process_adds_them(columns: Any) -> tuple[str, ...]:
        stale = checked(columns)
        if stale and not raced:
            other = sqlite3.connect(Path(where) / "catalog.sqlite")
            for name in stale:
                other.execute(f"ALTER TABLE entities ADD COLUMN {name} TEXT NOT NULL DEFAULT ''")
            other.commit()
            other.close()
            raced.extend(stale)
        return stale

    monkeypatch.setattr(migrate, "missing_facets", the_other_process_adds_them)
    with KnowledgeStore.open(where, embedder=HASH_SPEC) as store:
        assert raced == list(FACET_NAMES)
        values = {name: f"{name}-value" for name in FACET_NAMES}
        store.ingest_records([_record("new", **values)], acl=["everyone"])
        for name, value in values.items():
            assert [h.uid for h in store.sql(filters={name: [value]}).hits] == ["new"]
