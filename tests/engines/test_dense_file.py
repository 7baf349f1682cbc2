"""The dense index file (engines/embedded/densefile.py): a reader maps the index instead of
copying it, checks every block's CRC, copies it before its first change, and still reads
files written by the previous format — on a real faiss index."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from knowledge_store.engines.embedded import densefile
from knowledge_store.engines.embedded.dense import DenseIndex, file_watermark
from knowledge_store.engines.embedded.generation import faiss

DIM = 16
RNG = np.random.default_rng(5)
VECTORS = RNG.standard_normal((400, DIM)).astype(np.float32)
VECTORS /= np.linalg.norm(VECTORS, axis=1, keepdims=True)
IDS = np.arange(400, dtype=np.int64) * 7 + 3


def saved(path: Path, rows: int = 300, watermark: int = 4) -> DenseIndex:
    ix = DenseIndex(path, DIM)
    ix.add(IDS[:rows], VECTORS[:rows])
    ix.save(watermark)
    return ix


def top(ix: DenseIndex, row: int, k: int = 5) -> list[int]:
    return [int(i) for i in ix.search(VECTORS[row], k, allowed=None)[0]]


def test_a_reader_maps_the_file_and_answers_like_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "dense.hnsw"
    writer = saved(path)
    assert path.read_bytes()[:8] == densefile.MAGIC
    reader = DenseIndex(path, DIM)
    assert reader.generation().mapping is not None  # viewed in place, not copied
    assert reader.watermark == 4 and len(reader) == 300
    for row in (0, 17, 299):
        assert top(reader, row) == top(writer, row)
        assert top(reader, row)[0] == IDS[row]


def test_the_first_change_copies_a_mapped_index(tmp_path: Path) -> None:
    path = tmp_path / "dense.hnsw"
    saved(path)
    reader = DenseIndex(path, DIM)
    pinned = reader.generation()
    reader.add(IDS[300:350], VECTORS[300:350])  # faiss would abort on a viewed index
    assert reader.generation().mapping is None and pinned.mapping is not None
    assert len(reader) == 350 and top(reader, 320)[0] == IDS[320]
    # The pinned generation still answers from the mapped file, without the new rows.
    found = pinned.search(VECTORS[320], 5, allowed=None)[0]
    assert IDS[320] not in set(int(i) for i in found)
    reader.save(5)
    again = DenseIndex(path, DIM)
    assert again.watermark == 5 and len(again) == 350 and top(again, 320)[0] == IDS[320]


def test_a_file_replaced_under_a_mapped_reader_leaves_it_answering(tmp_path: Path) -> None:
    path = tmp_path / "dense.hnsw"
    writer = saved(path)
    reader = DenseIndex(path, DIM)
    writer.add(IDS[300:], VECTORS[300:])
    writer.save(9)  # an atomic rename: the reader's map keeps the old inode
    assert top(reader, 5)[0] == IDS[5] and len(reader) == 300
    assert reader.reload_if_newer() is True
    assert len(reader) == 400 and top(reader, 390)[0] == IDS[390]


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-1],  # the end magic cut
        lambda b: b[:-20] + bytes([b[-20] ^ 0x01]) + b[-19:],  # the CRC table
        lambda b: b[: len(b) // 3] + bytes([b[len(b) // 3] ^ 0x80]) + b[len(b) // 3 + 1 :],
        lambda b: b[:-30] + b"\0" * 30,  # a torn tail
        lambda b: densefile.MAGIC + b[8:40],
    ],
    ids=["no-end-magic", "crc-table", "faiss-region", "torn-tail", "header-only"],
)
def test_damage_anywhere_is_refused(tmp_path: Path, damage: object) -> None:
    path = tmp_path / "dense.hnsw"
    saved(path)
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    with pytest.raises((ValueError, RuntimeError)):
        densefile.read(path, DIM)
    again = DenseIndex(path, DIM)  # loads empty; the catalog rebuilds it
    assert again.watermark == 0 and len(again) == 0


def test_many_blocks_are_checked_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(densefile, "_BLOCK", 4096)
    path = tmp_path / "dense.hnsw"
    saved(path, rows=400)
    data = path.read_bytes()
    (blocks,) = struct.unpack("<I", data[-12:-8])
    assert blocks == -(-(len(data) - 12 - 4 * blocks) // 4096) and blocks > 4
    assert len(DenseIndex(path, DIM)) == 400
    for at in (5000, 4096 * (blocks - 1) + 3):  # a byte in a middle block, in the last one
        path.write_bytes(data[:at] + bytes([data[at] ^ 0x10]) + data[at + 1 :])
        assert len(DenseIndex(path, DIM)) == 0


def write_format_1(path: Path, ix: DenseIndex) -> None:
    """The previous file format, as 0.x wrote it (blake2b trailer, no block table)."""
    gen = ix.generation()
    header = json.dumps(
        {"format": 1, "library": "faiss-hnsw-flat", "dimension": DIM, "rows": gen.rows}
        | {"watermark": gen.watermark}
    ).encode()
    body = b"KSDENSE1" + struct.pack("<I", len(header)) + header
    body += gen.row_ids.astype("<i8").tobytes() + gen.live.astype(np.uint8).tobytes()
    body += faiss.serialize_index(gen.index).tobytes()
    path.write_bytes(body + hashlib.blake2b(body, digest_size=32).digest())


def test_a_format_1_file_still_opens(tmp_path: Path) -> None:
    old = tmp_path / "old.hnsw"
    ix = saved(tmp_path / "new.hnsw")
    write_format_1(old, ix)
    assert file_watermark(old) == 4
    reader = DenseIndex(old, DIM)
    assert reader.generation().mapping is None  # read into a private copy, as before
    assert len(reader) == 300 and top(reader, 42) == top(ix, 42)
    reader.add(IDS[300:310], VECTORS[300:310])
    reader.save(6)  # rewritten in the current format
    assert old.read_bytes()[:8] == densefile.MAGIC and len(DenseIndex(old, DIM)) == 310
