"""Parse ElasticCTR sample lines into slot-wise numpy batches, fast and without losing count.

Format (one sample per line): ``show click feasign:slot feasign:slot ...``, e.g.
``1 0 17241709254077376921:0 132683728328325035:1``. show and click are non-negative
integers with click <= show; feasign and slot are unsigned 64-bit integers. Fields are
separated by spaces or tabs (a trailing CR is tolerated). A slot may appear several
times in a line (multi-valued: its ids are sum-pooled later) or not at all (length 0).

Why it is vectorised over bytes: a Python loop over tokens tops out near the training
rate, and the data path must never be the bottleneck. The whole chunk is classified
byte by byte with one table lookup, tokens are found from class edges, and digits are
accumulated column-wise, so the cost is a few numpy passes per chunk. The per-line
Python checker (`diagnose_line`) runs only on lines the vector pass rejected, to say
why; the two agree by construction and by test (tests/unit/test_data_parser.py).

Malformed lines are skipped, counted per file and reported with ``file:line`` examples;
`FileStats.check` fails a file whose malformed share exceeds ``max_error_rate``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

from elasticctr.constants import DEFAULT_MAX_ERROR_RATE
from elasticctr.errors import ValidationError

U64_MAX = 2**64 - 1
MAX_DIGITS = 20  # len(str(2**64 - 1)); longer tokens are rejected even with leading zeros
MAX_EXAMPLES = 5
MAX_CLASSIFIED = 10_000  # bad lines per file whose reason is worked out (the rest: counted)
DEFAULT_BLOCK_BYTES = 1 << 20  # measured: 1 MiB chunks stay in cache, 4 MiB parse ~30% slower

# Byte classes: digits and "other" bytes form tokens; whitespace, ':' and '\n' separate.
_DIGIT, _OTHER, _SPACE, _COLON, _NEWLINE = 0, 1, 2, 3, 4
_CLASS = np.full(256, _OTHER, dtype=np.uint8)
_CLASS[ord("0") : ord("9") + 1] = _DIGIT
_CLASS[[ord(" "), ord("\t"), ord("\r")]] = _SPACE
_CLASS[ord(":")] = _COLON
_CLASS[ord("\n")] = _NEWLINE
_TOKEN_TABLE = bytes(int(c <= _OTHER) for c in _CLASS.tolist())
_ALLOWED = b"0123456789 \t\r\n:"
_NL_BYTE, _COLON_BYTE = ord("\n"), ord(":")
_SPLIT = re.compile(rb"[ \t\r]+")
# A plainly valid non-blank line (the small-input path): show, click, then feasign:slot pairs.
# Digit counts are bounded here (19 always fit in uint64; 20 may not: checked; more: the
# vector pass), so the loop needs no length checks and int() never sees thousands of digits.
_PLAIN_LINE = re.compile(
    rb"[ \t\r]*([0-9]{1,19})[ \t\r]+([0-9]{1,19})"
    rb"((?:[ \t\r]+[0-9]{1,20}:[0-9]{1,20})*)[ \t\r]*"
)
_PAIR = re.compile(rb"([0-9]+):([0-9]+)")
SMALL_BYTES = 4 << 10
"""Inputs up to this size (a few lines: a prediction request) are first read line by line in
Python (`LineParser._parse_small`): the vector pass costs ~40 numpy calls, ~150 µs, whatever
the size; one 27-slot line costs ~30 µs in Python. Anything unusual falls back to it."""


@dataclass
class SlotBatch:
    """Samples in slot-major layout, slots in slot.conf order.

    For slot ``slots[j]``: ``ids[j]`` holds every feasign of that slot, sample after
    sample (uint64), and ``lengths[j][i]`` how many of them belong to sample ``i``
    (int32, 0 when the slot is missing). ``show`` and ``click`` (the label) are float32.
    """

    slots: tuple[int, ...]
    ids: list[np.ndarray]
    lengths: list[np.ndarray]
    show: np.ndarray
    click: np.ndarray

    def __len__(self) -> int:
        return int(self.show.shape[0])

    @property
    def label(self) -> np.ndarray:
        return self.click

    def slot_index(self, slot: int) -> int:
        try:
            return self.slots.index(slot)
        except ValueError:
            raise KeyError(f"slot {slot} is not in this batch's slots {list(self.slots)}") from None

    def ids_of(self, slot: int) -> np.ndarray:
        return self.ids[self.slot_index(slot)]

    def lengths_of(self, slot: int) -> np.ndarray:
        return self.lengths[self.slot_index(slot)]

    def offsets(self, j: int) -> np.ndarray:
        """int64 [n+1]: sample i's ids of slot j are ``ids[j][off[i]:off[i+1]]``."""
        off = np.zeros(len(self) + 1, dtype=np.int64)
        np.cumsum(self.lengths[j], out=off[1:])
        return off

    def sample(self, i: int) -> dict[int, list[int]]:
        """One sample as {slot: [feasign, ...]} (slots with no ids omitted); for tests/debug."""
        out: dict[int, list[int]] = {}
        for j, slot in enumerate(self.slots):
            off = self.offsets(j)
            if off[i + 1] > off[i]:
                out[slot] = [int(v) for v in self.ids[j][off[i] : off[i + 1]]]
        return out

    def slice(self, start: int, stop: int) -> SlotBatch:
        n = len(self)
        start, stop = max(0, min(start, n)), max(0, min(stop, n))
        stop = max(start, stop)
        ids, lengths = [], []
        for j in range(len(self.slots)):
            off = self.offsets(j)
            ids.append(self.ids[j][off[start] : off[stop]])
            lengths.append(self.lengths[j][start:stop])
        return SlotBatch(self.slots, ids, lengths, self.show[start:stop], self.click[start:stop])

    @staticmethod
    def empty(slots: Sequence[int]) -> SlotBatch:
        slots = tuple(int(s) for s in slots)
        return SlotBatch(
            slots,
            [np.zeros(0, np.uint64) for _ in slots],
            [np.zeros(0, np.int32) for _ in slots],
            np.zeros(0, np.float32),
            np.zeros(0, np.float32),
        )

    @staticmethod
    def concat(batches: Sequence[SlotBatch]) -> SlotBatch:
        if not batches:
            raise ValueError("concat needs at least one batch")
        slots = batches[0].slots
        if any(b.slots != slots for b in batches):
            raise ValueError("cannot concatenate batches with different slot lists")
        if len(batches) == 1:
            return batches[0]
        return SlotBatch(
            slots,
            [np.concatenate([b.ids[j] for b in batches]) for j in range(len(slots))],
            [np.concatenate([b.lengths[j] for b in batches]) for j in range(len(slots))],
            np.concatenate([b.show for b in batches]),
            np.concatenate([b.click for b in batches]),
        )


@dataclass
class FileStats:
    """What happened while reading one file (or one in-memory source)."""

    source: str = "<memory>"
    lines: int = 0  # physical lines, including blank and malformed ones
    samples: int = 0
    blank: int = 0
    malformed: int = 0
    ignored_features: int = 0  # feasign:slot pairs whose slot is not in slot.conf
    ignored_slots: dict[int, int] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    # Reading a byte range that starts mid-file, line numbers are unknown: examples then
    # name the line's byte offset (`file@offset`); `chunk_offset` is the reader's position.
    byte_offsets: bool = False
    chunk_offset: int = 0

    @property
    def error_rate(self) -> float:
        counted = self.lines - self.blank
        return self.malformed / counted if counted else 0.0

    def merge(self, other: FileStats) -> None:
        """Add another file's counts (for totals over a partition); keeps a few examples."""
        self.lines += other.lines
        self.samples += other.samples
        self.blank += other.blank
        self.malformed += other.malformed
        self.ignored_features += other.ignored_features
        for k, v in other.ignored_slots.items():
            self.ignored_slots[k] = self.ignored_slots.get(k, 0) + v
        for k, v in other.reasons.items():
            self.reasons[k] = self.reasons.get(k, 0) + v
        room = MAX_EXAMPLES - len(self.examples)
        if room > 0:
            self.examples.extend(other.examples[:room])

    def summary(self) -> str:
        text = (
            f"{self.source}: {self.lines} lines, {self.samples} samples, "
            f"{self.malformed} malformed ({self.error_rate:.2%}), {self.blank} blank, "
            f"{self.ignored_features} features of slots not in slot.conf ignored"
        )
        return text

    def check(self, max_error_rate: float) -> None:
        """Raise a ValidationError naming the file, the rate and examples if over the bound."""
        if self.malformed and self.error_rate > max_error_rate:
            reasons = ", ".join(f"{k}: {v}" for k, v in sorted(self.reasons.items()))
            raise ValidationError(
                f"{self.source}: {self.malformed} of {self.lines - self.blank} lines malformed "
                f"({self.error_rate:.2%}, more than the allowed {max_error_rate:.2%}; {reasons})",
                problems=list(self.examples),
                hint="fix or drop the bad lines, or raise global.data.maxErrorRate",
            )


def diagnose_line(line: bytes) -> tuple[str, str] | None:
    """Why a line is malformed as (category, detail), or None when it is valid or blank.

    The readable twin of the vectorised check: it is only called for lines that pass
    failed, and must reject exactly the same lines.
    """
    line = line.rstrip(b"\n")
    toks = [t for t in _SPLIT.split(line) if t]
    if not toks:
        return None if not line.strip(b" \t\r") else ("bad character", "stray characters")
    if len(toks) < 2:
        return "missing fields", "need at least `show click`"
    values = []
    for name, tok in (("show", toks[0]), ("click", toks[1])):
        if tok[:1] == b"-" and tok[1:].isdigit():
            return f"negative {name}", f"{name} is {tok.decode(errors='replace')}"
        if not tok.isdigit():
            return "bad integer", f"{name} is not a non-negative integer: {_show(tok)}"
        if len(tok) > MAX_DIGITS or int(tok) > U64_MAX:
            return "beyond uint64", f"{name} {_show(tok)} does not fit in uint64"
        values.append(int(tok))
    show, click = values
    if click > show:
        return "click > show", f"click {click} > show {show}"
    for tok in toks[2:]:
        parts = tok.split(b":")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            return "bad feasign:slot", f"token {_show(tok)} is not <feasign>:<slot>"
        for name, part in zip(("feasign", "slot"), parts, strict=True):
            if not part.isdigit():
                return "bad integer", f"{name} is not a non-negative integer in {_show(tok)}"
            if len(part) > MAX_DIGITS or int(part) > U64_MAX:
                return "beyond uint64", f"{name} in {_show(tok)} does not fit in uint64"
    return None


def _show(tok: bytes, limit: int = 40) -> str:
    text = tok.decode("utf-8", errors="replace")
    return repr(text if len(text) <= limit else text[:limit] + "...")


_ZEROS = np.uint64(0x3030303030303030)
# _LOW[m]: the m low bytes of a little-endian word, i.e. the first m bytes in memory.
_LOW = np.array([(1 << (8 * m)) - 1 for m in range(9)], dtype=np.uint64)
_PAD = 24  # three 8-byte words right-aligned on a token cover MAX_DIGITS


def _swar8(words: np.ndarray) -> np.ndarray:
    """Eight ASCII digits per uint64 (first digit in the lowest byte) -> their value.

    The usual SWAR reduction: pairs, then quads, then the eight-digit number, three
    multiply-shift steps for all tokens at once (uint64 arithmetic wraps by design).
    """
    v = words & np.uint64(0x0F0F0F0F0F0F0F0F)
    v = (v * np.uint64(2561)) >> np.uint64(8)
    v = ((v & np.uint64(0x00FF00FF00FF00FF)) * np.uint64(6553601)) >> np.uint64(16)
    v = ((v & np.uint64(0x0000FFFF0000FFFF)) * np.uint64(42949672960001)) >> np.uint64(32)
    return v


def _word_values(words: np.ndarray, s: np.ndarray, e: np.ndarray, back: int) -> np.ndarray:
    """Value of the 8 digit positions ending ``back - 8`` bytes before each token end."""
    p = e - back
    lead = _LOW[np.clip(s - p, 0, 8)]
    return _swar8((words[p] & ~lead) | (_ZEROS & lead))


def _token_values(padded: bytes, starts: np.ndarray, ends: np.ndarray):
    """uint64 values of digit tokens and a mask of those that do not fit (or are too long).

    ``padded`` is the chunk with _PAD filler bytes in front; starts/ends index the chunk.
    Each token is read as unaligned 8-byte words ending at its last digit; bytes before
    the token are replaced by '0' so short tokens need no special case. The last word
    covers show, click and slot tokens; only longer tokens (feasigns) read two more.
    """
    n = starts.shape[0]
    if n == 0:
        return np.zeros(0, np.uint64), np.zeros(0, bool)
    words = np.ndarray(shape=(len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))
    s = starts + _PAD
    e = ends + _PAD
    value = _word_values(words, s, e, 8)
    length = ends - starts
    over = length > MAX_DIGITS
    long = np.flatnonzero(length > 8)
    if long.size:
        ls, le = s[long], e[long]
        w0 = _word_values(words, ls, le, 24)
        w1 = _word_values(words, ls, le, 16)
        w2 = value[long]
        value[long] = w0 * np.uint64(10**16) + w1 * np.uint64(10**8) + w2
        over[long] |= (w0 > 1844) | (
            (w0 == 1844) & ((w1 > 67440737) | ((w1 == 67440737) & (w2 > 9551615)))
        )
    return value, over


@dataclass
class Scan:
    """Valid samples of a chunk before slot selection: one row per feasign:slot pair."""

    show: np.ndarray  # uint64 [samples]
    click: np.ndarray  # uint64 [samples]
    feasigns: np.ndarray  # uint64 [pairs]
    slots: np.ndarray  # uint64 [pairs]
    sample: np.ndarray  # int64 [pairs], index of the pair's sample


def scan(data: bytes, stats: FileStats) -> Scan:
    """Validate and tokenise complete lines: the slot-agnostic half of parsing.

    Updates ``stats`` (lines, blank, samples, malformed with reasons and examples).
    """
    first_line = stats.lines + 1
    if not data:
        empty = np.zeros(0, np.uint64)
        return Scan(empty, empty, empty, empty, np.zeros(0, np.int64))
    if data[-1:] != b"\n":
        data = data + b"\n"
    a = np.frombuffer(data, dtype=np.uint8)
    nl_pos = np.flatnonzero(a == _NL_BYTE)
    nlines = int(nl_pos.shape[0])

    # bytes.translate is a C loop: 4x faster than a numpy table lookup here.
    tok = np.frombuffer(data.translate(_TOKEN_TABLE), dtype=np.int8)
    edges = np.diff(tok, prepend=np.int8(0))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)  # the last byte is '\n', so every token ends
    ntok = int(starts.shape[0])
    tok_line = np.searchsorted(nl_pos, starts)
    per_line = np.bincount(tok_line, minlength=nlines)
    first_tok = np.cumsum(per_line) - per_line
    k = np.arange(ntok) - first_tok[tok_line]

    # starts - 1 == -1 reads the final '\n': not a colon, as wanted
    is_fea = a[ends] == _COLON_BYTE
    is_slot = a[starts - 1] == _COLON_BYTE
    pair = k - 2
    odd = (pair & 1).astype(bool)
    want_fea = (pair >= 0) & ~odd
    want_slot = (pair >= 0) & odd

    values, overflow = _token_values(b" " * _PAD + data, starts, ends)
    bad_tok = (is_fea != want_fea) | (is_slot != want_slot) | overflow
    bad = np.zeros(nlines, dtype=bool)
    bad[tok_line[bad_tok]] = True
    bad |= per_line % 2 == 1
    # every ':' must join a token on its left to one on its right
    colon_pos = np.flatnonzero(a == _COLON_BYTE)
    if colon_pos.size:
        stray = (tok[colon_pos - 1] == 0) | (tok[colon_pos + 1] == 0)
        bad[np.searchsorted(nl_pos, colon_pos[stray])] = True
    if data.translate(None, _ALLOWED):
        other_pos = np.flatnonzero(_CLASS[a] == _OTHER)
        bad[np.searchsorted(nl_pos, other_pos)] = True

    # show / click: first two tokens of every line with tokens
    has_tok = per_line >= 2
    show = np.zeros(nlines, dtype=np.uint64)
    click = np.zeros(nlines, dtype=np.uint64)
    show[has_tok] = values[first_tok[has_tok]]
    click[has_tok] = values[first_tok[has_tok] + 1]
    bad |= has_tok & (click > show)

    blank = (per_line == 0) & ~bad
    good = ~bad & ~blank
    nsamples = int(good.sum())

    stats.lines += nlines
    stats.blank += int(blank.sum())
    stats.samples += nsamples
    bad_idx = np.flatnonzero(bad)
    if bad_idx.size:
        _record_bad(data, nl_pos, bad_idx, first_line, stats)

    # feasign:slot pairs of good lines
    sample_of_line = np.cumsum(good) - 1
    fea_tok = np.flatnonzero(is_fea & good[tok_line])
    feasigns = values[fea_tok]
    slot_vals = values[fea_tok + 1]
    sample = sample_of_line[tok_line[fea_tok]]
    return Scan(show[good], click[good], feasigns, slot_vals, sample)


def _record_bad(data, nl_pos, bad_idx, first_line, stats: FileStats) -> None:
    stats.malformed += int(bad_idx.size)
    budget = max(0, MAX_CLASSIFIED - sum(stats.reasons.values()))
    if budget < bad_idx.size:
        rest = int(bad_idx.size) - budget
        stats.reasons["not classified"] = stats.reasons.get("not classified", 0) + rest
    for i in bad_idx[:budget].tolist():
        begin = int(nl_pos[i - 1]) + 1 if i else 0
        line = data[begin : int(nl_pos[i])]
        found = diagnose_line(line)
        # The vector pass is the authority; a disagreement would be a parser bug.
        category, detail = found or ("malformed", "rejected")
        stats.reasons[category] = stats.reasons.get(category, 0) + 1
        if len(stats.examples) < MAX_EXAMPLES:
            where = (
                f"{stats.source}@{stats.chunk_offset + begin}"
                if stats.byte_offsets
                else f"{stats.source}:{first_line + i}"
            )
            stats.examples.append(f"{where}: {detail}")


class LineParser:
    """Parses chunks of complete lines for a fixed slot list (slot.conf order).

    ``sparse_dim`` (ElasticCTR's SPARSE_DIM) maps every feasign to ``feasign % sparse_dim``;
    None or 0 keeps raw feasigns (as ``global.data.sparseDim: 0``).
    """

    def __init__(self, slots: Sequence[int], sparse_dim: int | None = None):
        slots = tuple(int(s) for s in slots)
        if not slots:
            raise ValidationError("the slot list is empty: slot.conf needs at least one slot id")
        if len(set(slots)) != len(slots):
            raise ValidationError(f"duplicate slot ids in the slot list {list(slots)}")
        if any(s < 0 or s > U64_MAX for s in slots):
            raise ValidationError(f"slot ids must be in [0, 2^64): {list(slots)}")
        if sparse_dim is not None and sparse_dim < 0:
            raise ValidationError(f"sparse_dim must be >= 0 (0 = raw feasigns), got {sparse_dim}")
        self.slots = slots
        self.sparse_dim = sparse_dim or None
        order = np.argsort(np.array(slots, dtype=np.uint64), kind="stable")
        self._sorted_slots = np.array(slots, dtype=np.uint64)[order]
        self._slot_pos = order.astype(np.int64)
        self._slot_index = {s: j for j, s in enumerate(slots)}

    def parse(self, data: bytes, stats: FileStats | None = None) -> SlotBatch:
        """Parse complete lines (a final line without '\\n' is fine); updates ``stats``."""
        stats = stats if stats is not None else FileStats()
        if not data:
            return SlotBatch.empty(self.slots)
        if len(data) <= SMALL_BYTES:
            batch = self._parse_small(data, stats)
            if batch is not None:
                return batch
        return self._parse_vector(data, stats)

    def _parse_small(self, data: bytes, stats: FileStats) -> SlotBatch | None:
        """A few lines read one by one in Python, with the vector pass's results; None (and
        ``stats`` untouched) as soon as a line is not plainly valid -- malformed, beyond
        uint64, a slot not in the list -- so the vector pass, the authority on every rule,
        parses the input instead and says what is wrong."""
        lines = data.split(b"\n")
        if not lines[-1]:
            lines.pop()
        index, sparse_dim = self._slot_index, self.sparse_dim
        per_slot: list[list[int]] = [[] for _ in self.slots]
        stride = len(lines)  # >= samples
        cells = [0] * (len(self.slots) * stride)  # [slot position, sample]: feasigns
        shows: list[int] = []
        clicks: list[int] = []
        blank = 0
        match, pairs = _PLAIN_LINE.fullmatch, _PAIR.findall
        for line in lines:
            m = match(line)
            if m is None:
                if line.strip(b" \t\r"):
                    return None
                blank += 1
                continue
            show_tok, click_tok, rest = m.groups()
            show, click = int(show_tok), int(click_tok)
            if click > show:
                return None
            sample = len(shows)
            for fea_tok, slot_tok in pairs(rest):
                pos = index.get(int(slot_tok))
                fea = int(fea_tok)
                if pos is None or fea > U64_MAX:
                    return None
                per_slot[pos].append(fea % sparse_dim if sparse_dim is not None else fea)
                cells[pos * stride + sample] += 1
            shows.append(show)
            clicks.append(click)
        nsamples, nslots = len(shows), len(self.slots)
        flat = np.array([f for ids in per_slot for f in ids], dtype=np.uint64)
        ids, start = [], 0
        for lst in per_slot:
            ids.append(flat[start : start + len(lst)])
            start += len(lst)
        lengths = np.array(cells, dtype=np.int32).reshape(nslots, stride)[:, :nsamples]
        stats.lines += len(lines)
        stats.blank += blank
        stats.samples += nsamples
        return SlotBatch(
            self.slots,
            ids,
            list(lengths),
            np.array(shows, dtype=np.uint64).astype(np.float32),
            np.array(clicks, dtype=np.uint64).astype(np.float32),
        )

    def _parse_vector(self, data: bytes, stats: FileStats) -> SlotBatch:
        """The vectorised parse (module docstring): any input, every rule."""
        sc = scan(data, stats)
        show, click, feasigns, slot_vals, sample = (
            sc.show,
            sc.click,
            sc.feasigns,
            sc.slots,
            sc.sample,
        )
        nsamples = int(show.shape[0])
        pos = np.searchsorted(self._sorted_slots, slot_vals)
        pos_c = np.minimum(pos, len(self.slots) - 1)
        known = self._sorted_slots[pos_c] == slot_vals
        if not known.all():
            unknown = slot_vals[~known]
            stats.ignored_features += int(unknown.size)
            uniq, counts = np.unique(unknown, return_counts=True)
            for s, c in zip(uniq.tolist(), counts.tolist(), strict=True):
                stats.ignored_slots[s] = stats.ignored_slots.get(s, 0) + c
            feasigns, sample, pos_c = feasigns[known], sample[known], pos_c[known]
        slot_idx = self._slot_pos[pos_c]
        if self.sparse_dim is not None:
            feasigns = feasigns % np.uint64(self.sparse_dim)

        nslots = len(self.slots)
        # stable argsort of small ints is a radix sort in numpy: keep the key 16-bit
        key = slot_idx.astype(np.int16) if nslots < 2**15 else slot_idx
        order = np.argsort(key, kind="stable")
        per_slot = np.bincount(slot_idx, minlength=nslots)
        ids = np.split(feasigns[order], np.cumsum(per_slot)[:-1])
        lengths = (
            np.bincount(slot_idx * nsamples + sample, minlength=nslots * nsamples)
            .reshape(nslots, nsamples)
            .astype(np.int32)
        )
        return SlotBatch(
            self.slots,
            [np.ascontiguousarray(x) for x in ids],
            list(lengths),
            show.astype(np.float32),
            click.astype(np.float32),
        )


def parse_bytes(
    data: bytes,
    slots: Sequence[int],
    *,
    sparse_dim: int | None = None,
    source: str = "<memory>",
    max_error_rate: float | None = None,
) -> tuple[SlotBatch, FileStats]:
    """Parse a whole in-memory text; with ``max_error_rate`` also enforce the bound."""
    stats = FileStats(source=source)
    batch = LineParser(slots, sparse_dim).parse(data, stats)
    if max_error_rate is not None:
        stats.check(max_error_rate)
    return batch, stats


def parse_lines(
    lines: Iterable[str | bytes],
    slots: Sequence[int],
    *,
    sparse_dim: int | None = None,
    source: str = "<memory>",
    max_error_rate: float | None = None,
) -> tuple[SlotBatch, FileStats]:
    """Parse an iterable of lines (str or bytes, with or without '\\n')."""
    parts = []
    for line in lines:
        raw = line.encode() if isinstance(line, str) else line
        parts.append(raw.rstrip(b"\n"))
    data = b"\n".join(parts) + b"\n" if parts else b""
    return parse_bytes(
        data, slots, sparse_dim=sparse_dim, source=source, max_error_rate=max_error_rate
    )


class BatchStream:
    """Iterate a file or URL as SlotBatches of ``batch_size`` samples (the last may be short).

    Reads ``block_bytes`` at a time, parses whole lines only and keeps sample order.
    ``stats`` is live while iterating; at the end the error-rate bound is enforced
    (a ValidationError naming the file) unless ``max_error_rate`` is None.

    ``start``/``end`` select a byte range, as the coordinator's tasks do: exactly the
    lines that *begin* at an offset in ``[start, end)`` are read (the last one to its
    end), so consecutive ranges cover every line once. Examples of bad lines in a range
    starting mid-file name byte offsets (``file@12345``) instead of line numbers.
    Compressed files can only be read whole.
    """

    def __init__(
        self,
        source: str | BinaryIO,
        slots: Sequence[int],
        batch_size: int,
        *,
        sparse_dim: int | None = None,
        max_error_rate: float | None = DEFAULT_MAX_ERROR_RATE,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        hdfs_ugi: str | None = None,
        name: str | None = None,
        start: int = 0,
        end: int | None = None,
    ):
        if batch_size <= 0:
            raise ValidationError(f"batch size must be positive, got {batch_size}")
        if start < 0 or (end is not None and end < start):
            raise ValidationError(f"bad byte range [{start}, {end})")
        self.start, self.end = start, end
        self.source = source
        self.parser = LineParser(slots, sparse_dim)
        self.batch_size = batch_size
        self.max_error_rate = max_error_rate
        self.block_bytes = max(1, block_bytes)
        self.hdfs_ugi = hdfs_ugi
        label = name or (source if isinstance(source, str) else getattr(source, "name", None))
        self.stats = FileStats(source=str(label or "<stream>"), byte_offsets=start > 0)

    def _open(self):
        if not isinstance(self.source, str):
            return _NoClose(self.source)
        from elasticctr.data.storage import open_input, url_to_fs

        fh = open_input(self.source, hdfs_ugi=self.hdfs_ugi)
        compression = getattr(fh, "ectl_compression", None)
        if compression and (self.start > 0 or self.end is not None):
            # a range of a compressed file is only meaningful as the whole file
            fs, path = url_to_fs(self.source, self.hdfs_ugi)
            if self.start > 0 or self.end < fs.size(path):
                fh.close()
                named = not getattr(fh, "ectl_sniffed", False)
                raise ValidationError(
                    f"{self.source}: cannot read bytes [{self.start}, {self.end}) of a "
                    + ("compressed file" if named else f"{compression} file without a "
                       f"{'.gz' if compression == 'gzip' else '.bz2'} suffix"),
                    hint="give compressed files as whole-file tasks" if named else
                    "name compressed files *.gz / *.bz2 so they are read as whole files",
                )  # fmt: skip
            self.end = None
        return fh

    def _chunks(self) -> Iterator[bytes]:
        """Complete lines, block by block; ``self.stats.chunk_offset`` = each one's offset."""
        with self._open() as fh:
            end = self.end  # after _open: a whole compressed file is read to its end
            offset = 0  # file offset of rest[0]
            rest = b""
            if self.start > 0:
                self._check_seekable(fh)
                # the line beginning at `start` is ours if byte start-1 ends the line before
                fh.seek(self.start - 1)
                offset = self.start - 1
                while True:
                    block = fh.read(self.block_bytes)
                    if not block:
                        return
                    cut = block.find(b"\n")
                    if cut >= 0:
                        rest = block[cut + 1 :]
                        offset += cut + 1
                        break
                    offset += len(block)
            while True:
                if end is not None and offset >= end:
                    return
                block = fh.read(self.block_bytes)
                if not block:
                    break
                block = rest + block
                cut = block.rfind(b"\n")
                if cut < 0:
                    rest = block
                    continue
                if end is not None and offset + cut + 1 > end:
                    # lines beginning before `end`: up to the line containing byte end-1
                    last = block.find(b"\n", end - offset - 1)
                    self.stats.chunk_offset = offset
                    yield block[: last + 1]
                    return
                rest = block[cut + 1 :]
                self.stats.chunk_offset = offset
                yield block[: cut + 1]
                offset += cut + 1
            if rest and (end is None or offset < end):
                if end is not None and offset + len(rest) > end:
                    last = rest.find(b"\n", end - offset - 1)
                    rest = rest[: last + 1] if last >= 0 else rest
                self.stats.chunk_offset = offset
                yield rest

    def _check_seekable(self, fh) -> None:
        if not (hasattr(fh, "seekable") and fh.seekable()):
            raise ValidationError(
                f"{self.stats.source}: cannot start reading at byte {self.start} of an "
                "unseekable stream"
            )

    def __iter__(self) -> Iterator[SlotBatch]:
        pending: list[SlotBatch] = []
        have = 0
        for chunk in self._chunks():
            batch = self.parser.parse(chunk, self.stats)
            if len(batch) == 0:
                continue
            pending.append(batch)
            have += len(batch)
            if have >= self.batch_size:
                merged = SlotBatch.concat(pending)
                start = 0
                while have - start >= self.batch_size:
                    yield merged.slice(start, start + self.batch_size)
                    start += self.batch_size
                pending = [merged.slice(start, have)] if start < have else []
                have -= start
        if have:
            yield SlotBatch.concat(pending)
        if self.max_error_rate is not None:
            self.stats.check(self.max_error_rate)


def iter_batches(
    source: str | BinaryIO,
    slots: Sequence[int],
    batch_size: int,
    **kw,
) -> BatchStream:
    """A `BatchStream` over a path/URL (file://, hdfs://, http(s)://) or binary file object."""
    return BatchStream(source, slots, batch_size, **kw)


class _NoClose:
    def __init__(self, fh: BinaryIO):
        self.fh = fh

    def __enter__(self):
        return self.fh

    def __exit__(self, *exc):
        return False


def read_file(source: str | BinaryIO, slots: Sequence[int], **kw) -> tuple[SlotBatch, FileStats]:
    """Parse a whole file into one batch (convenience for tools and tests)."""
    stream = BatchStream(source, slots, batch_size=1 << 62, **kw)
    batches = list(stream)
    return (SlotBatch.concat(batches) if batches else SlotBatch.empty(stream.parser.slots)), (
        stream.stats
    )


__all__ = [
    "BatchStream",
    "FileStats",
    "LineParser",
    "SlotBatch",
    "diagnose_line",
    "iter_batches",
    "parse_bytes",
    "parse_lines",
    "read_file",
]
