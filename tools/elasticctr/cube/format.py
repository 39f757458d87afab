"""The cube shard file: one mmap-able file per shard of one version.

Layout (little-endian, every section 64-byte aligned so numpy views need no copy):

    header       128 bytes  magic "ECTLCUBE", format, dim, count, shard, num_shards,
                            table_slots S, window W, tail T, sentinel, offsets
    keys         uint64 [count]        sorted ascending, unique
    values       float32 [count, dim]  row i belongs to keys[i]
    table_keys   uint64 [S + T]        hash index: key in each slot, `sentinel` if empty
    table_rows   uint32 [S + T]        row number of that key, 0xFFFFFFFF if empty

A key's home slot is (mix64(key) >> 32) & (S - 1); linear probing (load <= 0.5, no
wrap-around, T >= W - 1 tail slots) puts it within W slots of it, or, rarely, further:
then its window is full and lookups ask the sorted keys.
A batch lookup is then a few vectorised numpy gathers over contiguous windows (tens of
µs for 1000 keys) instead of 1000 binary searches over cold pages (about 1 ms); the
sorted keys serve the rare full-window keys and range scans.

`shard_of` is the one sharding function: serving must route keys with it.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from elasticctr.errors import EctlError, ValidationError

MAGIC = b"ECTLCUBE"
FORMAT_VERSION = 1
HEADER = struct.Struct("<8sIIQIIQIIQQQQQ40x")  # 128 bytes
ALIGN = 64
WINDOW = 8
EMPTY = np.uint32(0xFFFFFFFF)
MAX_ROWS_PER_SHARD = 0xFFFFFFFE

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_S32 = np.uint64(32)
_WIN = np.arange(WINDOW, dtype=np.int64)
# One match in a window of 8 bools, viewed as a little-endian uint64, is 1 << (8 * pos).
_MATCH_AT = np.array([1 << (8 * i) for i in range(WINDOW)], dtype=np.uint64)

assert HEADER.size == 128


def mix64(keys: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser: spreads structured feasigns (e.g. small ids)."""
    x = np.asarray(keys, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x ^ (x >> _S33)
        x = x * _M1
        x ^= x >> _S33
        x *= _M2
        x ^= x >> _S33
    return x


def shard_of(keys: np.ndarray, num_shards: int) -> np.ndarray:
    """Shard index (int64) of each feasign: mix64(key) % num_shards."""
    if num_shards < 1:
        raise ValidationError(f"num_shards must be >= 1, got {num_shards}")
    return (mix64(keys) % np.uint64(num_shards)).astype(np.int64)


def shard_file_name(shard: int, num_shards: int) -> str:
    return f"shard-{shard:05d}-of-{num_shards:05d}.cube"


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _table_slots(count: int) -> int:
    slots = 16
    while slots < 2 * count:
        slots <<= 1
    return slots


def _home(keys: np.ndarray, slots: int) -> np.ndarray:
    # High half of the hash: the low half decides the shard (shard_of), so it is not
    # spread within one shard when N is a power of two.
    return ((mix64(keys) >> _S32) & np.uint64(slots - 1)).astype(np.int64)


def _sentinel(keys: np.ndarray) -> int:
    """The smallest uint64 that is not a key: marks empty table slots."""
    if keys.size == 0 or keys[0] != 0:
        return 0
    gaps = np.flatnonzero(keys != np.arange(keys.size, dtype=np.uint64))
    return int(gaps[0]) if gaps.size else int(keys.size)


def build_table(keys: np.ndarray, slots: int, sentinel: int) -> tuple[np.ndarray, np.ndarray]:
    """Hash index: (table_keys uint64, table_rows uint32) of equal length >= slots + WINDOW - 1.

    Linear probing without wrap-around, built in one pass: with keys ordered by home
    slot, key i lands at i + max_{j<=i}(home_j - j). The slots from a key's home to its
    position are all occupied, so a key displaced by WINDOW or more has a full window;
    lookups fall back to a binary search of the sorted keys only then. A run may spill
    past the last slot: the table grows by that tail.
    """
    if keys.size == 0:
        length = slots + WINDOW - 1
        return np.full(length, sentinel, np.uint64), np.full(length, EMPTY, np.uint32)
    home = _home(keys, slots)
    by_home = np.argsort(home)
    ramp = np.arange(keys.size, dtype=np.int64)
    pos = home[by_home]
    pos -= ramp
    np.maximum.accumulate(pos, out=pos)
    pos += ramp
    length = max(slots + WINDOW - 1, int(pos[-1]) + 1)
    tkeys = np.full(length, sentinel, dtype=np.uint64)
    trows = np.full(length, EMPTY, dtype=np.uint32)
    tkeys[pos] = keys[by_home]
    trows[pos] = by_home.astype(np.uint32)
    return tkeys, trows


@dataclass(frozen=True)
class ShardHeader:
    dim: int
    count: int
    shard: int
    num_shards: int
    table_slots: int
    window: int
    table_tail: int
    sentinel: int
    keys_offset: int
    values_offset: int
    tkeys_offset: int
    trows_offset: int
    file_bytes: int


def _layout(dim: int, count: int, slots: int, tail: int) -> tuple[int, int, int, int, int]:
    length = slots + tail
    keys_offset = _align(HEADER.size)
    values_offset = _align(keys_offset + 8 * count)
    tkeys_offset = _align(values_offset + 4 * dim * count)
    trows_offset = _align(tkeys_offset + 8 * length)
    end = trows_offset + 4 * length
    return keys_offset, values_offset, tkeys_offset, trows_offset, end


def write_shard(
    path: Path, keys: np.ndarray, values: np.ndarray, *, shard: int, num_shards: int
) -> tuple[str, int]:
    """Write one shard file (keys must be sorted and unique); returns (sha256, bytes).

    Written to a temp file beside `path`, fsynced and renamed, so a reader never sees
    a partial shard under the final name.
    """
    keys = np.ascontiguousarray(keys, dtype="<u8")
    values = np.ascontiguousarray(values, dtype="<f4")
    if values.ndim != 2 or values.shape[0] != keys.shape[0]:
        raise ValidationError(f"values shape {values.shape} does not match {keys.shape[0]} keys")
    if keys.size > MAX_ROWS_PER_SHARD:
        raise ValidationError(f"{keys.size} rows in one shard; use more shards")
    if keys.size > 1 and not bool(np.all(keys[1:] > keys[:-1])):
        raise ValidationError("shard keys must be sorted and unique")
    dim = int(values.shape[1])
    slots = _table_slots(int(keys.size))
    sentinel = _sentinel(keys)
    tkeys, trows = build_table(keys, slots, sentinel)
    tail = tkeys.size - slots
    k_off, v_off, tk_off, tr_off, end = _layout(dim, int(keys.size), slots, tail)
    header = HEADER.pack(
        MAGIC, FORMAT_VERSION, dim, int(keys.size), shard, num_shards, slots, WINDOW, tail,
        sentinel, k_off, v_off, tk_off, tr_off,
    )  # fmt: skip
    digest = hashlib.sha256()
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:

        def put(offset: int, data: bytes | memoryview) -> None:
            pad = offset - fh.tell()
            if pad:
                zeros = b"\0" * pad
                fh.write(zeros)
                digest.update(zeros)
            fh.write(data)
            digest.update(data)

        put(0, header)
        put(k_off, memoryview(keys).cast("B"))
        put(v_off, memoryview(values.reshape(-1)).cast("B"))
        put(tk_off, memoryview(tkeys).cast("B"))
        put(tr_off, memoryview(trows).cast("B"))
        fh.flush()
        os.fsync(fh.fileno())
        size = fh.tell()
    assert size == end
    os.replace(tmp, path)
    return digest.hexdigest(), size


class ShardFile:
    """A shard opened by mmap; `lookup` answers a batch of keys with rows (zeros if absent)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as exc:
            raise EctlError(f"cannot open shard file {self.path}: {exc.strerror}") from exc
        try:
            size = os.fstat(fd).st_size
            if size < HEADER.size:
                raise EctlError(f"{self.path}: truncated ({size} bytes, header needs 64)")
            self._mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        self.header = self._parse_header(size)
        h = self.header
        buf = self._mm
        length = h.table_slots + h.table_tail
        self.keys = np.frombuffer(buf, dtype="<u8", count=h.count, offset=h.keys_offset)
        self.values = np.frombuffer(
            buf, dtype="<f4", count=h.count * h.dim, offset=h.values_offset
        ).reshape(h.count, h.dim)
        self.tkeys = np.frombuffer(buf, dtype="<u8", count=length, offset=h.tkeys_offset)
        self.trows = np.frombuffer(buf, dtype="<u4", count=length, offset=h.trows_offset)
        self._sentinel = np.uint64(h.sentinel)
        self.native = self._native_table()

    def _native_table(self):
        """The native extension's view of this mapping (cube/native.py), or None."""
        from elasticctr.cube import native

        mod = native.module()
        if mod is None or self.header.count == 0:
            return None  # an empty shard answers zeros from the numpy path
        h = self.header
        try:
            return mod.table(
                self._mm, h.dim, h.count, h.table_slots, h.table_tail, h.sentinel,
                h.keys_offset, h.values_offset, h.tkeys_offset, h.trows_offset,
            )  # fmt: skip
        except ValueError as exc:  # e.g. dim 0: the numpy path answers
            native.log.warning("%s: numpy lookups (%s)", self.path, exc)
            return None

    def _parse_header(self, size: int) -> ShardHeader:
        (magic, fmt, dim, count, shard, num_shards, slots, window, tail, sentinel,
         k_off, v_off, tk_off, tr_off) = HEADER.unpack_from(self._mm, 0)  # fmt: skip
        if magic != MAGIC:
            raise EctlError(f"{self.path}: not a cube shard file (bad magic)")
        if fmt != FORMAT_VERSION:
            raise EctlError(f"{self.path}: shard format {fmt}, this ectl reads {FORMAT_VERSION}")
        if slots < 16 or slots & (slots - 1) or window != WINDOW or tail < WINDOW - 1:
            raise EctlError(f"{self.path}: corrupt header (table_slots={slots}, window={window})")
        expect = _layout(dim, count, slots, tail)
        if (k_off, v_off, tk_off, tr_off) != expect[:4]:
            raise EctlError(f"{self.path}: corrupt header (section offsets)")
        if size != expect[4]:
            raise EctlError(f"{self.path}: truncated or padded: {size} bytes, expected {expect[4]}")
        return ShardHeader(
            dim, count, shard, num_shards, slots, window, tail, sentinel, k_off, v_off,
            tk_off, tr_off, size,
        )  # fmt: skip

    @property
    def dim(self) -> int:
        return self.header.dim

    @property
    def count(self) -> int:
        return self.header.count

    @property
    def nbytes(self) -> int:
        """Size of the mapped file (what the shard holds in memory for this version)."""
        return self.header.file_bytes

    def find(self, query: np.ndarray) -> np.ndarray:
        """Row number of each query key, or -1 where the key is absent (int64 array)."""
        q = np.asarray(query, dtype=np.uint64)
        if self.header.count == 0 or q.size == 0:
            return np.full(q.shape[0], -1, dtype=np.int64)
        base = _home(q, self.header.table_slots)
        win = base[:, None] + _WIN  # [n, WINDOW] slots, contiguous per key
        cand = self.tkeys.take(win)
        match = (cand == q[:, None]).view(np.uint64).ravel()  # needs WINDOW == 8
        hit = (match != 0) & (q != self._sentinel)  # the sentinel marks empty slots
        out = self.trows.take(base + np.searchsorted(_MATCH_AT, match)).astype(np.int64)
        miss = np.flatnonzero(~hit)
        if not miss.size:
            return out
        out[miss] = -1
        # A key is absent if its window has an empty slot; a full window means it may
        # have been left out of the table: ask the sorted keys.
        full = miss[~(cand[miss] == self._sentinel).any(axis=1)]
        if full.size:
            qf = q[full]
            pos = np.minimum(np.searchsorted(self.keys, qf), self.header.count - 1)
            found = self.keys[pos] == qf
            out[full[found]] = pos[found]
        return out

    def lookup(self, query: np.ndarray) -> tuple[np.ndarray, int]:
        """(rows float32 [len(query), dim], missing count); absent keys get zero rows."""
        rows_idx = self.find(query)
        absent = rows_idx < 0
        missing = int(np.count_nonzero(absent))
        if self.header.count == 0:
            return np.zeros((rows_idx.shape[0], self.header.dim), dtype=np.float32), missing
        if missing:
            rows = self.values.take(np.where(absent, 0, rows_idx), axis=0)
            rows[absent] = 0.0
        else:
            rows = self.values.take(rows_idx, axis=0)
        return rows, missing

    def close(self) -> None:
        # Views into the mmap may still be referenced by in-flight responses; the mapping
        # is released when the last view is garbage-collected.
        self.keys = self.values = self.tkeys = self.trows = None  # type: ignore[assignment]
        self.native = None
        try:
            self._mm.close()
        except BufferError:
            pass
