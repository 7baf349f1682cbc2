"""The hostile-site corpus (tests/ingest/crawl_abuse.py): every case, against real sites on 127.0.0.1."""

from __future__ import annotations

import pytest

from tests.ingest.crawl_abuse import CASES, CrawlCase, problem, run, sites


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_hostile_site_does_not_lead_the_crawl_astray(case: CrawlCase) -> None:
    with sites() as (site, other):
        outcome = run(case, site, other)
        assert problem(case, outcome) is None, problem(case, outcome)
