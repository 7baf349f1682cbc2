"""Links between documents resolve (issue 30, item 4): a relative link in Markdown or HTML is an
``xref`` edge to the entity it names; the entity page opens it, ``resolve_xref`` finds it,
``get_related`` follows it. Tried as a new user would: the page's link to ``records.md`` gave a
404 and ``resolve_xref ref=records.md#acls`` answered not_found."""

from __future__ import annotations

import re
from pathlib import Path

from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.http import create_app
from tests.surfaces.serve_estate import call


def _site(tmp_path: Path) -> tuple[Path, Path]:
    docs = tmp_path / "docs"
    (docs / "guide").mkdir(parents=True)
    (docs / "index.md").write_text(
        "# Handbook\n\nRead [the records](records.md#acls) and [the intro](guide/intro.html).\n"
        "An [outside link](https://example.org/x) stays; [a missing page](gone.md) is text.\n"
    )
    (docs / "records.md").write_text("# Records\n\n## ACLs\n\nWho may read what.\n")
    (docs / "guide" / "intro.html").write_text(
        "<html><head><title>Intro</title></head><body><main><h1>Intro</h1>"
        '<p>Back to <a href="../records.md">the records</a>.</p></main></body></html>'
    )
    readme = tmp_path / "README.md"
    readme.write_text("# Project\n\nSee [the records](docs/records.md).\n")
    return docs, readme


def test_relative_links_are_xrefs_the_page_and_the_docs_tools_follow(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    docs, readme = _site(tmp_path)
    store.ingest([readme, docs], acl=["everyone"])
    related = {h.uid for h in store.get_related("index").related}
    assert {"records", "guide/intro"} <= related
    resolved = store.resolve_xref("records.md#acls")
    assert resolved.entity is not None and resolved.entity.uid == "records"
    assert resolved.anchor == "acls"
    intro = store.resolve_xref("../guide/intro.html")
    assert intro.entity is not None and intro.entity.uid == "guide/intro"

    app = create_app(store, anonymous=True)
    page = call(app, "GET", "/entity/index").text
    links = re.findall(r'<a href="([^"]+)"', page)
    assert "/entity/records#acls" in links and "/entity/guide%2Fintro" in links
    assert "https://example.org/x" in links
    assert 'href="gone.md"' not in page and 'class="unresolved"' in page  # text, not a 404
    for link in (link for link in links if link.startswith("/entity/")):
        assert call(app, "GET", link).status_code == 200, link
    back = re.findall(r'<a href="([^"]+)"', call(app, "GET", "/entity/guide%2Fintro").text)
    assert "/entity/records" in back
    project = re.findall(r'<a href="([^"]+)"', call(app, "GET", "/entity/README").text)
    assert "/entity/records" in project  # loaded from another folder: found by its path
