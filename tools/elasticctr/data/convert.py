"""Raw tables (Criteo TSV, CSV) -> ElasticCTR lines, with no code.

Two passes: `fit` reads the rows once to learn the columns' kinds, statistics and the
numeric columns' quantile boundaries into a `FeatureSpec`; `convert` reads them again
and writes ``show click feasign:slot ...`` lines through `FeatureSpec.transform` (the
function serving uses too). A spec from an earlier run can be reused, so later hours
get the same buckets and feasigns.

Bad rows (wrong field count, label not 0/1, a non-number in a numeric column) are
skipped, counted per file with ``file:line`` examples, and fail the file above
``max_error_rate`` — the same rule as the line parser.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from elasticctr.constants import DEFAULT_MAX_ERROR_RATE, DONEFILE, SLOT_CONF
from elasticctr.data import storage
from elasticctr.data.config import format_slot_conf
from elasticctr.data.features import (
    CRITEO_CATEGORICAL,
    CRITEO_COLUMNS,
    CRITEO_NUMERIC,
    Feature,
    FeatureSpec,
    format_line,
    is_missing,
)
from elasticctr.data.parser import FileStats
from elasticctr.errors import EctlError, ValidationError

KINDS = ("criteo", "csv")
SAMPLE_LIMIT = 1_000_000  # numeric values kept per column for quantiles (reservoir)
DISTINCT_LIMIT = 100_000  # categorical values counted exactly per column
WRITE_BLOCK = 10_000


@dataclass
class ConvertOptions:
    kind: str = "criteo"
    delimiter: str | None = None
    header: bool = True
    columns: list[str] | None = None
    label: str = "label"
    numeric: list[str] | None = None
    categorical: list[str] | None = None
    drop: list[str] = field(default_factory=list)
    buckets: int = 16
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    seed: int = 0

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise ValidationError(f"--from must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.buckets < 2:
            raise ValidationError(f"--buckets must be >= 2, got {self.buckets}")
        if self.kind == "csv" and not self.header and not self.columns:
            raise ValidationError("a CSV without header needs --columns name1,name2,...")


def _lines(url: str, hdfs_ugi: str | None) -> Iterator[tuple[int, str]]:
    """(line number, text without the line end) of every line."""
    with storage.open_input(url, hdfs_ugi) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")
        for number, line in enumerate(text, start=1):
            yield number, line.rstrip("\r\n")


def _split_rows(url: str, delimiter: str, hdfs_ugi: str | None):
    """(line number, fields) per non-empty row; CSV quoting unless tab-separated."""
    if delimiter == "\t":
        for number, line in _lines(url, hdfs_ugi):
            if line:
                yield number, line.split("\t")
        return
    with storage.open_input(url, hdfs_ugi) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")
        reader = csv.reader(text, delimiter=delimiter)
        for fields in reader:
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                continue
            yield reader.line_num, fields


def _first_line(url: str, hdfs_ugi: str | None) -> str | None:
    for _, line in _lines(url, hdfs_ugi):
        if line.strip():
            return line
    return None


def _normalize(name: str) -> str:
    """Header names of the Criteo layouts: `Label`/`label` -> label, `i1` -> I1."""
    name = name.strip().strip('"')
    if name.lower() == "label":
        return "label"
    if len(name) > 1 and name[0] in "iIcC" and name[1:].isdigit():
        return name[0].upper() + name[1:]
    return name


@dataclass
class _Layout:
    """How one file's rows map onto the spec's columns."""

    delimiter: str
    header: bool
    positions: list[int] | None  # spec column i is field positions[i]; None = same order
    width: int  # fields a row may have


def _positions(url: str, names: list[str], columns: list[str]) -> list[int] | None:
    if names == columns:
        return None
    exact = {n: i for i, n in enumerate(names)}
    loose = {_normalize(n).lower(): i for i, n in enumerate(names)}
    out, missing = [], []
    for c in columns:
        i = exact.get(c, loose.get(_normalize(c).lower()))
        if i is None:
            missing.append(c)
        else:
            out.append(i)
    if missing:
        raise ValidationError(
            f"{url}: the header lacks {len(missing)} column(s) of the feature spec: "
            + ", ".join(missing[:8])
            + (" ..." if len(missing) > 8 else ""),
            hint=f"the header has: {', '.join(names[:12])}{' ...' if len(names) > 12 else ''}",
        )
    return out


def _layout(url: str, opts: ConvertOptions, columns: list[str], hdfs_ugi) -> _Layout:
    """Criteo: the raw Kaggle TSV (label first, no header) or a table with a header naming
    Label, I1..I13, C1..C26 (e.g. Kaggle's `Id,Label,I1,...` CSV; other columns such as Id
    are ignored), told apart by the first line. CSV: the header (or --columns) by name."""
    if opts.kind == "criteo":
        first = _first_line(url, hdfs_ugi) or ""
        delimiter = "\t" if "\t" in first else ","
        names = [_normalize(n) for n in first.split(delimiter)]
        if first.split(delimiter)[0].strip() in ("0", "1") or not ({"I1", "C1"} <= set(names)):
            # raw Kaggle rows, positional (bad ones are reported row by row)
            raw = _positions(url, list(CRITEO_COLUMNS), columns)
            return _Layout("\t", False, raw, len(CRITEO_COLUMNS))
        return _Layout(delimiter, True, _positions(url, names, columns), len(names))
    delimiter = opts.delimiter or ","
    if not opts.header:
        names = list(opts.columns or columns)
        return _Layout(delimiter, False, _positions(url, names, columns), len(names))
    for _, fields in _split_rows(url, delimiter, hdfs_ugi):
        names = [f.strip() for f in fields]
        return _Layout(delimiter, True, _positions(url, names, columns), len(names))
    raise EctlError(f"{url}: empty file, no CSV header")


def _header(url: str, opts: ConvertOptions, hdfs_ugi: str | None) -> list[str]:
    if opts.kind == "criteo":
        return list(CRITEO_COLUMNS)
    if not opts.header:
        return list(opts.columns or [])
    for _, fields in _split_rows(url, opts.delimiter or ",", hdfs_ugi):
        return [f.strip() for f in fields]
    raise EctlError(f"{url}: empty file, no CSV header")


def _data_rows(url: str, opts: ConvertOptions, columns: list[str], hdfs_ugi: str | None):
    """(line number, fields in `columns` order or None, error) per data row."""
    layout = _layout(url, opts, columns, hdfs_ugi)
    rows = _split_rows(url, layout.delimiter, hdfs_ugi)
    if layout.header:
        next(rows, None)
    ncols = len(columns)
    for number, fields in rows:
        if len(fields) > layout.width:
            yield number, None, f"{len(fields)} fields, expected {layout.width}"
            continue
        if len(fields) < layout.width:  # trailing empty fields stripped (PaddleRec's files)
            fields = fields + [""] * (layout.width - len(fields))
        if layout.positions is not None:
            fields = [fields[i] for i in layout.positions]
        elif len(fields) < ncols:
            fields = fields + [""] * (ncols - len(fields))
        yield number, fields, None


def _label(raw: str) -> int | None:
    raw = raw.strip()
    if raw in ("0", "1"):
        return int(raw)
    try:
        value = float(raw)
    except ValueError:
        return None
    return int(value) if value in (0.0, 1.0) else None


def _float(raw: str) -> float | None:
    try:
        x = float(raw)
    except ValueError:
        return None
    return None if math.isnan(x) or math.isinf(x) else x


def fit(
    sources: Sequence[str],
    opts: ConvertOptions,
    *,
    hdfs_ugi: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> FeatureSpec:
    """Learn columns, kinds, statistics and numeric bucket boundaries from the rows."""
    opts.validate()
    if not sources:
        raise ValidationError("no input files")
    columns = _header(sources[0], opts, hdfs_ugi)
    if len(set(columns)) != len(columns):
        raise ValidationError(f"duplicate column names: {columns}")
    label = opts.label
    if label not in columns:
        raise ValidationError(
            f"label column {label!r} is not among the columns {columns}", hint="use --label"
        )
    unknown = [
        c for c in (opts.numeric or []) + (opts.categorical or []) + opts.drop if c not in columns
    ]
    if unknown:
        raise ValidationError(f"unknown columns {unknown}; the columns are {columns}")
    feature_cols = [c for c in columns if c != label and c not in opts.drop]
    if opts.kind == "criteo" and opts.numeric is None and opts.categorical is None:
        numeric_fixed = set(CRITEO_NUMERIC) & set(feature_cols)
        categorical_fixed = set(CRITEO_CATEGORICAL) & set(feature_cols)
    else:
        numeric_fixed = set(opts.numeric or [])
        categorical_fixed = set(opts.categorical or [])
        if opts.numeric is not None and opts.categorical is None:
            categorical_fixed = set(feature_cols) - numeric_fixed
        elif opts.categorical is not None and opts.numeric is None:
            numeric_fixed = set(feature_cols) - categorical_fixed
    rng = np.random.default_rng(opts.seed)
    index = {c: i for i, c in enumerate(columns)}
    maybe_numeric = {c: c not in categorical_fixed for c in feature_cols}
    samples: dict[str, list[float]] = {c: [] for c in feature_cols}
    seen_numbers: dict[str, int] = dict.fromkeys(feature_cols, 0)
    counters: dict[str, Counter] = {c: Counter() for c in feature_cols}
    overflow: dict[str, bool] = dict.fromkeys(feature_cols, False)
    present: dict[str, int] = dict.fromkeys(feature_cols, 0)
    rows = clicks = 0
    for url in sources:
        for _, fields, error in _data_rows(url, opts, columns, hdfs_ugi):
            if error:
                continue
            y = _label(fields[index[label]])
            if y is None:
                continue
            rows += 1
            clicks += y
            for c in feature_cols:
                raw = fields[index[c]]
                if is_missing(raw):
                    continue
                present[c] += 1
                raw = raw.strip()
                if maybe_numeric[c]:
                    x = _float(raw)
                    if x is None:
                        if c in numeric_fixed:
                            continue  # a bad row for convert(); not a reason to change kind
                        maybe_numeric[c] = False
                    else:
                        seen_numbers[c] += 1
                        bucket = samples[c]
                        if len(bucket) < SAMPLE_LIMIT:
                            bucket.append(x)
                        else:
                            j = int(rng.integers(0, seen_numbers[c]))
                            if j < SAMPLE_LIMIT:
                                bucket[j] = x
                counter = counters[c]
                if raw in counter or len(counter) < DISTINCT_LIMIT:
                    counter[raw] += 1
                else:
                    overflow[c] = True
            if progress and rows % 10_000 == 0:
                progress(10_000)
    if rows == 0:
        raise ValidationError(
            f"no usable rows in {', '.join(sources)}",
            hint="check --from, --label and the delimiter",
        )
    features = []
    for slot, c in enumerate(feature_cols):
        numeric = c in numeric_fixed or (c not in categorical_fixed and maybe_numeric[c])
        stats: dict = {"present": present[c], "missing": rows - present[c]}
        if numeric:
            values = np.array(samples[c], dtype=np.float64)
            if values.size:
                qs = np.quantile(values, np.linspace(0, 1, opts.buckets + 1)[1:-1])
                boundaries = sorted({float(q) for q in qs})
                stats.update(
                    min=float(values.min()), max=float(values.max()), mean=float(values.mean())
                )
            else:
                boundaries = []
            features.append(Feature(c, slot, "numeric", boundaries, stats))
        else:
            counter = counters[c]
            stats.update(
                distinct=len(counter),
                distinct_exact=not overflow[c],
                top=[[v, n] for v, n in counter.most_common(5)],
            )
            features.append(Feature(c, slot, "categorical", [], stats))
    return FeatureSpec(
        columns=columns,
        label=label,
        features=features,
        input={
            "kind": opts.kind,
            "delimiter": opts.delimiter or ("\t" if opts.kind == "criteo" else ","),
            "header": bool(opts.header) if opts.kind == "csv" else False,
        },
        summary={"fit_rows": rows, "fit_clicks": clicks, "fit_sources": list(sources)},
    )


@dataclass
class ConvertResult:
    rows: int = 0
    clicks: int = 0
    written: list[str] = field(default_factory=list)
    files: list[FileStats] = field(default_factory=list)


def _convert_lines(url, spec, opts, stats: FileStats, hdfs_ugi) -> Iterator[tuple[int, str]]:
    index = {c: i for i, c in enumerate(spec.columns)}
    label_at = index[spec.label]
    for number, fields, error in _data_rows(url, opts, spec.columns, hdfs_ugi):
        stats.lines += 1
        category = "field count"
        if error is None:
            y = _label(fields[label_at])
            if y is None:
                category, error = "bad label", f"label {fields[label_at]!r} is not 0 or 1"
            else:
                try:
                    feats = spec.transform(fields)
                except ValidationError as exc:
                    category, error = "not a number", exc.message
        if error is not None:
            stats.malformed += 1
            stats.reasons[category] = stats.reasons.get(category, 0) + 1
            if len(stats.examples) < 5:
                stats.examples.append(f"{url}:{number}: {error}")
            continue
        stats.samples += 1
        yield y, format_line(y, feats)


def convert(
    sources: Sequence[str],
    spec: FeatureSpec,
    output: str,
    opts: ConvertOptions,
    *,
    hdfs_ugi: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> ConvertResult:
    """Write all rows of ``sources`` as one ElasticCTR file at ``output`` (atomically)."""
    result = ConvertResult()
    with storage.open_atomic(output, hdfs_ugi) as out:
        for url in sources:
            stats = FileStats(source=url)
            block: list[str] = []
            for y, line in _convert_lines(url, spec, opts, stats, hdfs_ugi):
                block.append(line)
                result.clicks += y
                if len(block) >= WRITE_BLOCK:
                    out.write(("\n".join(block) + "\n").encode())
                    if progress:
                        progress(len(block))
                    block = []
            if block:
                out.write(("\n".join(block) + "\n").encode())
                if progress:
                    progress(len(block))
            stats.check(opts.max_error_rate)  # raising here leaves no output file
            result.rows += stats.samples
            result.files.append(stats)
    result.written.append(output)
    return result


def write_partition_extras(root: str, spec: FeatureSpec, hdfs_ugi: str | None = None) -> None:
    storage.write_text(storage.join(root, SLOT_CONF), format_slot_conf(spec.slots), hdfs_ugi)


def mark_done(partition_url: str, hdfs_ugi: str | None = None) -> None:
    storage.write_bytes(storage.join(partition_url, DONEFILE), b"", hdfs_ugi)
