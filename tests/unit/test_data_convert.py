"""Raw Criteo/Avazu/CSV rows -> ElasticCTR lines; the feature spec reproduces them row by row."""

from __future__ import annotations

import json

import pytest
from tests.conftest import shared_path
from typer.testing import CliRunner

from elasticctr.cli.main import _register, app
from elasticctr.constants import DONEFILE
from elasticctr.data.convert import ConvertOptions, convert, fit
from elasticctr.data.features import FeatureSpec, format_line, hash64, read_spec
from elasticctr.data.parser import read_file
from elasticctr.errors import ValidationError

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module", autouse=True)
def registered():
    _register()


def test_hash_is_stable_across_processes_and_versions():
    # golden values: changing the hashing silently would break every trained model
    assert hash64("13:68fd1e64") == 5154929068160016096
    assert hash64("0:#3") == 14676173586525536523


def test_criteo_kaggle_rows_roundtrip_through_the_spec(tmp_path):
    src = str(shared_path("data", "criteo", "kaggle_train_first10001.tsv"))
    opts = ConvertOptions(kind="criteo", buckets=8)
    spec = fit([src], opts)
    assert spec.summary["fit_rows"] == 10001 and spec.summary["fit_clicks"] == 2182
    assert [f.name for f in spec.features][:2] == ["I1", "I2"] and spec.slots == list(range(39))
    assert all(f.kind == "numeric" for f in spec.features[:13])
    assert all(f.kind == "categorical" for f in spec.features[13:])
    assert 2 <= len(spec.features[1].boundaries) <= 7
    out = tmp_path / "part-00000"
    result = convert([src], spec, str(out), opts)
    assert result.rows == 10001 and result.clicks == 2182
    lines = out.read_text().splitlines()
    raw = open(src).read().splitlines()
    for i in (0, 1, 500, 10000):
        fields = raw[i].split("\t")
        feats = spec.transform(fields)  # what serving does with one raw row
        assert lines[i] == format_line(int(fields[0]), feats)
    # C1 of the first row is 68fd1e64 -> slot 13
    assert f"{hash64('13:68fd1e64')}:13" in lines[0].split()
    batch, stats = read_file(str(out), spec.slots, max_error_rate=0.0)
    assert len(batch) == 10001 and stats.malformed == 0
    # the spec survives JSON; a copy transforms identically
    again = FeatureSpec.from_json(spec.to_json())
    assert again.transform(raw[3].split("\t")) == spec.transform(raw[3].split("\t"))


def test_stripped_trailing_fields_are_padded():
    src = str(shared_path("data", "criteo", "paddlerec_dnn_sample_test.tsv"))
    opts = ConvertOptions(kind="criteo")
    spec = fit([src], opts)
    assert spec.summary["fit_rows"] == 100


def test_deepctr_csv_with_float_integers(tmp_path):
    src = str(shared_path("data", "criteo", "deepctr_criteo_sample.csv"))
    opts = ConvertOptions(kind="csv")
    spec = fit([src], opts)
    kinds = {f.name: f.kind for f in spec.features}
    assert all(kinds[f"I{i}"] == "numeric" for i in range(1, 14))
    assert all(kinds[f"C{i}"] == "categorical" for i in range(1, 27))
    result = convert([src], spec, str(tmp_path / "out"), opts)
    assert result.rows == 200 and result.clicks == 49
    # "260.0" in the CSV and 260 in a mapping land in the same bucket
    assert spec.transform({"I3": "260.0"}) == spec.transform({"I3": 260})


def test_avazu_headerless_with_columns_label_and_drop(tmp_path):
    src = str(shared_path("data", "avazu", "train_first6000.csv"))
    columns = (
        "id,click,hour,C1,banner_pos,site_id,site_domain,site_category,app_id,app_domain,"
        "app_category,device_id,device_ip,device_model,device_type,device_conn_type,"
        "C14,C15,C16,C17,C18,C19,C20,C21"
    ).split(",")
    opts = ConvertOptions(
        kind="csv",
        header=False,
        columns=columns,
        label="click",
        drop=["id"],
        categorical=columns[2:],
    )
    spec = fit([src], opts)
    assert len(spec.features) == 22 and all(f.kind == "categorical" for f in spec.features)
    result = convert([src], spec, str(tmp_path / "avazu.txt"), opts)
    assert result.rows == 6000 and result.clicks == 1047


def test_bad_rows_are_counted_and_the_bound_fails_without_output(tmp_path):
    src = tmp_path / "raw.csv"
    src.write_text("label,n,c\n1,3.5,a\n0,x,b\n2,1,c\n0,1,d,extra\n1,,\n0,2,e\n")
    opts = ConvertOptions(kind="csv", numeric=["n"], max_error_rate=0.5)
    spec = fit([str(src)], opts)
    assert [f.kind for f in spec.features] == ["numeric", "categorical"]
    result = convert([str(src)], spec, str(tmp_path / "ok.txt"), opts)
    stats = result.files[0]
    assert result.rows == 3 and stats.malformed == 3
    assert stats.reasons == {"not a number": 1, "bad label": 1, "field count": 1}
    assert stats.examples[0] == f"{src}:3: column n: 'x' is not a number"
    assert stats.examples[1] == f"{src}:4: label '2' is not 0 or 1"
    assert (tmp_path / "ok.txt").read_text().splitlines()[1] == "1 1"  # all missing: no slots
    strict = ConvertOptions(kind="csv", numeric=["n"], max_error_rate=0.1)
    with pytest.raises(ValidationError, match="3 of 6 lines malformed"):
        convert([str(src)], spec, str(tmp_path / "strict.txt"), strict)
    assert not (tmp_path / "strict.txt").exists()


def test_fit_errors():
    with pytest.raises(ValidationError, match="--from"):
        fit(["x"], ConvertOptions(kind="parquet"))
    with pytest.raises(ValidationError, match="--columns"):
        fit(["x"], ConvertOptions(kind="csv", header=False))
    src = str(shared_path("data", "criteo", "deepctr_criteo_sample.csv"))
    with pytest.raises(ValidationError, match="label column 'click'"):
        fit([src], ConvertOptions(kind="csv", label="click"))
    with pytest.raises(ValidationError, match="unknown columns"):
        fit([src], ConvertOptions(kind="csv", drop=["nope"]))
    with pytest.raises(ValidationError, match="not a feature spec"):
        FeatureSpec.from_json("{}")


def test_cli_convert_partition_and_reuse_spec(tmp_path):
    src = str(shared_path("data", "criteo", "paddlerec_part-0.tsv"))
    other = str(shared_path("data", "criteo", "paddlerec_dnn_sample_train.tsv"))
    root = tmp_path / "data"
    runner = CliRunner()
    first = runner.invoke(
        app,
        ["data", "convert", src, "--from", "criteo", "--out", str(root), "--hour", "20200401/00"],
    )
    assert first.exit_code == 0, first.output
    assert (root / "20200401" / "00" / DONEFILE).exists()
    spec_text = (root / "features.json").read_text()
    assert json.loads(spec_text)["summary"]["fit_rows"] == 100
    assert (root / "slot.conf").read_text().split() == [str(i) for i in range(39)]
    second = runner.invoke(
        app,
        [
            "data",
            "convert",
            other,
            "--from",
            "criteo",
            "--out",
            str(root),
            "--hour",
            "20200401/01",
            "--spec-in",
            str(root / "features.json"),
        ],
    )
    assert second.exit_code == 0, second.output
    assert (root / "features.json").read_text() == spec_text  # reused, not refitted
    spec = read_spec(str(root / "features.json"))
    line = (root / "20200401" / "01" / "part-00000").read_text().splitlines()[0]
    fields = open(other).read().splitlines()[0].split("\t")
    assert line == format_line(int(fields[0]), spec.transform(fields))
    wrong = runner.invoke(
        app,
        [
            "data",
            "convert",
            other,
            "--from",
            "csv",
            "--out",
            str(tmp_path / "x"),
            "--spec-in",
            str(root / "features.json"),
        ],
    )
    # a TSV read as CSV has no usable header: refused naming what the spec needs
    assert isinstance(wrong.exception, ValidationError) and wrong.exception.exit_code == 2
    assert "the header lacks 40 column(s) of the feature spec: label, I1" in str(wrong.exception)


def _kaggle_csv(tmp_path, rows: int = 300):
    """Kaggle's CSV layout of the same Criteo rows: `Id,Label,I1..I13,C1..C26`."""
    src = shared_path("data", "criteo", "kaggle_train_first10001.tsv")
    raw = src.read_text().splitlines()[:rows]
    header = ["Id", "Label", *[f"I{i}" for i in range(1, 14)], *[f"C{i}" for i in range(1, 27)]]
    out = tmp_path / "train.csv"
    body = [",".join([str(10_000_000 + n), *line.split("\t")]) for n, line in enumerate(raw)]
    out.write_text("\n".join([",".join(header), *body]) + "\n")
    tsv = tmp_path / "train.tsv"
    tsv.write_text("\n".join(raw) + "\n")
    return out, tsv


def test_criteo_reads_the_kaggle_csv_layout_with_a_header(tmp_path):
    csv_file, tsv_file = _kaggle_csv(tmp_path)
    runner = CliRunner()
    for name, src in (("tsv", tsv_file), ("csv", csv_file)):
        run = runner.invoke(
            app,
            ["data", "convert", str(src), "--from", "criteo", "--out", str(tmp_path / name)]
            + ["--hour", "20200401/00", "--buckets", "8"],
        )
        assert run.exit_code == 0, run.output
        assert "300 lines" in run.output.replace(",", ""), run.output
    part = "20200401/00/part-00000"
    # the same rows in either layout give the same spec and the same lines (Id ignored)
    assert (tmp_path / "csv" / part).read_text() == (tmp_path / "tsv" / part).read_text()
    assert (
        read_spec(str(tmp_path / "csv" / "features.json")).columns
        == read_spec(str(tmp_path / "tsv" / "features.json")).columns
    )


def test_csv_with_a_criteo_fitted_spec(tmp_path):
    runner = CliRunner()
    tsv = shared_path("data", "criteo", "kaggle_train_first10001.tsv")
    fitted = runner.invoke(
        app, ["data", "convert", str(tsv), "--from", "criteo", "--out", str(tmp_path / "a")]
        + ["--hour", "20200401/00"],
    )  # fmt: skip
    assert fitted.exit_code == 0, fitted.output
    spec_file = tmp_path / "a" / "features.json"
    sample = shared_path("data", "criteo", "deepctr_criteo_sample.csv")  # label,I1..,C26
    run = runner.invoke(
        app, ["data", "convert", str(sample), "--from", "csv", "--out", str(tmp_path / "b")]
        + ["--hour", "20200401/01", "--spec-in", str(spec_file)],
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    spec = read_spec(str(spec_file))
    rows = sample.read_text().splitlines()
    lines = (tmp_path / "b" / "20200401" / "01" / "part-00000").read_text().splitlines()
    assert len(lines) == 200
    fields = rows[1].split(",")
    assert lines[0] == format_line(int(fields[0]), spec.transform(fields))
