"""The compiled reader (ectl-slotfeed) agrees with the Python parser and the held-out rule.

Same samples, same feasigns per slot (multi-valued, unknown slots ignored, SPARSE_DIM
modulo, padding `1 0` for an empty slot), same malformed-line count, byte ranges that
split the file anywhere still give every line exactly once, and the held-out split is
elastic.heldout_mask's.
"""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tests.unit import test_data_storage as _storage_tests

from elasticctr.data.parser import read_file
from elasticctr.train import native
from elasticctr.train.elastic import heldout_mask

pytestmark = pytest.mark.fast

SLOTS = [3, 0, 7, 1000]
GOOD = [
    "1 0 5:3 6:0 7:7 8:1000",
    "2 1 18446744073709551615:3 9:3 10:0",  # u64 max, a multi-valued slot, two empty
    "1 1 11:42 12:0",  # slot 42 is not in the list: ignored
    "3 0\t13:7\r",
    "1 0",  # no features: every slot padded
]
BAD = [
    "1 2 5:3",  # click > show
    "1 0 5:3:4",
    "1 0 5: 3",
    "x 0 5:3",
    "1 0 123456789012345678901:3",  # 21 digits
    "1 0 18446744073709551616:3",  # u64 max + 1
    "1",
]


def _lines(n: int) -> list[str]:
    rng = np.random.default_rng(5)
    out = []
    for i in range(n):
        if i % 17 == 3:
            out.append(BAD[i % len(BAD)])
            continue
        if i % 11 == 0:
            out.append(GOOD[i % len(GOOD)])
            continue
        feats = [
            f"{int(rng.integers(1, 2**63))}:{SLOTS[int(rng.integers(0, 4))]}"
            for _ in range(int(rng.integers(0, 6)))
        ]
        out.append(" ".join([str(2), str(int(rng.integers(0, 3))), *feats]))
        if i % 29 == 0:
            out.append("")  # blank
    return out


def _run(spec: str, *args: str) -> list[list[int]]:
    exe = native.build()
    out = subprocess.run(
        [str(exe), "--slots", ",".join(map(str, SLOTS)), *args],
        input=spec.encode(),
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [[int(x) for x in line.split()] for line in out.splitlines()]


def _decode(row: list[int]) -> tuple[list[list[int]], int, int]:
    pos, slots = 0, []
    for _ in SLOTS:
        n = row[pos]
        slots.append(row[pos + 1 : pos + 1 + n])
        pos += 1 + n
    assert row[pos] == 1 and row[pos + 2] == 1 and row[pos + 4] == 1
    assert row[pos + 1] == row[pos + 5]  # label == click
    return slots, row[pos + 3], row[pos + 1]


def _expected(batch, i: int) -> list[list[int]]:
    sample = batch.sample(i)
    return [sample.get(s, [0]) for s in SLOTS]


@pytest.mark.parametrize("sparse_dim", [0, 1000])
def test_the_reader_emits_what_the_python_parser_reads(tmp_path: Path, sparse_dim: int) -> None:
    data = tmp_path / "part-0"
    data.write_text("\n".join(_lines(600)))  # no final newline
    batch, stats = read_file(str(data), SLOTS, sparse_dim=sparse_dim or None, max_error_rate=None)
    size = data.stat().st_size
    cuts = [0, 1, 2, 57, size // 3, size // 3 + 1, size - 2, size]  # anywhere, even mid-line
    spec = "".join(
        f"{data}\t{a}\t{b}\t{tmp_path / f's{k}'}\t-\n"
        for k, (a, b) in enumerate(itertools.pairwise(cuts))
    )
    rows = _run(spec, "--sparse-dim", str(sparse_dim))
    assert len(rows) == len(batch)
    for i, row in enumerate(rows):
        slots, show, click = _decode(row)
        assert slots == _expected(batch, i), i
        assert (show, click) == (batch.show[i], batch.click[i])
    counts = np.array(
        [
            [int(x) for x in (tmp_path / f"s{k}").read_text().split()[:7]]
            for k in range(len(cuts) - 1)
        ]
    ).sum(axis=0)
    lines, samples, blank, malformed, ignored, heldout, emitted = counts.tolist()
    assert (lines, samples, blank, malformed) == (
        stats.lines,
        stats.samples,
        stats.blank,
        stats.malformed,
    )
    assert ignored == stats.ignored_features and heldout == 0 and emitted == samples


def test_the_held_out_split_is_the_hash_rule(tmp_path: Path) -> None:
    data = tmp_path / "part-0"
    data.write_text("\n".join(_lines(3000)) + "\n")
    batch, _ = read_file(str(data), SLOTS, max_error_rate=None)
    held = heldout_mask(batch)
    assert 0 < held.sum() < len(batch)
    out = tmp_path / "held.txt"
    rows = _run(f"{data}\t0\t-1\t-\t{out}\n", "--heldout", "save")
    kept = np.flatnonzero(~held)
    assert len(rows) == kept.size
    for row, i in zip(rows, kept, strict=True):
        assert _decode(row)[0] == _expected(batch, int(i))
    held_batch = native.parse_heldout(out.read_bytes(), SLOTS, None, 10_000)[0]
    assert len(held_batch) == int(held.sum())
    np.testing.assert_array_equal(held_batch.click, batch.click[held])
    # --heldout only: nothing emitted, the same lines picked (what the exporter reads)
    assert native.heldout_lines([native.Range(str(data))], SLOTS, None) == out.read_bytes()


def test_bad_share_above_the_bound_names_the_lines(tmp_path: Path) -> None:
    data = tmp_path / "part-0"
    data.write_text("1 0 5:3\n1 2 5:3\n1 0 5:3\n")
    stats_path = tmp_path / "s"
    _run(f"{data}\t0\t-1\t{stats_path}\t-\n")
    stats = native.RangeStats.read("part-0", stats_path)
    assert (stats.samples, stats.malformed, stats.bad_offsets) == (2, 1, [8])
    stats.check(str(data), 0.5)  # 1 of 3 is within the bound
    with pytest.raises(Exception, match=r"1 of 3 lines malformed") as err:
        stats.check(str(data), 0.1)
    assert "part-0@8: click 2 > show 1" in err.value.problems[0]


def _reader(data: Path, stats: Path, lease: native.Lease) -> subprocess.Popen:
    exe = native.build()
    args = ["--slots", ",".join(map(str, SLOTS)), "--heldout", "skip"]
    args += ["--lease-file", str(lease.path), "--lease-seconds", str(lease.seconds)]
    proc = subprocess.Popen([str(exe), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    proc.stdin.write(f"{data}\t0\t-1\t{stats}\t-\n".encode())
    proc.stdin.close()
    return proc


@pytest.mark.parametrize("how", ["removed", "not renewed"])
def test_a_lost_lease_stops_the_reader_mid_range(tmp_path: Path, how: str) -> None:
    """Elastic trainers: once the lease file is removed (a refused heartbeat) or older
    than the lease period (no accepted heartbeat), the reader writes nothing more and
    says `stopped`; what it wrote is whole samples, counted in `emitted`."""
    data = tmp_path / "part-0"
    data.write_text("\n".join(_lines(40_000)) + "\n")
    full = _run(f"{data}\t0\t-1\t-\t-\n", "--heldout", "skip")
    assert len(full) > 30_000  # ~2 MB of output: far more than a pipe holds
    lease = native.Lease(tmp_path / "lease", 30.0 if how == "removed" else 0.5)
    lease.renew()
    proc = _reader(data, tmp_path / "s", lease)
    # The reader blocks on the pipe (nobody reads): it cannot run ahead of ~128 KiB.
    first = proc.stdout.read(4096)
    if how == "removed":
        lease.lose()
    else:
        import time

        time.sleep(1.5)  # > 0.5 s without renewal
    out = first + proc.stdout.read()
    assert proc.wait(timeout=60) == 0
    stats = native.RangeStats.read("part-0", tmp_path / "s")
    assert stats.stopped == 1
    rows = [[int(x) for x in line.split()] for line in out.decode().splitlines()]
    assert out.endswith(b"\n") or not out
    assert len(rows) == stats.emitted < len(full) // 4, (len(rows), len(full))
    assert rows == full[: len(rows)]  # the range's first samples, whole and in order
    # A lease still held reads the whole range; a lease lost before the start reads none.
    lease = native.Lease(tmp_path / "lease2", 30.0)
    lease.renew()
    proc = _reader(data, tmp_path / "s2", lease)
    assert len(proc.stdout.read().splitlines()) == len(full) and proc.wait(timeout=60) == 0
    assert native.RangeStats.read("x", tmp_path / "s2").stopped == 0
    lease.lose()
    proc = _reader(data, tmp_path / "s3", lease)
    assert proc.stdout.read() == b"" and proc.wait(timeout=60) == 0
    got = native.RangeStats.read("x", tmp_path / "s3")
    assert (got.stopped, got.emitted, got.lines) == (1, 0, 0)


# --- streamed ranges (stored files: elasticctr.train.native._Inputs / _Stream) ------------

fileserver = _storage_tests.fileserver  # the real fileserver, in a thread


def _read_all(inputs: native._Inputs) -> bytes:
    """Every sample of `inputs`' spec lines, as the trainers' readers emit them."""
    exe = native.build()
    with inputs:
        done = subprocess.run(
            [str(exe), "--slots", ",".join(map(str, SLOTS)), "--heldout", "all"],
            input="".join(inputs.lines).encode(),
            capture_output=True,
            check=True,
        )
    return done.stdout


def test_a_streamed_range_reads_exactly_what_the_mapped_range_reads(
    tmp_path: Path,
    fileserver,
    monkeypatch,
) -> None:
    """A stored file's ranges cut anywhere, streamed through the fileserver in 1 KiB
    ranged reads (lines spanning reads, a last line without newline): the same samples
    and statistics as the local file mapped, each line once."""
    url, root = fileserver
    data = root / "part-0"
    data.write_text("\n".join(_lines(3000)))  # no final newline
    size = data.stat().st_size
    cuts = [0, 1, 2, 57, size // 3, size // 3 + 1, size // 2, size - 2, size]
    monkeypatch.setenv("ELASTICCTR_STREAM_BLOCK_KIB", "1")
    got = {}
    for where, path in (("mapped", str(data)), ("streamed", f"{url}/part-0")):
        ranges = [native.Range(path, a, b) for a, b in itertools.pairwise(cuts)]
        run_dir = tmp_path / where
        run_dir.mkdir()
        inputs = native._Inputs(run_dir, ranges, [str(i) for i in range(len(ranges))], 2, None)
        out = _read_all(inputs)
        stats = [
            native.RangeStats.read(label, st)
            for label, st in zip(inputs.labels, inputs.stats, strict=True)
        ]
        got[where] = (out, [(s.lines, s.samples, s.malformed, s.emitted, s.stopped) for s in stats])
    assert got["streamed"] == got["mapped"]
    assert got["mapped"][0].count(b"\n") == sum(s[3] for s in got["mapped"][1]) > 2000


def test_a_stream_that_ends_early_is_incomplete_never_short(tmp_path: Path) -> None:
    """The reader's side of a failed stream (the store client closes it early) and of a
    local file shorter than its range: stopped 2, only whole samples written."""
    data = tmp_path / "part-0"
    text = ("\n".join(_lines(20_000)) + "\n").encode()
    data.write_bytes(text)
    size = len(text)
    part = tmp_path / "stream"  # what a stream from byte 99 had sent when it failed
    part.write_bytes(text[99 : text.index(b"\n", size // 2) + 1])
    for spec in (f"{part}\t100\t{size}\t{tmp_path / 's'}\t-\t99\n",
                 f"{data}\t100\t{size + 10}\t{tmp_path / 's'}\t-\n"):  # fmt: skip
        rows = _run(spec)
        stats = native.RangeStats.read("x", tmp_path / "s")
        assert stats.stopped == native.STOPPED_INPUT and stats.emitted == len(rows) > 0
    whole = _run(f"{data}\t100\t{size}\t{tmp_path / 's'}\t-\n")
    assert native.RangeStats.read("x", tmp_path / "s").stopped == 0 and len(whole) > len(rows)


def test_a_stored_range_that_cannot_be_read_raises_a_read_error(
    tmp_path: Path,
    fileserver,
    monkeypatch,
) -> None:
    """Truncated (shorter than the range), removed, unreachable past the retry window:
    a ReadError naming the file and why, never a short result."""
    url, root = fileserver
    (root / "part-0").write_text("\n".join(_lines(500)) + "\n")
    size = (root / "part-0").stat().st_size
    slots = SLOTS
    with pytest.raises(
        native.ReadError,
        match=rf"ends at or before byte {size}, inside the range \[9, {size + 50}\)",
    ):
        native.heldout_lines([native.Range(f"{url}/part-0", 10, size + 50)], slots, None)
    with pytest.raises(native.ReadError, match=r"part-1: not found"):
        native.heldout_lines([native.Range(f"{url}/part-1", 0, 100)], slots, None)
    from elasticctr.net import free_port

    monkeypatch.setenv("ELASTICCTR_READ_RETRY_SECONDS", "0.5")
    gone = f"http://127.0.0.1:{free_port()}/part-0"
    with pytest.raises(native.ReadError, match=r"cannot reach the server"):
        native.heldout_lines([native.Range(gone, 0, 100)], slots, None)
