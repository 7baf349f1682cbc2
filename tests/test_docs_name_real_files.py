"""The README and docs/ name source files a reader will open: each must exist.

docs/serving.md, records.md and security.md said the bounds live in ``model.py``
(a package, ``model/``, since), and query_graph.md sent readers to a
``graphquery/traversal.py`` that is ``engines/sql/traversal.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
#: the Python files of the repository, as paths relative to its root
FILES = {
    path.relative_to(ROOT).as_posix()
    for top in ("src", "tests", "bench", "examples")
    for path in (ROOT / top).rglob("*.py")
}


def _named(doc: Path) -> list[str]:
    """The ``*.py`` paths a document names in code spans (`surfaces/page.py`)."""
    return re.findall(r"`([\w./-]+\.py)\b[^`]*`", doc.read_text(encoding="utf-8"))


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_python_file_a_doc_names_exists(doc: Path) -> None:
    missing = [
        name for name in _named(doc) if not any(f == name or f.endswith("/" + name) for f in FILES)
    ]
    assert missing == [], f"{doc.name} names files that do not exist: {missing}"


def test_the_docs_name_files_at_all() -> None:
    named = {name for doc in DOCS for name in _named(doc)}
    assert "surfaces/operations.py" in named and "model/vocabulary.py" in " ".join(named)
