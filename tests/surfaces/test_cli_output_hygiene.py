"""Stored text reaches the terminal as text (issue 11 §6): no markup obeyed, no control sequence.

Titles, uids, types, sources, headings and chunk text hold rich markup
(``[/]`` used to crash the command, ``[link=…]`` to be obeyed) and terminal
control sequences (clear the screen, set the window title, write a hidden
hyperlink). Every human-output command shows them as text; the error handler
too. The records go in through the pipeline below validation (``ingest_entities``,
as a store written by an older version holds them): the test is about what the
CLI does with whatever a store holds, not about what ingest validation lets in
(it now refuses control characters in titles, uids and types).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.ingest.pipeline import ingest_entities
from knowledge_store.model import Edge, Entity
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.cli import app
from knowledge_store.surfaces.terminal import safe, strip_controls

CLEAR = "\x1b[2J\x1b[H"
TITLE = "\x1b]0;pwned\x07"
LINK = "\x1b]8;;https://evil.example/\x1b\\click me\x1b]8;;\x1b\\"
MARKUP = "[/] [bold red]Boom[/bold red] [link=https://evil.example/]x[/link] \\"
UID = "evil:[/]"
HOSTILE = [
    Entity(
        uid=UID,
        type="page[/]",
        title=f"Vacuum {CLEAR}{TITLE}{MARKUP}",
        body=f"# Vacuum {LINK}\n\nVACUUM reclaims [/] space {CLEAR} from dead tuples \u202eevil\n",
        source="docs[/]",
        status="published[b]",
        created_at="2024-01-01T00:00:00Z",
        updated_at="2024-02-01T00:00:00Z",
        acl=("everyone", "group:[/]ops"),
        edges=(Edge(UID, "xref", "plain:1"),),
    ),
    Entity(
        uid="plain:1",
        type="page",
        title="Plain [/]",
        body="Autovacuum and VACUUM in plain words.",
        acl=("everyone",),
    ),
]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Path:
    where = tmp_path_factory.mktemp("hostile") / "store"
    with KnowledgeStore.open(where, embedder=embedder) as store:
        ingest_entities(store.engine.writer, store.embedder, store.embedder_spec, HOSTILE)
    return where


COMMANDS = {
    "search": ["search", "vacuum dead tuples"],
    "search-explain": ["search", "vacuum dead tuples", "--explain"],
    "lexical": ["lexical", "vacuum"],
    "fuzzy": ["fuzzy", "vacum"],
    "vector": ["vector", "vacuum"],
    "sql": ["sql", "--k", "5"],
    "aggregate-type": ["aggregate", "count", "--by", "type"],
    "aggregate-source": ["aggregate", "count", "--by", "source"],
    "graph": ["graph", UID],
    "query": ["query", "MATCH (n) RETURN n.uid, n.title, n.type"],
    "acl-show": ["acl", "show", UID],
    "acl-explain": ["acl", "explain", "user:[/]x", UID],
    "principals-show": ["principals", "show", "group:[/]ops"],
    "error-not-found": ["acl", "show", f"nope:{MARKUP}{CLEAR}"],
    "error-bad-principal": ["acl", "explain", f"user:{CLEAR}[/]", UID],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_human_output_shows_data_as_text(hostile: Path, name: str) -> None:
    result = CliRunner().invoke(app, ["--store", str(hostile), *COMMANDS[name]])
    shown = result.stdout + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), shown
    assert "Traceback" not in shown and "MarkupError" not in shown
    assert result.exit_code == (2 if name.startswith("error") else 0), shown
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    if name.startswith("error"):
        assert "error (" in shown
    assert "[/]" in shown  # the markup is shown, as text


def test_ingest_reports_hostile_paths_and_rejections_as_text(tmp_path: Path) -> None:
    folder = tmp_path / "docs[b]"
    folder.mkdir()
    (folder / f"bad{CLEAR}[i].md").write_text("---\nuid: [1, 2]\n---\n# T\n\nbody\n")
    (folder / "link[b].md").symlink_to("/etc/hostname")
    (folder / "ok.md").write_text("# Ok\n\nfine\n")
    result = CliRunner().invoke(
        app,
        [
            "--store",
            str(tmp_path / "s"),
            "ingest",
            str(folder),
            "--acl",
            "everyone",
            "--skip-invalid",
        ],
        env={"COLUMNS": "500"},  # no line break inside a long temporary path
    )
    shown = result.stdout + result.stderr
    assert result.exit_code == 0, shown
    assert "\x1b" not in shown and "rejected" in shown and "skipped" in shown
    assert "docs[b]" in shown and "link[b].md" in shown and "[i].md" in shown


def test_safe_replaces_controls_and_escapes_markup() -> None:
    assert (
        strip_controls("a\tb\nc\x1b[2Jd\x7fe\x9bf\u202eg") == "a b c\ufffd[2Jd\ufffde\ufffdf\ufffdg"
    )
    assert safe("[/]") == "\\[/]"
    assert safe("[bold]x[/bold]") == "\\[bold]x\\[/bold]"


def test_every_generated_command_has_a_human_output() -> None:
    """A command generated from the operation table prints its answer through SHOW: ``ks
    fuzzy`` had none, and its human output was a KeyError traceback."""
    from knowledge_store.surfaces.cli_show import SHOW
    from knowledge_store.surfaces.operations import OPERATIONS

    missing = [op.name for op in OPERATIONS if op.cli is not None and op.name not in SHOW]
    assert missing == []
