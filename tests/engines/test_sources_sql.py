"""engines/sql/sources.py: one text per statement, each dialect's parameter spelling; the
sync plan feeding the publish planner; the requests of the sources operations."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge_store.engines.sql.dialect import POSTGRES, SQLITE
from knowledge_store.engines.sql.publish import plan_publish
from knowledge_store.engines.sql.sources import SourceSync, plan_sync, statement
from knowledge_store.errors import InvalidRequest, MassDeleteRefused
from knowledge_store.requests import DeleteRequest, IngestRequest

NAMES = [
    "source_uids",
    "write_source",
    "forget_source",
    "source_rows",
    "crawl_pages",
    "put_crawl_page",
    "forget_crawl_page",
    "forget_crawl_source",
]


@pytest.mark.parametrize("name", NAMES)
def test_each_statement_is_one_text_in_each_dialects_spelling(name: str) -> None:
    lite, pg = statement(name, SQLITE), statement(name, POSTGRES)
    assert "%(" not in lite and not re.search(r":[a-z_]+", pg)
    assert re.sub(r":([a-z_]+)", r"%(\1)s", lite) == pg


def test_an_unknown_statement_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        statement("drop_everything", SQLITE)


uids = st.lists(st.sampled_from([f"u{i}" for i in range(12)]), unique=True)


@given(stored=uids, present=uids)
def test_a_sync_plan_deletes_exactly_what_the_batch_lacks_and_the_planner_counts_it(
    stored: list[str], present: list[str]
) -> None:
    sync = SourceSync("s", "records", (), sync=True, present=frozenset(present))
    try:
        doomed = plan_sync(stored, sync)
    except MassDeleteRefused as refused:
        assert refused.details["deleting"] > 0.5 * len(stored)
        return
    assert doomed == sorted(set(stored) - set(present))
    plan = plan_publish((3, "root"), dict.fromkeys(stored, "h"), [], doomed)
    assert plan.deleted == len(doomed) and sorted(plan.deletes) == doomed


def test_an_upsert_never_syncs_and_a_cut_short_crawl_deletes_nothing() -> None:
    assert plan_sync(["a", "b"], SourceSync("s", "web", ())) == []
    cut = SourceSync("s", "web", (), sync=True, delete_missing=False)
    assert plan_sync(["a", "b"], cut) == []


def test_delete_takes_uids_or_a_source_and_a_sync_names_its_source() -> None:
    assert DeleteRequest.parse(source="docs").source == "docs"
    with pytest.raises(InvalidRequest, match="not both"):
        DeleteRequest.parse(uids=["a"], source="docs")
    with pytest.raises(InvalidRequest, match="at least one uid"):
        DeleteRequest.parse()
    with pytest.raises(InvalidRequest) as raised:
        IngestRequest.parse(records=[{"uid": "a"}], sync=True)
    assert raised.value.details["field"] == "source"
