"""Where docs/ lists a closed vocabulary, it lists the one the code declares.

docs/cli.md named the aggregate dimensions without ``language`` (which ``--help`` and
the store accept), docs/serving.md gave ``POST /v1/search`` the modes
``rrf|convex`` without ``adaptive``, the default, and docs/design.md called ``rrf``
the default (and listed as planned what had been built).
"""

from __future__ import annotations

import re
from pathlib import Path

from knowledge_store.model import DAMAGE_KINDS, DIMENSIONS, FUSION_MODES, METRICS
from knowledge_store.retrieval.search import DEFAULT_MODE

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _section(doc: str, heading: str) -> str:
    text = (DOCS / doc).read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _spans(text: str) -> set[str]:
    """Code spans, a ``name:a|b`` span spelled out (``created_at:day|week``)."""
    found: set[str] = set()
    for span in re.findall(r"`([^`]+)`", text):
        head, _, alternatives = span.rpartition(":")
        if head and "|" in alternatives:
            found |= {f"{head}:{a}" for a in alternatives.split("|")}
        else:
            found.add(span)
    return found


def test_cli_md_names_every_metric_and_dimension_of_aggregate() -> None:
    section = _section("cli.md", "aggregate")
    metrics, _, rest = section.partition("; dimensions")
    assert _spans(metrics) >= set(METRICS) and _spans(metrics) & set(DIMENSIONS) == set()
    dimensions = _spans(rest.split("(no `--by`")[0])
    assert dimensions == set(DIMENSIONS)


def test_cli_md_lists_every_kind_of_damage_ks_check_reports() -> None:
    rows = re.findall(r"^\| `(\w+)` \|", _section("cli.md", "check"), re.M)
    assert rows == list(DAMAGE_KINDS)


def test_serving_md_names_every_fusion_mode_of_rest_search() -> None:
    row = next(
        line
        for line in (DOCS / "serving.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| `POST /v1/search` |")
    )
    modes = re.search(r"mode\?: ([\w\\|]+)", row)
    assert modes is not None
    assert set(modes.group(1).replace("\\", "").split("|")) == set(FUSION_MODES)


def test_design_md_names_the_default_mode_and_every_dimension() -> None:
    text = (DOCS / "design.md").read_text(encoding="utf-8")
    defaults = re.findall(r"\*\*(\w+)\*\* \(default\)", _section("design.md", "§3 Fusion"))
    assert defaults == [DEFAULT_MODE]
    aggregate = text[text.index("`aggregate(metric, dimension, filters)`") :]
    dimensions = _spans(aggregate[aggregate.index("dimensions (") : aggregate.index("computed")])
    assert dimensions == set(DIMENSIONS)
