"""``ks export``: a store's records back out, in the ingest format, on every engine (issue 31).

An export ingested into an empty store — of the same engine or the other — gives the
same entities (records equal), the same content digest and the same answers; code
samples split off a page round-trip as derived entities, neither duplicated nor
orphaned, and an export that FILTERS narrow stays closed under derivation.
Memberships export as ``principals load`` lines.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from knowledge_store.store import KnowledgeStore
from tests.conftest import ESTATE, HASH_SPEC, EngineUnderTest

PAGE = (
    "# Deploy\n\nHow to deploy the payments API.\n\n```bash\nmake deploy\n```\n\n"
    "## Roll back\n\nRevert the release tag.\n\n```bash\ngit revert v2\n```\n"
)
QUESTIONS = ("vacuum dead tuples", "replica lag", "roll back the release", "deploy")
READERS = ("everyone", "user:sam", "user:fin")


def _fill(store: KnowledgeStore, folder: Path) -> None:
    store.ingest_records(ESTATE)
    folder.mkdir(exist_ok=True)
    (folder / "deploy.md").write_text(PAGE, encoding="utf-8")
    store.ingest(
        [folder], format="markdown", acl=["group:sre"], source="runbooks", uid_prefix="rb:"
    )
    store.load_memberships([("group:sre", "user:sam"), ("group:finance", "user:fin")])


def _export(store: KnowledgeStore, **filters: Any) -> tuple[str, Any]:
    out = io.StringIO()
    report = store.export(out, filters=filters or None)
    return out.getvalue(), report


def _ingest_text(store: KnowledgeStore, text: str, where: Path) -> None:
    where.write_text(text, encoding="utf-8")
    store.ingest([where])


def _answers(store: KnowledgeStore) -> list[Any]:
    """What each reader gets from every ranked read — the results in order, with their ranks
    in each list. Not the scores: a lexical index's BM25 statistics count the documents a
    commit deleted until segments merge (each publish replaces the index's watermark
    document), so a store built in two publishes scores a term a few parts in a thousand
    apart from one built in one. Chunk ids are keyed per store: a chunk is named by its
    entity and text."""
    out: list[Any] = []
    for who in READERS:
        for text in QUESTIONS:
            found = store.search(text, identity=who, k=20)
            out.append([(r.uid, r.ranks) for r in found.results])
            lexical = store.lexical(text, identity=who, k=20).hits
            out.append([(h.uid, h.text) for h in lexical])
            vector = store.vector(text, identity=who, k=20).hits
            out.append([(h.uid, h.text, round(h.score, 5)) for h in vector])
        out.append([h.uid for h in store.sql(identity=who, k=100).hits])
        out.append(store.aggregate("count", "type", identity=who).pairs())
    out.append([h.uid for h in store.graph(["guide:admin"], identity="user:sam", k=50).hits])
    return out


def _memberships(store: KnowledgeStore) -> list[str]:
    out = io.StringIO()
    store.export_principals(out)
    return out.getvalue().splitlines()


def test_an_export_ingested_into_an_empty_store_gives_the_same_store(
    engine: EngineUnderTest, embedder: Any, tmp_path: Path
) -> None:
    with engine.open(embedder) as first:
        _fill(first, tmp_path / "runbooks")
        text, report = _export(first)
        members = _memberships(first)
        digest, answers = first.digest(), _answers(first)
    records = [json.loads(line) for line in text.splitlines()]
    assert report.entities == len(records) == len(ESTATE) + 3  # the page and its two samples
    assert report.digest == digest and report.derived == 0
    samples = [r for r in records if r["type"] == "codeSample"]
    assert sorted(r["uid"] for r in samples) == ["rb:deploy#code-1", "rb:deploy#code-2"]
    assert all(r["attributes"]["acl_from"] == "rb:deploy" for r in samples)
    assert all(r["acl"] == ["group:sre"] for r in samples)
    assert members == [
        '{"group":"group:finance","member":"user:fin"}',
        '{"group":"group:sre","member":"user:sam"}',
    ]
    with engine.open(embedder) as second:
        _ingest_text(second, text, tmp_path / "records.jsonl")
        (tmp_path / "members.jsonl").write_text("\n".join(members) + "\n", encoding="utf-8")
        second.load_memberships([(m["group"], m["member"]) for m in map(json.loads, members)])
        again, _ = _export(second)
        assert second.digest() == digest
        assert again.splitlines() == text.splitlines()  # the same records, in row order
        assert _answers(second) == answers
        # ingesting the export again changes nothing: no sample duplicated, none orphaned
        repeat = second.ingest([tmp_path / "records.jsonl"])
        assert (repeat.added, repeat.updated, repeat.deleted) == (0, 0, 0)
        assert second.acl_inherited_from("rb:deploy#code-2") == "rb:deploy"


def test_an_export_narrowed_by_filters_is_closed_under_derivation(
    engine: EngineUnderTest, embedder: Any, tmp_path: Path
) -> None:
    with engine.open(embedder) as store:
        _fill(store, tmp_path / "runbooks")
        text, report = _export(store, type=["codeSample"])
        uids = sorted(json.loads(line)["uid"] for line in text.splitlines())
        # the samples bring their page, and the page its other sample
        assert uids == ["rb:deploy", "rb:deploy#code-1", "rb:deploy#code-2"]
        assert (report.entities, report.derived) == (3, 1)
        tickets, report = _export(store, type=["ticket"])
        assert report.derived == 0 and len(tickets.splitlines()) == 2
    with engine.open(embedder) as empty:
        _ingest_text(empty, text, tmp_path / "samples.jsonl")
        assert sorted(h.uid for h in empty.sql(identity="group:sre", k=10).hits) == uids


@pytest.mark.slow
def test_embedded_to_postgres_to_embedded_round_trip(tmp_path: Path) -> None:
    """The move across engines: the same records, digest and answers at every step, through
    the CLI (``ks export``, ``ks ingest``, ``ks principals export``/``load``)."""
    from tests import postgres_support

    where = {
        "first": str(tmp_path / "first"),
        "postgres": postgres_support.store_url(postgres_support.fresh_database("export")),
        "last": str(tmp_path / "last"),
    }

    def ks(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "knowledge_store.surfaces.cli", *args],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr + done.stdout
        return done

    with KnowledgeStore.open(where["first"], embedder=HASH_SPEC) as first:
        _fill(first, tmp_path / "runbooks")
        digest, answers = first.digest(), _answers(first)
    previous = where["first"]
    for step in ("postgres", "last"):
        records, members = tmp_path / f"{step}.jsonl", tmp_path / f"{step}-members.jsonl"
        report = json.loads(ks("--store", previous, "export", "-o", str(records), "--json").stdout)
        assert report["digest"] == digest
        ks("--store", previous, "principals", "export", "-o", str(members))
        ks("--store", where[step], "ingest", str(records))
        ks("--store", where[step], "principals", "load", str(members))
        with KnowledgeStore.open(where[step], embedder=HASH_SPEC) as moved:
            assert moved.digest() == digest
            assert _memberships(moved) == members.read_text(encoding="utf-8").splitlines()
            if step == "last":  # back on the engine it came from: the very same answers
                assert _answers(moved) == answers
        previous = where[step]
    assert (tmp_path / "postgres.jsonl").read_text() == (tmp_path / "last.jsonl").read_text()
