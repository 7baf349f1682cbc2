"""The corruption corpus: damage done below the store, and what every command must then do.

Issue 25, item 9: 50 flipped bytes in one Tantivy segment file made every command of
the store fail (``stats``, ``sql`` and ``ks rebuild`` included; a ``.term`` file: a Rust
panic), and flipped bytes in the catalog's payload went unseen. Each case here damages
a seeded store one way — bytes flipped in each kind of index file, files truncated or
gone, rows changed behind the store's back — and :func:`case_problem` runs the store's
commands through the CLI, in this order, and says what misbehaved (None: nothing):

1. ``ks check --json`` finds the damage: exit 1, the case's kinds among its findings,
   the entity damaged among their uids (a derived index is moved aside and rebuilt on
   open: reported as repaired);
2. every command answers — ``stats``, ``sql``, ``aggregate``, ``graph``, ``query``,
   ``lexical``, ``vector``, ``search`` — with exit 0 and JSON; when only a derived index
   of the embedded engine was damaged, with the very answers of the store before the
   damage (it was repaired on open);
3. ``ks rebuild`` works, and when only derived data was damaged, every answer is again
   the one before the damage;
4. ``ks check --json`` again: clean (exit 0) when only derived data was damaged; the
   catalog's own damage stays (the catalog is the truth: ingest those entities again).

Cases whose damage is random (bytes flipped anywhere in the catalog) only have to fail
safely: every command answers, or says ``store_error`` in the one error shape — never a
traceback, a panic or another exit status. tests/engines/test_corruption.py runs every
case on both engines; bench/bad_input.py prints the figures with the bad-input corpus,
and bench/kill_soak.py ``--corrupt`` damages index files between kills.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knowledge_store.ingest.embedding import Embedder
from knowledge_store.store import KnowledgeStore

Cli = Callable[..., tuple[int, Any]]

UIDS = 40
#: The entity whose rows the catalog cases change.
VICTIM = "c:7"
FLIPS = 50


def record(n: int, variant: int = 0) -> dict[str, Any]:
    return {
        "uid": f"c:{n}",
        "type": "page" if n % 2 else "note",
        "title": f"Corruption {n}",
        "body": f"# Corruption {n}\n\nkiwi {n} in variant {variant}, marker zq{n:03d}qz.\n\n"
        f"## Second\n\nbanana {n} and more words about pages, chunks and segments.",
        "created_at": f"{2000 + n:04d}-01-01",
        "attributes": {"owner": f"team-zx{n:03d}xz"},
        "acl": [["everyone"], ["group:g"], ["user:a", "group:h"]][n % 3],
        "edges": [{"label": "xref", "to": f"c:{(n + 1) % UIDS}"}],
    }


def seed(store: KnowledgeStore) -> None:
    """Several publishes, so that the lexical index has several segments and delete files."""
    store.ingest_records([record(n) for n in range(0, UIDS // 2)])
    store.ingest_records([record(n) for n in range(UIDS // 2, UIDS)])
    store.delete(["c:3", "c:13"])
    store.ingest_records([record(3, 1), record(13, 1), record(21, 1)])
    store.load_memberships([("group:g", "user:m"), ("group:h", "group:g")])


#: The commands of step 2, and the identity they read as.
READS: tuple[tuple[str, ...], ...] = (
    ("stats",),
    ("sql", "--k", "100"),
    ("aggregate", "count", "--by", "type"),
    ("graph", "c:1", "--depth", "2"),
    ("query", "MATCH (n)-[:xref]->(m) RETURN n.uid, m.uid ORDER BY n.uid"),
    ("lexical", "kiwi banana", "--k", "100"),
    ("vector", "kiwi banana", "--k", "100"),
    ("search", "kiwi banana", "--k", "50"),
)
AS = ("--as", "user:m")
#: Per command, what of its answer must be as before the damage (volatile keys left out).
_KEEP = {"stats": ("entities", "chunks", "edges", "model", "dimension", "is_empty")}


@dataclass(frozen=True)
class Corruption:
    """One way to damage a store, and what ``ks check`` must say of it."""

    name: str
    engine: str  # "embedded" or "postgres"
    damage: Callable[[str, random.Random], None]
    #: Kinds of damage ``ks check`` must report (all of them).
    found: frozenset[str] = frozenset()
    #: Only derived data is damaged: every answer is as before, and a rebuild leaves no damage.
    derived: bool = True
    #: The damage lands anywhere (or where every answer reads it): the commands only have to
    #: fail safely — answer, or say store_error.
    random: bool = False
    #: ``ks check`` must name this entity.
    uid: str | None = None
    #: ``ks check`` must report it (False: what the damage does is up to chance — a byte of
    #: the sidecar or of Tantivy's file list may change nothing that matters).
    reported: bool = True


# -- embedded: bytes on disk -----------------------------------------------------------------------
def flip(path: Path, rng: random.Random, flips: int = FLIPS, *, start: int = 0) -> None:
    """Invert ``flips`` random bytes of ``path`` (from offset ``start``)."""
    data = bytearray(path.read_bytes())
    if len(data) <= start:
        raise AssertionError(f"{path} has no byte past {start} to flip")
    for _ in range(flips):
        i = rng.randrange(start, len(data))
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _segment_file(suffix: str) -> Callable[[str, random.Random], None]:
    def damage(location: str, rng: random.Random) -> None:
        files = sorted((Path(location) / "lexical").glob(f"*.{suffix}"), key=lambda p: p.name)
        if not files:
            raise AssertionError(f"the seeded store has no .{suffix} file")
        flip(rng.choice(files), rng)

    return damage


def _lexical_file(name: str, how: str = "flip") -> Callable[[str, random.Random], None]:
    def damage(location: str, rng: random.Random) -> None:
        target = Path(location) / "lexical" / name
        if how == "flip":
            flip(target, rng, flips=5)
        elif how == "empty":
            target.write_bytes(b"")
        else:
            raise AssertionError(how)

    return damage


def _segment(how: str) -> Callable[[str, random.Random], None]:
    def damage(location: str, rng: random.Random) -> None:
        files = sorted((Path(location) / "lexical").glob("*.idx"), key=lambda p: p.name)
        target = rng.choice(files)
        if how == "truncate":
            target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
        elif how == "delete":
            target.unlink()
        else:
            raise AssertionError(how)

    return damage


def _dense(how: str) -> Callable[[str, random.Random], None]:
    def damage(location: str, rng: random.Random) -> None:
        target = Path(location) / "dense.hnsw"
        if how == "flip":
            flip(target, rng)
        elif how == "truncate":
            target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
        elif how == "empty":
            target.write_bytes(b"")
        else:
            raise AssertionError(how)

    return damage


def _catalog_bytes(needle: str, *, xor: int = 0x20) -> Callable[[str, random.Random], None]:
    """Change one byte of ``needle`` in the catalog file, every copy of it, in place: the
    database's pages stay sound (its own check says ok), its payload is not what was
    published. ``xor`` 0x20: a letter to its other case (still text); 0x80: not UTF-8."""

    def damage(location: str, rng: random.Random) -> None:
        path = Path(location) / "catalog.sqlite"
        _checkpoint(path)
        data = bytearray(path.read_bytes())
        found = 0
        at = data.find(needle.encode())
        while at >= 0:
            data[at + 1] ^= xor  # the second byte: a letter in every needle here
            found += 1
            at = data.find(needle.encode(), at + 1)
        if not found:
            raise AssertionError(f"{needle!r} is not in the catalog file")
        path.write_bytes(bytes(data))

    return damage


def _catalog_random(location: str, rng: random.Random) -> None:
    path = Path(location) / "catalog.sqlite"
    _checkpoint(path)
    flip(path, rng, start=4096)  # past the header page: the file still opens as a database


def _checkpoint(path: Path) -> None:
    """Fold the WAL into the file, so that what a case changes is what SQLite reads."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


# -- both engines: rows changed behind the store's back -------------------------------------------
def _sql(*statements: str) -> Callable[[str, random.Random], None]:
    """Statements run on the catalog directly (``:victim`` is the victim's row id)."""

    def damage(location: str, rng: random.Random) -> None:
        if location.startswith(("postgresql://", "postgres://")):
            _postgres(location, statements)
            return
        conn = sqlite3.connect(Path(location) / "catalog.sqlite")
        try:
            victim = conn.execute("SELECT id FROM entities WHERE uid = ?", (VICTIM,)).fetchone()[0]
            for statement in statements:
                conn.execute(statement.replace(":victim", str(int(victim))))
            conn.commit()
        finally:
            conn.close()

    return damage


def _postgres(location: str, statements: tuple[str, ...]) -> None:
    import psycopg
    from psycopg import sql

    from knowledge_store.engines.postgres.engine import split_location

    url, schema = split_location(location)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("SET search_path TO {}, public").format(sql.Identifier(schema or "ks"))
        )
        row = conn.execute("SELECT id FROM entities WHERE uid = %s", (VICTIM,)).fetchone()
        assert row is not None
        for statement in statements:
            conn.execute(statement.replace(":victim", str(int(row[0]))))  # type: ignore[arg-type]


_ZERO_VECTOR = {
    "embedded": "UPDATE chunk_vectors SET embedding = zeroblob(length(embedding))"
    " WHERE id = (SELECT min(id) FROM chunks WHERE entity = :victim)",
    "postgres": "UPDATE chunks SET embedding = (SELECT array_fill(0, ARRAY[vector_dims(embedding)])"
    "::vector) WHERE id = (SELECT min(id) FROM chunks WHERE entity = :victim)",
}


def _both(name: str, statements: tuple[str, ...], found: set[str], **kw: Any) -> list[Corruption]:
    return [
        Corruption(name, engine, _sql(*statements), frozenset(found), uid=VICTIM, **kw)
        for engine in ("embedded", "postgres")
    ]


CASES: tuple[Corruption, ...] = (
    # -- the lexical index's files (issue 25: every command failed) ---------------------------
    *(
        Corruption(f"{FLIPS} bytes flipped in a .{s} file", "embedded", _segment_file(s))
        for s in ("store", "pos", "idx", "term", "fieldnorm", "fast", "del")
    ),
    Corruption("bytes flipped in meta.json", "embedded", _lexical_file("meta.json")),
    Corruption("meta.json emptied", "embedded", _lexical_file("meta.json", "empty")),
    Corruption(
        "bytes flipped in .managed.json",
        "embedded",
        _lexical_file(".managed.json"),
        reported=False,
    ),
    Corruption(
        "bytes flipped in the lexical sidecar",
        "embedded",
        _lexical_file("ks-lexical.json"),
        reported=False,
    ),
    Corruption("a segment's postings cut in half", "embedded", _segment("truncate")),
    Corruption("a segment's postings deleted", "embedded", _segment("delete")),
    # -- the dense index's file ----------------------------------------------------------------
    Corruption(f"{FLIPS} bytes flipped in dense.hnsw", "embedded", _dense("flip")),
    Corruption("dense.hnsw cut in half", "embedded", _dense("truncate")),
    Corruption("dense.hnsw emptied", "embedded", _dense("empty")),
    # -- the catalog's payload: flipped bytes that SQLite's own check does not see ----------------
    Corruption(
        "a letter of a body flipped in the catalog file",
        "embedded",
        _catalog_bytes("zq007qz"),
        frozenset({"content_hash"}),
        derived=False,
        uid=VICTIM,
    ),
    Corruption(
        "a letter of an attribute flipped in the catalog file",
        "embedded",
        _catalog_bytes("team-zx007xz"),
        frozenset({"content_hash"}),
        derived=False,
        uid=VICTIM,
    ),
    Corruption(
        "a byte of a body made invalid UTF-8 in the catalog file",
        "embedded",
        _catalog_bytes("zq007qz", xor=0x80),
        frozenset({"unreadable"}),
        derived=False,
        random=True,
        uid=VICTIM,
    ),
    Corruption(
        f"{FLIPS} bytes flipped anywhere in the catalog file",
        "embedded",
        _catalog_random,
        derived=False,
        random=True,
    ),
    # -- rows changed behind the store's back, both engines -----------------------------------
    *_both(
        "a body updated",
        ("UPDATE entity_bodies SET body = body || ' tampered' WHERE entity = :victim",),
        {"content_hash"},
        derived=False,
    ),
    *_both(
        "a title updated",
        ("UPDATE entities SET title = 'Tampered' WHERE id = :victim",),
        {"content_hash"},
        derived=False,
    ),
    *_both(
        "an edge deleted",
        ("DELETE FROM edges WHERE src = 'c:7'",),
        {"content_hash"},
        derived=False,
    ),
    *_both(
        "a chunk's text updated",
        ("UPDATE chunks SET text = 'tampered' WHERE entity = :victim",),
        {"chunk_text"},
        derived=False,
    ),
    *_both(
        "a chunk's vector zeroed",
        (_ZERO_VECTOR["embedded"],),
        {"vectors"},
        derived=False,
    )[:1],
    *_both(
        "a chunk's vector zeroed",
        (_ZERO_VECTOR["postgres"],),
        {"vectors"},
        derived=False,
    )[1:],
    Corruption(
        "a chunk's full-text vector emptied",
        "postgres",
        _sql("UPDATE chunks SET tsv = ''::tsvector WHERE entity = :victim"),
        frozenset({"text_index"}),
        uid=VICTIM,
    ),
    Corruption(
        "a chunk's postings deleted",
        "postgres",
        _sql(
            "DELETE FROM lexical_postings WHERE chunk IN"
            " (SELECT id FROM chunks WHERE entity = :victim)"
        ),
        frozenset({"bm25_statistics"}),
        uid=VICTIM,
    ),
    Corruption(
        "an index left invalid (a CREATE INDEX CONCURRENTLY that failed)",
        "postgres",
        _sql(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'chunks_by_entity'::regclass"
        ),
        frozenset({"catalog_integrity"}),  # `ks rebuild` reindexes the chunks table
    ),
    Corruption(
        "a field's document count changed",
        "postgres",
        _sql("UPDATE lexical_fields SET docs = docs + 3 WHERE field = 0"),
        frozenset({"bm25_statistics"}),
    ),
)


def cases(engine: str) -> tuple[Corruption, ...]:
    return tuple(c for c in CASES if c.engine == engine)


# -- running a case -------------------------------------------------------------------------------
@dataclass
class Tally:
    """tried / failed safely / misbehaved."""

    tried: int = 0
    safe: int = 0
    misbehaved: list[str] = field(default_factory=list)

    def record(self, what: str, problem: str | None) -> None:
        self.tried += 1
        if problem is None:
            self.safe += 1
        else:
            self.misbehaved.append(f"{what}: {problem}")

    def line(self, label: str) -> str:
        return (
            f"{label}: {self.tried} tried / {self.safe} failed safely /"
            f" {len(self.misbehaved)} misbehaved"
        )


def run_corpus(
    engine: str,
    new_location: Callable[[str], str],
    embedder: Embedder,
    cli_of: Callable[[str], Cli],
) -> Tally:
    """Every case of ``engine``, each on a seeded store of its own; the figures.

    ``new_location(name)``: where a new store goes (a directory, or a fresh schema's URL);
    ``cli_of(location)``: runs ``ks --store location …`` and returns ``(exit, JSON)``. The
    embedded cases share one seeded store, copied (the same chunk ids, the same answers).
    """
    tally = Tally()
    pristine: str | None = None
    before: dict[str, Any] = {}
    for n, case in enumerate(cases(engine)):
        if engine == "embedded":
            if pristine is None:
                pristine = new_location("seeded")
                with KnowledgeStore.open(pristine, embedder=embedder) as store:
                    seed(store)
                before = answers(cli_of(pristine))
            location = new_location(f"case-{n}")
            shutil.copytree(pristine, location)
        else:
            location = new_location(f"case-{n}")
            with KnowledgeStore.open(location, embedder=embedder) as store:
                seed(store)
            before = answers(cli_of(location))
        case.damage(location, random.Random(n))
        tally.record(case.name, case_problem(case, cli_of(location), before))
    return tally


def answers(cli: Cli) -> dict[str, Any]:
    """What the read commands answer (the comparable part), by command."""
    out: dict[str, Any] = {}
    for command in READS:
        code, answer = cli(*command, *([] if command[0] == "stats" else AS), "--json")
        if code != 0 or not isinstance(answer, dict) or "error" in answer:
            raise AssertionError(f"{command[0]}: exit {code}, {str(answer)[:300]}")
        out[command[0]] = _comparable(command[0], answer)
    return out


def _comparable(name: str, answer: dict[str, Any]) -> Any:
    if name in _KEEP:
        return {k: answer.get(k) for k in _KEEP[name]}
    if name in ("lexical", "vector"):  # every match (k is above the chunks there are); BM25's
        # scores move with the segments (their deleted documents count until a merge)
        return sorted((h["uid"], h["chunk_id"]) for h in answer["hits"])
    if name == "search":
        return sorted(r["uid"] for r in answer["results"])
    answer = dict(answer)
    answer.pop("content_root", None)
    answer.pop("vector", None)
    return answer


def _names(case: Corruption, report: dict[str, Any]) -> bool:
    """Whether ``report`` has every kind of ``case``, naming its entity."""
    kinds = {f["kind"] for f in report["damage"]}
    named = case.uid is None or any(case.uid in f["uids"] for f in report["damage"])
    return case.found <= kinds and named


def _changed(before: dict[str, Any], now: dict[str, Any], engine: str = "embedded") -> list[str]:
    """The commands whose answers differ. pgvector's HNSW gives an approximate top-k (at most
    ``ef_search`` rows), which a REINDEX changes: its vector answers are left out."""
    skip = {"vector"} if engine == "postgres" else set()
    return sorted(k for k in now if k not in skip and now[k] != before.get(k))


def _safe(code: int, answer: Any) -> str | None:
    """None when an answer is an answer or the one error shape with store_error; else why not."""
    if code == 0 and isinstance(answer, dict) and "error" not in answer:
        return None
    if (
        code == 1
        and isinstance(answer, dict)
        and answer.get("error", {}).get("code") == "store_error"
    ):
        return None
    return f"exit {code}: {str(answer)[:300]}"


def case_problem(case: Corruption, cli: Cli, before: dict[str, Any]) -> str | None:
    """Steps 1–4 of the module docstring on a store ``case`` has damaged; what misbehaved."""
    try:
        return _steps(case, cli, before)
    except BaseException as exc:  # a panic (BaseException) or anything else escaping
        if isinstance(exc, KeyboardInterrupt):
            raise
        return f"{type(exc).__module__}.{type(exc).__name__}: {str(exc)[:300]}"


def _steps(case: Corruption, cli: Cli, before: dict[str, Any]) -> str | None:
    code, report = cli("check", "--json")
    if case.random:  # damage found (exit 1, a report), none, or a store_error: all safe
        found = code == 1 and isinstance(report, dict) and report.get("ok") is False
        if not found and (problem := _safe(code, report)) is not None:
            return f"check: {problem}"
        if case.found and not (found and _names(case, report)):
            return f"check did not find {sorted(case.found)} of {case.uid}: {str(report)[:300]}"
        for command in READS:
            args = [*command, *([] if command[0] == "stats" else AS), "--json"]
            if (problem := _safe(*cli(*args))) is not None:
                return f"{command[0]}: {problem}"
        if (problem := _safe(*cli("rebuild", "--json"))) is not None:
            return f"rebuild: {problem}"
        return None
    if not isinstance(report, dict) or "error" in report or code not in (0, 1):
        return f"check: exit {code}, {str(report)[:300]}"
    if case.reported and (code != 1 or report.get("ok") is not False):
        return f"check did not find the damage: exit {code}, {str(report)[:300]}"
    kinds = {f["kind"] for f in report["damage"]}
    if not case.found <= kinds:
        return f"check found {sorted(kinds)}, not {sorted(case.found)}"
    repaired = any(f["repaired"] for f in report["damage"])
    if case.reported and case.derived and not case.found and not repaired:
        return f"check found {sorted(kinds)}, none repaired on open"
    if case.uid is not None and not any(case.uid in f["uids"] for f in report["damage"]):
        return f"check does not name {case.uid}: {report['damage']}"
    try:
        now = answers(cli)
    except AssertionError as exc:
        return str(exc)
    if case.derived and case.engine == "embedded" and (changed := _changed(before, now)):
        return f"answers changed after the repair on open: {changed}"
    code, rebuilt = cli("rebuild", "--json")
    if code != 0:
        return f"rebuild: exit {code}, {str(rebuilt)[:300]}"
    if case.derived and (changed := _changed(before, answers(cli), case.engine)):
        return f"answers changed after the rebuild: {changed}"
    code, again = cli("check", "--json")
    if case.derived:
        if code != 0 or not isinstance(again, dict) or again.get("ok") is not True:
            return f"check after the rebuild: exit {code}, {str(again)[:300]}"
        return None
    left = {f["kind"] for f in (again or {}).get("damage", [])}
    if code != 1 or not left or not left <= _CATALOG_KINDS:
        return f"check after the rebuild: exit {code}, kinds {sorted(left)}"
    return None


#: Damage a rebuild can't repair: it is in the catalog, the source of truth.
_CATALOG_KINDS = {
    "catalog_integrity",
    "unreadable",
    "content_hash",
    "chunk_text",
    "orphan_chunks",
    "orphan_edges",
    "vectors",
}
