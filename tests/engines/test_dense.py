"""The in-process HNSW index: recall against brute force, filtered search that
never leaks, the planner's strategy per share, removal, save/load/watermark and
corrupt files — on a real faiss index with random unit vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_store.engines.embedded.dense import DenseIndex
from knowledge_store.errors import StoreError

DIM = 32
N = 3000
RNG = np.random.default_rng(11)


def unit(rows: int, rng: np.random.Generator = RNG) -> np.ndarray:
    x = rng.standard_normal((rows, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


VECTORS = unit(N)
IDS = np.arange(10_000, 10_000 + N, dtype=np.int64) * 3  # sparse, never 0..n-1
QUERIES = unit(60)


def brute_force(query: np.ndarray, ids: np.ndarray, k: int = 10) -> np.ndarray:
    rows = np.searchsorted(IDS, ids)
    scores = VECTORS[rows] @ query
    return ids[np.argsort(-scores, kind="stable")[:k]]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> DenseIndex:
    ix = DenseIndex(tmp_path_factory.mktemp("dense") / "dense.bin", DIM)
    ix.add(IDS, VECTORS)
    return ix


@pytest.fixture
def planner_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    # At 3000 rows every filtered search would be under the default floor.
    monkeypatch.setattr(DenseIndex, "exact_floor", 50)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return len(set(found.tolist()) & set(truth.tolist())) / len(truth)


def test_unfiltered_recall_against_brute_force(index: DenseIndex) -> None:
    recalls = []
    for q in QUERIES:
        ids, scores, info = index.search(q, 10, allowed=None)
        assert info.strategy == "hnsw" and not info.exhaustive and 0 < info.scanned <= N
        assert list(scores) == sorted(scores, reverse=True)
        np.testing.assert_allclose(scores, VECTORS[np.searchsorted(IDS, ids)] @ q, rtol=1e-4)
        recalls.append(recall(ids, brute_force(q, IDS)))
    assert np.mean(recalls) >= 0.95


@pytest.mark.usefixtures("planner_floor")
@pytest.mark.parametrize(
    ("share", "strategy"),
    [
        (1.0, "hnsw"),
        (0.5, "hnsw-filtered"),
        (0.25, "hnsw-filtered"),
        (0.05, "exact"),
        (0.01, "exact"),
        (0.001, "exact"),
    ],
)
def test_strategy_and_recall_per_share(index: DenseIndex, share: float, strategy: str) -> None:
    rng = np.random.default_rng(int(share * 1000))
    recalls = []
    for q in QUERIES[:30]:
        allowed = np.sort(rng.choice(IDS, max(1, round(share * N)), replace=False))
        ids, _, info = index.search(q, 10, allowed=allowed)
        assert info.strategy == strategy
        assert set(ids.tolist()) <= set(allowed.tolist())
        if strategy == "exact":
            assert info.exhaustive and info.scanned == len(allowed)
            np.testing.assert_array_equal(ids, brute_force(q, allowed))
        recalls.append(recall(ids, brute_force(q, allowed)))
    assert np.mean(recalls) >= 0.95


def test_small_visible_sets_are_scanned_exactly(index: DenseIndex) -> None:
    allowed = IDS[::2][: DenseIndex.exact_floor]  # half the rows, but under the floor
    ids, _, info = index.search(QUERIES[0], 10, allowed=allowed)
    assert info.strategy == "exact" and info.scanned == len(allowed)
    np.testing.assert_array_equal(ids, brute_force(QUERIES[0], allowed))


def test_huge_k_returns_every_row(index: DenseIndex) -> None:
    ids, _, _ = index.search(QUERIES[0], 10**12, allowed=IDS[:7])
    assert sorted(ids.tolist()) == IDS[:7].tolist()


def test_nothing_allowed_finds_nothing(index: DenseIndex) -> None:
    ids, scores, info = index.search(QUERIES[0], 10, allowed=np.empty(0, dtype=np.int64))
    assert len(ids) == 0 and len(scores) == 0 and info.scanned == 0
    unknown = np.array([1, 2, 5], dtype=np.int64)  # ids the index never saw
    assert len(index.search(QUERIES[0], 10, allowed=unknown)[0]) == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    picks=st.lists(st.integers(min_value=0, max_value=N - 1), max_size=2500),
    strangers=st.lists(st.integers(min_value=-5, max_value=10**12), max_size=5),
    k=st.integers(min_value=1, max_value=40),
    q=st.integers(min_value=0, max_value=len(QUERIES) - 1),
)
def test_filtered_search_never_returns_a_non_allowed_id(
    index: DenseIndex, picks: list[int], strangers: list[int], k: int, q: int
) -> None:
    allowed = np.unique(np.concatenate([IDS[picks], np.asarray(strangers, dtype=np.int64)]))
    visible = set(allowed.tolist()) & set(IDS.tolist())  # a "stranger" may be a real id
    ids, scores, info = index.search(QUERIES[q], k, allowed=allowed)
    assert set(ids.tolist()) <= visible
    assert len(ids) == len(scores) <= k
    assert list(scores) == sorted(scores, reverse=True)
    if info.strategy == "exact":
        assert len(ids) == min(k, len(visible))


def test_sparse_ids_map_through_binary_search(tmp_path: Path) -> None:
    ix = DenseIndex(tmp_path / "d.bin", DIM)
    sparse = np.arange(300, dtype=np.int64) * 10**9 + 7  # too sparse for a direct table
    ix.add(sparse, VECTORS[:300])
    allowed = np.concatenate([sparse[::3], [8, 10**15]])
    ids, _, info = ix.search(VECTORS[3], 5, allowed=allowed)
    assert info.strategy == "exact" and info.scanned == 100
    assert ids[0] == sparse[3] and set(ids.tolist()) <= set(sparse[::3].tolist())


def test_remove_and_replace(tmp_path: Path) -> None:
    ix = DenseIndex(tmp_path / "d.bin", DIM)
    ix.add(IDS[:500], VECTORS[:500])
    ix.remove([int(IDS[0]), int(IDS[1]), 424242])
    assert len(ix) == 498
    for allowed in (None, IDS[:200], IDS[:5]):
        ids, _, _ = ix.search(VECTORS[0], 10, allowed=allowed)
        assert IDS[0] not in ids and IDS[1] not in ids
    # Re-adding an id replaces its vector.
    ix.add(IDS[2:3], VECTORS[400:401])
    assert len(ix) == 498
    ids, scores, _ = ix.search(VECTORS[400], 2, allowed=None)
    assert set(ids.tolist()) == {int(IDS[2]), int(IDS[400])}
    assert scores[0] == pytest.approx(1.0, abs=1e-5)
    ids, _, _ = ix.search(VECTORS[2], 1, allowed=IDS[2:3])
    assert ids.tolist() == [int(IDS[2])]  # still there, with its new vector


def test_duplicate_ids_in_one_batch_keep_the_last(tmp_path: Path) -> None:
    ix = DenseIndex(tmp_path / "d.bin", DIM)
    ix.add(np.array([7, 7], dtype=np.int64), VECTORS[:2])
    assert len(ix) == 1
    _, scores, _ = ix.search(VECTORS[1], 1, allowed=None)
    assert scores[0] == pytest.approx(1.0, abs=1e-5)


def test_save_load_watermark_and_tombstone_compaction(tmp_path: Path) -> None:
    path = tmp_path / "d.bin"
    ix = DenseIndex(path, DIM)
    assert ix.watermark == 0 and len(ix) == 0
    ix.add(IDS[:1000], VECTORS[:1000])
    ix.remove(IDS[:400].tolist())  # 40% dead → compacted at save
    ix.save(17)
    again = DenseIndex(path, DIM)
    assert again.watermark == 17 and len(again) == 600
    for q in QUERIES[:10]:
        ids, _, _ = again.search(q, 10, allowed=None)
        assert recall(ids, brute_force(q, IDS[400:1000])) >= 0.8
        assert not set(ids.tolist()) & set(IDS[:400].tolist())
    assert not list(tmp_path.glob("*.tmp*"))


def test_reload_if_newer_picks_up_another_instances_save(tmp_path: Path) -> None:
    path = tmp_path / "d.bin"
    writer, reader = DenseIndex(path, DIM), DenseIndex(path, DIM)
    assert reader.reload_if_newer() is False
    writer.add(IDS[:100], VECTORS[:100])
    writer.save(2)
    assert reader.reload_if_newer() is True
    assert reader.watermark == 2 and len(reader) == 100
    assert reader.reload_if_newer() is False
    # A reader that caught up in memory never goes back to an older file.
    reader.mark(5)
    writer.add(IDS[100:110], VECTORS[100:110])
    writer.save(4)
    assert reader.reload_if_newer() is False
    assert reader.watermark == 5 and len(reader) == 100
    writer.save(6)
    assert reader.reload_if_newer() is True
    assert reader.watermark == 6 and len(reader) == 110
    writer.close()


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: len(b) // 2],  # truncated mid-save (no atomic rename)
        lambda b: b[:100] + bytes([b[100] ^ 0xFF]) + b[101:],  # a flipped byte
        lambda b: b"not an index at all",
        lambda b: b"",
    ],
    ids=["truncated", "bitflip", "garbage", "empty"],
)
def test_corrupt_file_loads_empty(tmp_path: Path, damage: object) -> None:
    path = tmp_path / "d.bin"
    ix = DenseIndex(path, DIM)
    ix.add(IDS[:50], VECTORS[:50])
    ix.save(5)
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    again = DenseIndex(path, DIM)
    assert again.watermark == 0 and len(again) == 0
    assert len(again.search(QUERIES[0], 10, allowed=None)[0]) == 0


def test_file_of_another_dimension_loads_empty(tmp_path: Path) -> None:
    path = tmp_path / "d.bin"
    ix = DenseIndex(path, DIM)
    ix.add(IDS[:10], VECTORS[:10])
    ix.save(3)
    other = DenseIndex(path, DIM * 2)
    assert other.watermark == 0 and len(other) == 0


def test_clear(tmp_path: Path) -> None:
    ix = DenseIndex(tmp_path / "d.bin", DIM)
    ix.add(IDS[:10], VECTORS[:10])
    ix.save(4)
    ix.clear()
    assert len(ix) == 0 and ix.watermark == 0
    assert len(ix.search(QUERIES[0], 5, allowed=None)[0]) == 0


def test_wrong_shapes_are_store_errors(tmp_path: Path) -> None:
    ix = DenseIndex(tmp_path / "d.bin", DIM)
    with pytest.raises(StoreError):
        ix.add(IDS[:2], VECTORS[:3])
    with pytest.raises(StoreError):
        ix.add(IDS[:2], np.zeros((2, DIM + 1), dtype=np.float32))
    with pytest.raises(StoreError):
        ix.search(np.zeros(DIM + 1, dtype=np.float32), 3, allowed=None)


def test_unsaveable_path_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    ix = DenseIndex(blocker / "d.bin", DIM)  # a directory that can't exist
    ix.add(IDS[:3], VECTORS[:3])
    with pytest.raises(StoreError):
        ix.save(1)


@pytest.mark.usefixtures("planner_floor")
def test_a_reused_visible_set_follows_adds_removes_and_compaction(tmp_path: Path) -> None:
    """The prepared selection of one ``allowed`` array is dropped when the rows change."""
    ix = DenseIndex(tmp_path / "d.bin", DIM)
    ix.add(IDS, VECTORS)
    allowed = IDS[::2].copy()  # half visible: filtered HNSW with a cached bitmap
    q = VECTORS[0]  # IDS[0] is visible and is its own nearest neighbour
    ids, _, info = ix.search(q, 5, allowed=allowed)
    assert info.strategy == "hnsw-filtered" and ids[0] == IDS[0]
    assert ix.search(q, 5, allowed=allowed)[0].tolist() == ids.tolist()  # from the cache

    ix.remove([int(IDS[0])])
    ids, _, _ = ix.search(q, 5, allowed=allowed)
    assert int(IDS[0]) not in ids.tolist() and set(ids.tolist()) <= set(allowed.tolist())

    ix.add(IDS[:1], VECTORS[:1])  # back, at a new row
    ix.add(IDS[1:2], VECTORS[0:1])  # an invisible id with the very same vector
    ids, _, _ = ix.search(q, 5, allowed=allowed)
    assert ids[0] == IDS[0] and int(IDS[1]) not in ids.tolist()

    ix.compact()
    ids, _, _ = ix.search(q, 5, allowed=allowed)
    assert ids[0] == IDS[0] and set(ids.tolist()) <= set(allowed.tolist())

    # Another array with the same ids is an equal selection, not a stale one.
    again = allowed.copy()
    assert ix.search(q, 5, allowed=again)[0].tolist() == ids.tolist()
