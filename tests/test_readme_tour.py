"""The README's tour runs, command by command, on what the clone holds (issue 15 item 10).

The commands are read from README.md itself (the ```bash block under "A
five-minute tour", and the Python block after it), so the tour can't rot: each
runs through the real ``ks`` in a subprocess, in a temporary folder holding a
copy of README.md, docs/ and examples/ — nothing beside the repository. Every
step runs on today's behaviour; none waits for phase 2 of issue 15.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
KS = Path(sys.executable).parent / "ks"

#: What a step's output must hold (or not), by the first words of its command line.
EXPECT: list[tuple[str, int, list[str], list[str]]] = [
    # (command prefix, which occurrence (0: every), must contain, must not contain)
    ("ks ingest examples/estate/corpus.jsonl", 0, ["added 34", "rejected 0"], []),
    ("ks principals load", 0, ["10 memberships"], []),
    ('ks lexical "ERR-1042"', 0, ["ticket:OPS-105", "runbook:rotate-credentials"], []),
    ("ks vector", 0, ["runbook:db-failover"], []),
    ('ks search "roll back a bad deploy"', 0, ["superseded by runbook:deploy"], []),
    ("ks graph service:postgres-main", 0, ["runbook:db-failover", "ticket:OPS-109"], []),
    ("ks sql --type ticket --status open", 0, ["ticket:OPS-110", "ticket:OPS-107"], ["OPS-101"]),
    ("ks aggregate count --by created_at:month", 0, ["2024-06"], []),
    ("ks query", 0, ["ticket:OPS-103", "ticket:OPS-109"], []),
    # "support staff: no runbook": no runbook at all (and the estate's store holds no docs)
    ('ks search "promote the replica"', 1, ["1. "], ["· runbook ·", "README", "codeSample"]),
    ("ks acl explain user:joe runbook:db-failover", 0, ["cannot read"], []),
    # "now the failover runbook comes first": the first result line
    (
        'ks search "promote the replica"',
        2,
        ["1. Failing over postgres-main  runbook:db-failover"],
        [],
    ),
    ("ks acl grant handbook:draft-pricing group:staff", 0, ["group:staff"], []),
    ("ks eval", 0, ["16 queries", "fused"], []),
    ("ks --store .ks/docs ingest README.md docs", 0, ["rejected 0"], []),
    ('ks --store .ks/docs search "what does a sync delete"', 0, ["project-docs:sources"], []),
]


def _blocks(language: str) -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    tour = readme.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", tour, flags=re.S)


def tour_commands() -> list[str]:
    """The tour's shell lines: continuations joined, comments dropped."""
    (script,) = _blocks("bash")
    joined = re.sub(r"\\\n\s*", " ", script)
    lines = []
    for line in joined.splitlines():
        parts = shlex.split(line, comments=True)
        if parts:
            lines.append(shlex.join(parts))
    return lines


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    """``ks serve …`` on a free port: the page answers GET and HEAD, then it is stopped."""
    port = _free_port()
    server = subprocess.Popen(
        [*argv, "--port", str(port)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                page = httpx.get(
                    f"http://127.0.0.1:{port}/", params={"q": "incident commander"}, timeout=30
                )
                break
            except httpx.TransportError:
                assert server.poll() is None, server.stdout.read() if server.stdout else ""
                assert time.monotonic() < deadline, "ks serve did not answer within 120 s"
                time.sleep(0.5)
        assert page.status_code == 200
        assert "Incident response" in page.text  # the anonymous reader sees the handbook…
        assert "/entity/runbook%3Adb-failover" not in page.text  # …and no SRE runbook
        assert httpx.head(f"http://127.0.0.1:{port}/", timeout=30).status_code == 200
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.real_model(reason="the tour shows what the default model answers, as a reader runs it")
@pytest.mark.timeout(1200)  # ~20 ks processes, each loading the model; ~1 min on an idle machine
def test_the_readme_tour_runs_on_the_clone_alone(tmp_path: Path) -> None:
    for name in ("README.md", "docs", "examples"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name)
        else:
            shutil.copy(source, tmp_path / name)
    env = {**os.environ, "COLUMNS": "200", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("KS_AS", None)
    env.pop("KS_EMBEDDER", None)  # the suite's hashing: the tour runs on the default model
    outputs: list[tuple[str, str]] = []
    for line in tour_commands():
        argv = shlex.split(line)
        assert "../" not in line and "pg15:" not in line, line  # nothing beside the clone
        if argv[0] == "source":
            continue
        if argv[0] == "export":
            name, _, value = argv[1].partition("=")
            env[name] = value
            continue
        assert argv[0] == "ks", line
        if argv[1] == "serve":
            _serve([str(KS), *argv[1:]], tmp_path, env)
            continue
        done = subprocess.run(
            [str(KS), *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        outputs.append((line, done.stdout))
    assert env["KS_STORE"] == ".ks/tour" and (tmp_path / ".ks" / "tour").is_dir()
    assert (tmp_path / ".ks" / "docs").is_dir()  # the docs' own store, apart from the estate

    for prefix, occurrence, present, absent in EXPECT:
        words = shlex.split(prefix)
        matching = [out for line, out in outputs if shlex.split(line)[: len(words)] == words]
        assert matching, f"the tour no longer runs {prefix!r}"
        for out in matching if occurrence == 0 else [matching[occurrence - 1]]:
            for text in present:
                assert text in out, f"{prefix}: {text!r} not in\n{out}"
            for text in absent:
                assert text not in out, f"{prefix}: {text!r} in\n{out}"

    (python,) = _blocks("python")
    done = subprocess.run(
        [sys.executable, "-c", python], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "runbook:db-failover" in done.stdout


def test_the_tour_names_only_what_the_clone_holds() -> None:
    for line in tour_commands():
        for word in shlex.split(line):
            if "/" in word or word.endswith((".jsonl", ".tsv", ".md")):
                if word.startswith(("http", "group:", "user:", ".ks/")) or "=" in word:
                    continue
                assert (REPO / word).exists(), f"{line}: {word} is not in the repository"


def test_make_eval_says_where_the_set_comes_from(tmp_path: Path) -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make")
    # -o install: never re-run the installer from a test
    done = subprocess.run(
        [make, "-s", "-o", "install", "eval"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "make eval needs an evaluation set: make eval EVAL=DIR" in done.stdout
    assert "EVAL=examples/estate" in done.stdout
    missing = subprocess.run(
        [make, "-s", "-o", "install", "eval", f"EVAL={tmp_path}"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert missing.returncode != 0
    assert f"{tmp_path}/corpus.jsonl is missing" in missing.stdout
