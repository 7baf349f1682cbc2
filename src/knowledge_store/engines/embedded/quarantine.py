"""Moving a damaged derived index aside, so that it can be inspected, before it is rebuilt.

A derived index (``lexical/``, ``dense.hnsw``) whose files fail their checksums is never
deleted: the holder of the store's write lock renames it to
``<name>.damaged-<UTC time>`` beside it (a number after the time if that name is taken)
and writes there, or beside a file, ``<that name>.json``: why, when, by which process.
The rebuild then starts from an empty index. Nothing reads a quarantined index again;
the operator removes it once inspected (``ks check`` lists them).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["QUARANTINED", "Quarantined", "quarantine", "quarantined"]

#: The name of a quarantined index beside the store's own files (and its record, for a file).
QUARANTINED = re.compile(r"(?:lexical|dense\.hnsw)\.damaged-\d{8}T\d{6}Z(?:-\d+)?(?:\.json)?")
_RECORD = "ks-damage.json"


@dataclass(frozen=True)
class Quarantined:
    """A quarantined index: where it is, why it was moved there and when (seconds since
    the epoch; None when its record is unreadable)."""

    path: str
    reason: str
    at: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "reason": self.reason, "at": self.at}


def quarantine(path: Path, reason: str) -> Path:
    """Rename the index at ``path`` (a directory or a file) aside and record ``reason``; the
    new path. OSError as the system raises it (the caller decides what then)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    os.rename(path, target)
    record = {"index": path.name, "reason": reason, "at": time.time(), "pid": os.getpid()}
    where = target / _RECORD if target.is_dir() else target.with_name(target.name + ".json")
    where.write_text(json.dumps(record))
    return target


def quarantined(store: Path) -> list[Quarantined]:
    """The quarantined indexes in store directory ``store``, oldest first."""
    found: list[Quarantined] = []
    try:
        names = sorted(p.name for p in store.iterdir())
    except OSError:
        return found
    for name in names:
        if not QUARANTINED.fullmatch(name) or name.endswith(".json"):
            continue
        target = store / name
        where = target / _RECORD if target.is_dir() else store / (name + ".json")
        try:
            record = json.loads(where.read_text())
        except (OSError, ValueError):
            record = None
        record = record if isinstance(record, dict) else {}
        at = record.get("at")
        found.append(
            Quarantined(
                str(target),
                str(record.get("reason", "")),
                float(at) if isinstance(at, int | float) else None,
            )
        )
    return found
