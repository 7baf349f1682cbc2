"""docs/audit.md's walkthrough runs, as written, in a shell on the clone's example estate."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.embedded_only(reason="a walkthrough of the CLI on the default engine")


def _block() -> str:
    text = (REPO / "docs" / "audit.md").read_text(encoding="utf-8")
    (script,) = re.findall(r"```bash\n(.*?)```", text, flags=re.S)[:1]
    return script


def test_the_walkthrough_runs(tmp_path: Path) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(
        ["bash", "-e", "-c", _block()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "readable runbook:db-failover through user:sam → group:sre" in out
    assert "group:sre revoked from its ACL" in out and "by os:" in out
    assert "user:sam can read runbook:db-failover" in out
    assert "user:sam cannot read runbook:db-failover" in out
    assert re.search(r"ok: \d+ records", out)
    assert "would remove 0 audit records" in out
    lines = (tmp_path / "audit.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["seq"] for r in records][:4] == [1, 2, 3, 4]
    assert records[2]["operation"] == "search" and records[2]["identity"] == "user:sam"
