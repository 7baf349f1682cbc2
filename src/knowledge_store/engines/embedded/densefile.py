"""The dense index's file: written atomically by a writer, mapped (not copied) by a reader.

Format 2 (written since 0.x; format 1 is still read)::

    b"KSDENSE2" | u32 header length | header JSON | row ids (i64 LE) | live flags (u8)
    | faiss index | crc32 of each block of everything before (u32 LE each)
    | u32 block count | b"KSDENSE2"

Opening a store at 1M chunks used to take ~10 s in this file alone: a blake2b
over 1.8 GB (4 s) and faiss reading through a Python callback (4 s) into a
private copy. Format 2 checks per-block CRC32s on every core (zlib releases the
GIL), then lets faiss *view* the index where it lies in the page cache
(``ZeroCopyIOReader`` over a read-only memory map, ~0.2 s at 1M), so readers in
several processes share one copy. A mapped index is read-only: the owner makes a
private copy (:func:`owned`) before its first change.

The checksum catches a truncated, torn or damaged file (the writer replaces the
file atomically, so only the disk or a foreign program can produce one); such
a file is refused and the catalog rebuilds the index.

Format 1 (``KSDENSE1``: … | faiss index | blake2b-256 of everything before) is
read the old way, with a private copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from knowledge_store.engines.embedded.generation import IdArray, faiss

__all__ = ["MAGIC", "ForeignFile", "Loaded", "owned", "peek_watermark", "read", "write"]

MAGIC = b"KSDENSE2"
_MAGIC_V1 = b"KSDENSE1"
_FORMAT = 2
_BLOCK = 64 << 20  # checksum block (CRC32 per block, checked in parallel)
_DIGEST_V1 = 32
_READ_BLOCK_V1 = 1 << 20
_TAIL = 4 + len(MAGIC)  # block count + end magic


class ForeignFile(ValueError):
    """A sound file of another format or dimension (a re-embedding changed it): replaced,
    not damaged."""


@dataclass(frozen=True)
class Loaded:
    """What a file holds: the faiss index (mapped for format 2), its rows and watermark."""

    index: Any
    row_ids: IdArray
    live: np.ndarray
    watermark: int
    header: dict[str, Any]
    #: The read-only mapped bytes a format-2 index views (they keep the map alive).
    mapping: npt.NDArray[np.uint8] | None = None


# -- writing -----------------------------------------------------------------------------------


class _Checksummed:
    """A sink that CRCs what it writes in ``_BLOCK``-sized blocks."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh = fh
        self._crcs: list[int] = []
        self._crc = 0
        self._filled = 0

    def __call__(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            take = min(len(view), _BLOCK - self._filled)
            part = view[:take]
            self._crc = zlib.crc32(part, self._crc)
            self._fh.write(part)
            self._filled += take
            view = view[take:]
            if self._filled == _BLOCK:
                self._crcs.append(self._crc)
                self._crc, self._filled = 0, 0
        return len(data)

    def finish(self) -> None:
        if self._filled:
            self._crcs.append(self._crc)
        table = np.asarray(self._crcs, dtype="<u4").tobytes()
        self._fh.write(table + struct.pack("<I", len(self._crcs)) + MAGIC)


def write(
    fh: BinaryIO, header: dict[str, Any], row_ids: IdArray, live: np.ndarray, index: Any
) -> None:
    """Write format 2 to ``fh`` (the caller fsyncs and renames)."""
    sink = _Checksummed(fh)
    encoded = json.dumps({**header, "format": _FORMAT, "block": _BLOCK}).encode()
    sink(MAGIC + struct.pack("<I", len(encoded)) + encoded)
    sink(row_ids.astype("<i8").tobytes())
    sink(live.astype(np.uint8).tobytes())
    writer = faiss.PyCallbackIOWriter(sink)
    faiss.write_index(index, writer)
    del writer  # flushes
    sink.finish()


# -- reading -----------------------------------------------------------------------------------


def read(path: Path, dimension: int) -> Loaded:
    """The file at ``path``; ValueError (or OSError/RuntimeError) if it can't be used."""
    with Path(path).open("rb") as fh:
        magic = fh.read(len(MAGIC))
    if magic == _MAGIC_V1:
        with Path(path).open("rb") as fh:
            return _read_v1(fh, os.fstat(fh.fileno()).st_size, dimension)
    if magic != MAGIC:
        raise ValueError("not a dense index file")
    return _read_v2(Path(path), dimension)


def _read_v2(path: Path, dimension: int) -> Loaded:
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    size = int(mapped.size)
    if size < len(MAGIC) + 4 + _TAIL or bytes(mapped[size - len(MAGIC) :]) != MAGIC:
        raise ValueError("file truncated")
    (blocks,) = struct.unpack("<I", bytes(mapped[size - _TAIL : size - len(MAGIC)]))
    end = size - _TAIL - 4 * blocks
    if end < len(MAGIC) + 4 or -(-end // _BLOCK) != blocks:
        raise ValueError("file truncated")
    crcs = np.frombuffer(mapped, dtype="<u4", count=blocks, offset=end)
    _verify(mapped, end, crcs)
    (length,) = struct.unpack("<I", bytes(mapped[len(MAGIC) : len(MAGIC) + 4]))
    at = len(MAGIC) + 4
    header = json.loads(bytes(mapped[at : at + length]))
    _check_header(header, dimension)
    rows = int(header["rows"])
    at += length
    row_ids = np.frombuffer(mapped, dtype="<i8", count=rows, offset=at).astype(np.int64)
    at += 8 * rows
    live = np.frombuffer(mapped, dtype=np.uint8, count=rows, offset=at).astype(bool)
    at += rows
    region = mapped[at:end]
    index = faiss.read_index(faiss.ZeroCopyIOReader(faiss.swig_ptr(region), int(region.size)), 0)
    return _checked(index, row_ids, live, header, region)


def _verify(mapped: np.ndarray, end: int, crcs: np.ndarray) -> None:
    """Each block's CRC32, on every core (zlib.crc32 releases the GIL)."""
    starts = range(0, end, _BLOCK)

    def crc(start: int) -> int:
        return zlib.crc32(mapped[start : min(start + _BLOCK, end)].data)

    workers = max(1, min(len(starts), os.cpu_count() or 1))
    if workers == 1:
        found = [crc(s) for s in starts]
    else:
        with ThreadPoolExecutor(workers) as pool:
            found = list(pool.map(crc, starts))
    if found != [int(c) for c in crcs]:
        raise ValueError("checksum mismatch")


def _read_v1(fh: BinaryIO, size: int, dimension: int) -> Loaded:
    if size < len(_MAGIC_V1) + 4 + _DIGEST_V1:
        raise ValueError("file too short")
    digest = hashlib.blake2b(digest_size=_DIGEST_V1)
    remaining = size - _DIGEST_V1
    while remaining > 0:
        block = fh.read(min(_READ_BLOCK_V1, remaining))
        if not block:
            raise ValueError("file truncated")
        digest.update(block)
        remaining -= len(block)
    if fh.read(_DIGEST_V1) != digest.digest():
        raise ValueError("checksum mismatch")
    fh.seek(len(_MAGIC_V1))
    (length,) = struct.unpack("<I", fh.read(4))
    header = json.loads(fh.read(length))
    _check_header(header, dimension)
    rows = int(header["rows"])
    row_ids = np.frombuffer(fh.read(8 * rows), dtype="<i8").astype(np.int64)
    live = np.frombuffer(fh.read(rows), dtype=np.uint8).astype(bool)
    read_bytes: Callable[[int], bytes] = fh.read
    index = faiss.read_index(faiss.PyCallbackIOReader(read_bytes))
    return _checked(index, row_ids, live, header)


def _check_header(header: dict[str, Any], dimension: int) -> None:
    if header["format"] not in (1, _FORMAT) or header["dimension"] != dimension:
        raise ForeignFile(
            f"format {header['format']} dimension {header['dimension']},"
            f" expected format {_FORMAT} dimension {dimension}"
        )


def _checked(
    index: Any,
    row_ids: IdArray,
    live: np.ndarray,
    header: dict[str, Any],
    mapping: npt.NDArray[np.uint8] | None = None,
) -> Loaded:
    rows = int(header["rows"])
    if int(index.ntotal) != rows or len(row_ids) != rows or len(live) != rows:
        raise ValueError("row count mismatch")
    return Loaded(index, row_ids, live, int(header["watermark"]), header, mapping)


def owned(index: Any, mapping: npt.NDArray[np.uint8] | None) -> Any:
    """``index`` itself if it owns its memory (no ``mapping``), else a private copy read
    from the mapped bytes, block by block (faiss aborts on a change to a viewed index)."""
    if mapping is None:
        return index
    at = 0

    def take(n: int) -> bytes:
        nonlocal at
        got = bytes(mapping[at : at + n])
        at += len(got)
        return got

    copy = faiss.read_index(faiss.PyCallbackIOReader(take))
    copy.hnsw.efSearch = index.hnsw.efSearch
    copy.hnsw.efConstruction = index.hnsw.efConstruction
    return copy


def peek_watermark(path: Path) -> int:
    """The watermark in a file's header without reading the rest (-1: none, unreadable)."""
    try:
        with Path(path).open("rb") as fh:
            if fh.read(len(MAGIC)) not in (MAGIC, _MAGIC_V1):
                return -1
            (length,) = struct.unpack("<I", fh.read(4))
            return int(json.loads(fh.read(length))["watermark"])
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return -1
