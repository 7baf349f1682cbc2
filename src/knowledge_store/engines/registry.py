"""The engines by name, each chosen by the scheme of a store location (STYLE habit 4).

A location with a registered scheme prefix (``postgresql://``, ``postgres://``, ``pg:``)
opens that scheme's engine; any other location is a directory, the default engine's. An
engine is registered by name with its schemes and where its opener lives (imported on
first use: an engine's driver — psycopg for PostgreSQL — is an extra, needed only by the
stores that use it). A new engine (Citus) is one :func:`register_engine` call.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowledge_store.errors import InvalidRequest

if TYPE_CHECKING:
    from knowledge_store.engines.base import Engine, EngineSettings

__all__ = [
    "DEFAULT_ENGINE",
    "EngineEntry",
    "engine_for",
    "engine_named",
    "open_engine",
    "register_engine",
]

#: ``opener(location, settings, create)`` → the engine.
Opener = Callable[[str, "EngineSettings", bool], "Engine"]


@dataclass(frozen=True)
class EngineEntry:
    """A registered engine: its name, the location prefixes it takes, its opener
    (``module:function``, imported on first use) and the extra that installs its driver."""

    name: str
    schemes: tuple[str, ...]
    opener: str
    extra: str | None = None
    #: The module that backs a store of this engine up and restores one (``backup_store``,
    #: ``restore_store``: ``engines/backup.py``); None: the engine has no backup.
    backup: str | None = None

    def backups(self) -> Any:
        """The engine's backup module (``backup``), imported on first use."""
        if self.backup is None:
            raise InvalidRequest(
                f"the {self.name} engine has no backup; use ks export", engine=self.name
            )
        return importlib.import_module(self.backup)

    def open(self, location: str, settings: EngineSettings, create: bool) -> Engine:
        module, _, function = self.opener.partition(":")
        try:
            loaded = importlib.import_module(module)
        except ImportError as exc:
            hint = f" (pip install 'knowledge-store[{self.extra}]')" if self.extra else ""
            raise InvalidRequest(
                f"the {self.name} engine can't be loaded: {exc}{hint}", engine=self.name
            ) from exc
        opener: Opener = getattr(loaded, function)
        return opener(location, settings, create)


_ENGINES: dict[str, EngineEntry] = {}
#: The engine of a location no registered scheme names: a directory.
DEFAULT_ENGINE = "embedded"


def register_engine(entry: EngineEntry) -> None:
    """Register (or replace) the engine ``entry.name``."""
    _ENGINES[entry.name] = entry


def engine_for(location: str) -> EngineEntry:
    """The engine whose scheme ``location`` starts with, else the default engine's."""
    for entry in _ENGINES.values():
        if entry.schemes and location.startswith(entry.schemes):
            return entry
    return _ENGINES[DEFAULT_ENGINE]


def engine_named(name: str) -> EngineEntry:
    """The engine registered as ``name`` (InvalidRequest listing them when none is)."""
    entry = _ENGINES.get(name)
    if entry is None:
        raise InvalidRequest(
            f"no engine named {name!r}; the engines are: {', '.join(_ENGINES)}",
            engine=name,
            allowed=list(_ENGINES),
        )
    return entry


def open_engine(
    location: str | Path, settings: EngineSettings | None = None, *, create: bool = True
) -> Engine:
    """The engine of ``location`` (:func:`engine_for`), opened with ``settings``.

    ``create=False`` opens only a store that exists: anything else is ``NotFound``
    ("no store at …"), and nothing is left behind where none was.
    """
    from knowledge_store.engines.base import EngineSettings

    text = str(location)
    return engine_for(text).open(text, settings or EngineSettings(), create)


register_engine(
    EngineEntry(
        "embedded",
        (),
        "knowledge_store.engines.embedded.engine:open_store",
        backup="knowledge_store.engines.embedded.backup",
    )
)
register_engine(
    EngineEntry(
        "postgres",
        ("postgresql://", "postgres://", "pg:"),
        "knowledge_store.engines.postgres.engine:open_store",
        extra="postgres",
        backup="knowledge_store.engines.postgres.backup",
    )
)
