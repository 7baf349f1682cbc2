"""A killed audit writer loses no acknowledged record, and leaves a log that verifies.

A few kills per engine here (KS_CRASH_KILLS to change it); bench/kill_soak.py ``--writers
audit`` runs the soak. See tests/engines/audit_kill.py.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.conftest import EngineUnderTest
from tests.engines.audit_kill import audit_soak, seed_audit

KILLS = int(os.environ.get("KS_CRASH_KILLS", "3"))


@pytest.mark.parametrize("fsync", [False, True], ids=["wal", "fsync"])
def test_a_killed_audit_writer_loses_no_acknowledged_record(
    engine: EngineUnderTest, fsync: bool
) -> None:
    location = engine.location("audit-kill")
    seed_audit(location, fsync=fsync)
    figures = audit_soak(location, KILLS, random.Random(29 + fsync), max_delay=1.5, fsync=fsync)
    assert figures.kills == KILLS and figures.acked > 0
    assert figures.lost == 0 and figures.problems == [], "\n".join(figures.problems)
