"""ElasticCTR line parser: values, slot layout, every malformed-line case, streaming."""

from __future__ import annotations

import gzip
import io
import random

import numpy as np
import pytest
from tests.conftest import shared_path

from elasticctr.data.parser import (
    U64_MAX,
    FileStats,
    LineParser,
    SlotBatch,
    diagnose_line,
    iter_batches,
    parse_bytes,
    parse_lines,
    read_file,
)
from elasticctr.errors import EctlError, ValidationError

pytestmark = pytest.mark.fast


def reference_parse(text: str, slots: list[int]):
    """Plain-Python reading of valid lines: [(show, click, {slot: [ids]})]."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        feats: dict[int, list[int]] = {}
        for tok in parts[2:]:
            f, s = tok.split(":")
            if int(s) in slots:
                feats.setdefault(int(s), []).append(int(f))
        out.append((int(parts[0]), int(parts[1]), feats))
    return out


def assert_matches(batch: SlotBatch, expected) -> None:
    assert len(batch) == len(expected)
    for i, (show, click, feats) in enumerate(expected):
        assert batch.show[i] == show and batch.click[i] == click
        assert batch.sample(i) == feats


def test_basic_line_and_layout():
    text = b"1 0 17241709254077376921:0 132683728328325035:1\n2 1 5:1 6:1 7:2\n"
    batch, stats = parse_bytes(text, [2, 0, 1])
    assert batch.slots == (2, 0, 1)
    assert batch.ids_of(0).dtype == np.uint64
    assert batch.ids_of(0).tolist() == [17241709254077376921]
    assert batch.ids_of(1).tolist() == [132683728328325035, 5, 6]
    assert batch.lengths_of(1).tolist() == [1, 2]
    assert batch.lengths_of(1).dtype == np.int32
    assert batch.lengths_of(0).tolist() == [1, 0]  # missing slot: length 0
    assert batch.lengths_of(2).tolist() == [0, 1]
    assert batch.show.dtype == np.float32 and batch.show.tolist() == [1.0, 2.0]
    assert batch.click.tolist() == [0.0, 1.0] and batch.label is batch.click
    assert stats.lines == 2 and stats.samples == 2 and stats.malformed == 0
    assert batch.offsets(batch.slot_index(1)).tolist() == [0, 1, 3]
    with pytest.raises(KeyError, match="slot 9"):
        batch.ids_of(9)


def test_real_elasticctr_demo_file():
    path = shared_path("data", "elasticctr", "serving_demo_data.txt")
    text = path.read_text()
    slots = list(range(27))
    batch, stats = read_file(str(path), slots)
    assert stats.lines == 100 and stats.samples == 100 and stats.malformed == 0
    assert int(batch.click.sum()) == 22
    assert_matches(batch, reference_parse(text, slots))
    # some slots are missing in some lines: those get length 0
    assert any((batch.lengths[j] == 0).any() for j in range(27))
    assert batch.ids_of(22)[0] == 17241709254077376921 or batch.lengths_of(22)[0] in (0, 1)


def test_slots_not_in_conf_are_ignored_and_counted():
    batch, stats = parse_bytes(b"1 1 10:0 11:5 12:5 13:7\n1 0 14:5\n", [0, 7])
    assert batch.ids_of(0).tolist() == [10] and batch.ids_of(7).tolist() == [13]
    assert stats.ignored_features == 3 and stats.ignored_slots == {5: 3}
    assert stats.malformed == 0 and len(batch) == 2


def test_sparse_dim_modulo():
    batch, _ = parse_bytes(f"1 0 {U64_MAX}:0 1000003:0 7:1\n".encode(), [0, 1], sparse_dim=1000)
    assert batch.ids_of(0).tolist() == [U64_MAX % 1000, 3]
    assert batch.ids_of(1).tolist() == [7]


def test_uint64_bounds_and_digit_lengths():
    good = f"3 2 {U64_MAX}:0 0:0 00000000000000000001:1 18446744073709551614:1\n"
    batch, stats = parse_bytes(good.encode(), [0, 1])
    assert stats.malformed == 0
    assert batch.ids_of(0).tolist() == [U64_MAX, 0]
    assert batch.ids_of(1).tolist() == [1, U64_MAX - 1]
    for bad in (
        f"1 0 {U64_MAX + 1}:0",  # 20 digits, just over
        "1 0 99999999999999999999:0",
        "1 0 000000000000000000001:0",  # 21 digits: rejected even with leading zeros
        f"1 0 5:{U64_MAX + 1}",
        f"{U64_MAX + 1} 0 5:0",
    ):
        _, stats = parse_bytes(bad.encode(), [0])
        assert stats.malformed == 1, bad
        assert "beyond uint64" in stats.reasons


def test_random_valid_lines_match_reference():
    rng = random.Random(7)
    slots = [3, 1, 4, 15, 9]
    lines = []
    for _ in range(400):
        show = rng.randint(0, 5)
        feats = []
        for _ in range(rng.randint(0, 12)):
            digits = rng.randint(1, 20)
            f = rng.randint(0, min(U64_MAX, 10**digits - 1))
            feats.append(f"{f}:{rng.choice(slots + [2, 77])}")
        sep = rng.choice([" ", "\t", "  "])
        lines.append(sep.join([str(show), str(rng.randint(0, show))] + feats))
    text = "\n".join(lines) + "\n"
    batch, stats = parse_bytes(text.encode(), slots)
    assert stats.malformed == 0
    assert_matches(batch, reference_parse(text, slots))


MALFORMED = [
    ("1", "missing fields"),
    ("1 x", "bad integer"),
    ("1.0 0", "bad integer"),
    ("-1 0", "negative show"),
    ("1 -1", "negative click"),
    ("1 2 5:0", "click > show"),
    ("1 0 12", "bad feasign:slot"),
    ("1 0 12:", "bad feasign:slot"),
    ("1 0 :3", "bad feasign:slot"),
    ("1 0 12::3", "bad feasign:slot"),
    ("1 0 12:3:4", "bad feasign:slot"),
    ("1 0 12 :3", "bad feasign:slot"),
    ("1 0 12: 3", "bad feasign:slot"),
    ("1 0 12:3 :", "bad feasign:slot"),
    ("1 0 ab:3", "bad integer"),
    ("1 0 12:b", "bad integer"),
    ("1 0 -12:3", "bad integer"),
    ("1 0 12:3\x0b", "bad integer"),
    ("1:0 5:0", "bad integer"),
    (":", "missing fields"),
    ("1 0 1\u00e9:0", "bad integer"),
]


@pytest.mark.parametrize("line,category", MALFORMED)
def test_each_malformed_case_is_skipped_and_explained(line, category):
    text = f"1 0 1:0\n{line}\n1 1 2:0\n".encode()
    batch, stats = parse_bytes(text, [0], source="part-00000")
    assert len(batch) == 2 and batch.ids_of(0).tolist() == [1, 2]
    assert stats.malformed == 1 and stats.lines == 3
    assert stats.reasons == {category: 1}
    assert stats.examples[0].startswith("part-00000:2: ")
    assert diagnose_line(line.encode()) is not None


def test_blank_lines_crlf_tabs_and_no_final_newline():
    text = b"\n1 0 5:0\r\n   \n\t2\t1\t6:0 \r\n3 0 7:0"
    batch, stats = parse_bytes(text, [0])
    assert batch.ids_of(0).tolist() == [5, 6, 7]
    assert stats.lines == 5 and stats.blank == 2 and stats.malformed == 0
    assert stats.error_rate == 0.0


def test_line_with_no_features_is_a_sample():
    batch, _ = parse_bytes(b"4 1\n", [0, 1])
    assert len(batch) == 1 and batch.lengths_of(0).tolist() == [0]


def test_vector_check_agrees_with_diagnose_on_mutations():
    """Random byte edits of valid lines: the fast path rejects exactly what diagnose_line does."""
    rng = random.Random(11)
    alphabet = "0123456789 :\t-x\r"
    base = ["1 0 12:0 345:1", "3 2 18446744073709551615:2 7:0", "0 0", "5 5 1:1 1:1 1:1"]
    parser = LineParser([0, 1, 2])
    for _ in range(1500):
        chars = list(rng.choice(base))
        for _ in range(rng.randint(1, 3)):
            op = rng.random()
            pos = rng.randint(0, len(chars))
            if op < 0.4 and chars:
                del chars[min(pos, len(chars) - 1)]
            elif op < 0.8:
                chars.insert(pos, rng.choice(alphabet))
            elif chars:
                chars[min(pos, len(chars) - 1)] = rng.choice(alphabet)
        line = "".join(chars)
        stats = FileStats()
        parser.parse(line.encode(), stats)
        verdict = diagnose_line(line.encode())
        assert (stats.malformed == 1) == (verdict is not None), (line, verdict)
        if verdict is None and line.strip(" \t\r"):
            assert stats.samples == 1, line


def _same(a: SlotBatch, b: SlotBatch) -> None:
    assert a.slots == b.slots and len(a) == len(b)
    for x, y in zip(a.ids + a.lengths + [a.show, a.click], b.ids + b.lengths + [b.show, b.click],
                    strict=True):  # fmt: skip
        assert x.dtype == y.dtype and x.tolist() == y.tolist()


def test_small_input_path_equals_the_vector_pass():
    """Inputs of a few lines (a prediction request) are read line by line in Python; on valid
    lines it must give the vector pass's batch and counts, and on anything else leave the
    input (and the stats) to the vector pass."""
    rng = random.Random(5)
    slots = [3, 1, 4, 15, 9]
    alphabet = "0123456789 :\t-x\r\n"
    taken = 0
    for trial in range(1500):
        lines = []
        for _ in range(rng.randint(1, 4)):
            show = rng.randint(0, 5)
            feats = []
            for _ in range(rng.randint(0, 8)):
                f = rng.randint(0, min(U64_MAX, 10 ** rng.randint(1, 20) - 1))
                feats.append(f"{f}:{rng.choice(slots)}")
            lines.append(
                rng.choice([" ", "\t", "  "]).join([str(show), str(rng.randint(0, show))] + feats)
            )
        text = "\n".join(lines) + rng.choice(["\n", "", "\n\n", "\r\n"])
        if trial % 2:  # mutate: the small path must refuse or agree
            chars = list(text)
            for _ in range(rng.randint(1, 3)):
                pos = rng.randint(0, len(chars) - 1)
                chars[pos] = rng.choice(alphabet + "7")
            text = "".join(chars)
        data = text.encode()
        for sparse_dim in (None, 1000):
            parser = LineParser(slots, sparse_dim)
            small_stats, vector_stats = FileStats(), FileStats()
            small = parser._parse_small(data, small_stats)
            vector = parser._parse_vector(data, vector_stats)
            if small is None:
                assert small_stats == FileStats(), text
                assert trial % 2, text  # valid lines are the small path's
                continue
            taken += 1
            _same(small, vector)
            assert small_stats == vector_stats, text
            assert vector_stats.malformed == 0 and not vector_stats.ignored_slots
    assert taken > 1500  # the small path did serve most inputs
    # an unknown slot or a bad line: the vector pass counts and explains it
    parser = LineParser([0])
    zeros = b"0" * 20
    for text in (
        b"1 0 5:0 6:7\n",
        b"1 0 5:0\n1 2 6:0\n",
        b"1 0 5:0\nx\n",
        b"2 " + zeros + b"1 5:0\n",  # 21 digits: malformed even though the value is 1
        b"1 0 " + zeros + b"5:0\n",
        b"1 0 5:" + zeros + b"0\n",
        b"1 0 %d:0\n" % (U64_MAX + 1),
        b"%d 0 5:0\n" % (U64_MAX + 1),
        b"1 0 " + b"7" * 4000 + b":0\n",  # int() of it would raise
    ):
        assert parser._parse_small(text, FileStats()) is None
        stats = FileStats()
        parser.parse(text, stats)
        assert stats.malformed or stats.ignored_slots


def test_examples_are_capped_and_line_numbers_are_exact():
    lines = ["1 0 1:0"] * 3 + ["bad"] * 20
    _, stats = parse_lines(lines, [0], source="f.txt")
    assert stats.malformed == 20
    assert len(stats.examples) == 5
    assert [e.split(":")[1] for e in stats.examples] == ["4", "5", "6", "7", "8"]


def test_error_rate_bound_fails_with_file_rate_and_examples():
    text = b"1 0 1:0\n" * 8 + b"1 2 1:0\nzz\n"
    with pytest.raises(ValidationError) as err:
        parse_bytes(text, [0], source="hdfs://nn/data/part-7", max_error_rate=0.1)
    msg = str(err.value)
    assert "hdfs://nn/data/part-7" in msg and "2 of 10 lines" in msg and "20.00%" in msg
    assert "10.00%" in msg and "click > show: 1" in msg
    assert err.value.problems[0] == "hdfs://nn/data/part-7:9: click 2 > show 1"
    assert isinstance(err.value, EctlError)
    # at or under the bound: fine
    parse_bytes(text, [0], max_error_rate=0.2)


def test_parser_rejects_bad_configuration():
    with pytest.raises(ValidationError, match="empty"):
        LineParser([])
    with pytest.raises(ValidationError, match="duplicate"):
        LineParser([1, 1])
    with pytest.raises(ValidationError, match="sparse_dim"):
        LineParser([1], sparse_dim=-1)
    assert LineParser([1], sparse_dim=0).sparse_dim is None


def test_slice_and_concat_roundtrip():
    text = "".join(f"2 1 {i}:0 {i + 100}:1 {i + 200}:1\n" for i in range(10)).encode()
    batch, _ = parse_bytes(text, [0, 1])
    parts = [batch.slice(0, 3), batch.slice(3, 3), batch.slice(3, 10)]
    again = SlotBatch.concat(parts)
    for j in range(2):
        assert again.ids[j].tolist() == batch.ids[j].tolist()
        assert again.lengths[j].tolist() == batch.lengths[j].tolist()
    assert batch.slice(8, 99).sample(1) == {0: [9], 1: [109, 209]}
    assert len(SlotBatch.empty([0, 1])) == 0


@pytest.mark.parametrize("block_bytes", [1, 7, 64, 1 << 20])
def test_stream_batches_equal_whole_parse(tmp_path, block_bytes):
    rng = random.Random(block_bytes)
    lines = []
    for i in range(57):
        if i % 13 == 5:
            lines.append("broken line")
        else:
            feats = " ".join(f"{rng.randint(0, U64_MAX)}:{rng.randint(0, 3)}" for _ in range(4))
            lines.append(f"1 {i % 2} {feats}")
    path = tmp_path / "part-00000"
    path.write_text("\n".join(lines) + "\n")
    whole, whole_stats = parse_bytes(path.read_bytes(), [0, 1, 2, 3], source=str(path))
    stream = iter_batches(str(path), [0, 1, 2, 3], 10, block_bytes=block_bytes, max_error_rate=0.1)
    batches = list(stream)
    assert [len(b) for b in batches] == [10, 10, 10, 10, 10, 3]
    joined = SlotBatch.concat(batches)
    for j in range(4):
        assert joined.ids[j].tolist() == whole.ids[j].tolist()
        assert joined.lengths[j].tolist() == whole.lengths[j].tolist()
    assert stream.stats.malformed == 4 == whole_stats.malformed
    assert stream.stats.examples == whole_stats.examples
    assert stream.stats.examples[0] == f"{path}:6: show is not a non-negative integer: 'broken'"


def test_stream_fails_at_end_of_file_over_bound(tmp_path):
    path = tmp_path / "part-1"
    path.write_bytes(b"1 0 1:0\n" * 5 + b"oops\n" * 5)
    with pytest.raises(ValidationError, match="5 of 10 lines malformed"):
        list(iter_batches(str(path), [0], 4))
    # without a bound: read everything, report in stats
    stream = iter_batches(str(path), [0], 4, max_error_rate=None)
    assert sum(len(b) for b in stream) == 5 and stream.stats.malformed == 5


def test_stream_from_file_object_and_gzip(tmp_path):
    data = b"1 1 42:0\n1 0 43:0\n"
    stream = iter_batches(io.BytesIO(data), [0], 1, name="mem")
    assert [b.ids_of(0).tolist() for b in stream] == [[42], [43]]
    assert stream.stats.source == "mem"
    gz = tmp_path / "part-0.gz"
    gz.write_bytes(gzip.compress(data))
    batch, stats = read_file(str(gz), [0])
    assert batch.ids_of(0).tolist() == [42, 43] and stats.samples == 2
    batch, stats = read_file(f"file://{gz}", [0])
    assert len(batch) == 2


def test_stream_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(EctlError, match="not found"):
        list(iter_batches(str(tmp_path / "nope"), [0], 4))


def _ranges(size: int, step: int) -> list[tuple[int, int]]:
    return [(s, min(s + step, size)) for s in range(0, size, step)]


@pytest.mark.parametrize("step", [1, 13, 37, 200, 10_000])
@pytest.mark.parametrize("block_bytes", [1, 7, 64])
def test_byte_ranges_cover_every_line_exactly_once(tmp_path, step, block_bytes):
    rng = random.Random(step * 100 + block_bytes)
    lines = []
    for i in range(40):
        if i % 11 == 3:
            lines.append("not a line")
        elif i % 9 == 4:
            lines.append("")
        else:
            feats = " ".join(
                f"{rng.randint(0, 10 ** rng.randint(1, 19))}:{rng.randint(0, 2)}"
                for _ in range(rng.randint(0, 4))
            )
            lines.append(f"1 {i % 2} {feats}".rstrip())
    data = ("\n".join(lines)).encode()  # no final newline: the last line still counts
    path = tmp_path / "part-00000"
    path.write_bytes(data)
    whole, whole_stats = parse_bytes(data, [0, 1, 2])
    parts, malformed = [], 0
    for start, end in _ranges(len(data), step):
        stream = iter_batches(
            str(path),
            [0, 1, 2],
            8,
            block_bytes=block_bytes,
            start=start,
            end=end,
            max_error_rate=None,
        )
        parts.extend(stream)
        malformed += stream.stats.malformed
    joined = SlotBatch.concat(parts) if parts else SlotBatch.empty([0, 1, 2])
    assert len(joined) == len(whole)
    for j in range(3):
        assert joined.ids[j].tolist() == whole.ids[j].tolist()
        assert joined.lengths[j].tolist() == whole.lengths[j].tolist()
    assert joined.click.tolist() == whole.click.tolist()
    assert malformed == whole_stats.malformed == 4


def test_range_examples_name_byte_offsets(tmp_path):
    data = b"1 0 1:0\n1 0 2:0\nbroken\n1 1 3:0\n"
    path = tmp_path / "part-1"
    path.write_bytes(data)
    stream = iter_batches(str(path), [0], 10, start=5, end=len(data), max_error_rate=None)
    assert [b.ids_of(0).tolist() for b in stream] == [[2, 3]]
    offset = data.index(b"broken")
    assert stream.stats.examples == [f"{path}@{offset}: need at least `show click`"]
    # a range that starts exactly at a line start takes that line
    stream = iter_batches(str(path), [0], 10, start=8, end=9)
    assert [b.ids_of(0).tolist() for b in stream] == [[2]]
    # a range past the end of the file reads nothing
    assert list(iter_batches(str(path), [0], 10, start=len(data), end=len(data) + 5)) == []
    with pytest.raises(ValidationError, match="bad byte range"):
        iter_batches(str(path), [0], 10, start=5, end=2)


def test_ranges_of_compressed_files_only_whole(tmp_path):
    gz = tmp_path / "part-0.gz"
    gz.write_bytes(gzip.compress(b"1 1 42:0\n1 0 43:0\n"))
    size = gz.stat().st_size
    batch, _ = read_file(str(gz), [0], start=0, end=size)
    assert batch.ids_of(0).tolist() == [42, 43]
    for start, end in ((0, size - 1), (1, size)):
        with pytest.raises(ValidationError, match="compressed"):
            list(iter_batches(str(gz), [0], 4, start=start, end=end))
