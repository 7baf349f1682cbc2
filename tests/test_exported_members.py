"""The public surface is explicit: ``__all__`` is sorted, complete and importable."""

from __future__ import annotations

import knowledge_store


def test_all_is_sorted_and_importable() -> None:
    names = knowledge_store.__all__
    # isort style, as ruff RUF022 checks: CONSTANTS, then CamelCase, then the rest
    assert names == sorted(
        names, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n)
    )
    for name in names:
        assert hasattr(knowledge_store, name), name


def test_no_public_name_is_left_out() -> None:
    public = {
        name
        for name, value in vars(knowledge_store).items()
        if not name.startswith("_") and type(value).__name__ != "module"
    }
    assert public <= set(knowledge_store.__all__)
