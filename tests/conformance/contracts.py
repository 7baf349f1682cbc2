"""Collect a module's contract tests so a conformance module can run them on every engine.

Also returns the module's own helper fixtures (not the store fixtures).
A contract test is a ``test_*`` function of a suite module that takes one of the
store fixtures this folder re-defines per engine; its marks (parametrize,
hypothesis settings) come with it. Tests that reach into one engine's internals
are named in ``skip`` and have an engine-neutral counterpart here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

STORE_FIXTURES = frozenset({"store", "estate_store", "fields_store", "estate"})


def _is_fixture(obj: object) -> bool:
    return type(obj).__name__ == "FixtureFunctionDefinition" or hasattr(
        obj, "_pytestfixturefunction"
    )


def contract_tests(
    module: ModuleType, *, skip: Iterable[str] = (), fixtures: Iterable[str] = STORE_FIXTURES
) -> dict[str, Callable[..., Any]]:
    wanted = frozenset(fixtures)
    skipped = set(skip)
    out: dict[str, Callable[..., Any]] = {}
    for name, fn in vars(module).items():
        if _is_fixture(fn) and name not in STORE_FIXTURES and name not in skipped:
            out[name] = fn  # a helper fixture of that module (not a store: those are ours)
            continue
        if not name.startswith("test_") or not callable(fn) or name in skipped:
            continue
        target = getattr(fn, "hypothesis", None)
        inner = getattr(target, "inner_test", fn) if target is not None else fn
        params = set(inspect.signature(inner).parameters)
        if params & wanted:
            out[name] = fn
    unknown = skipped - set(vars(module))
    assert not unknown, f"skip names tests that don't exist: {sorted(unknown)}"
    return out
