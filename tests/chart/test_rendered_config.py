"""The training job's rendered configuration read back by the project's own parsers: the
`<release>-trainer-data` ConfigMap (ElasticCTR's data.config and slot.conf) and the values
file in the `<release>-trainer-config` Secret (what `ectl train`/`ectl coordinator -f`
read), for the defaults and every shipped values set."""

from __future__ import annotations

import pytest
import yaml
from chart_helpers import CHART, render, values_files

from elasticctr import values as chart_values
from elasticctr.data.config import parse_data_config, parse_slot_conf
from elasticctr.train.config import from_values

pytestmark = pytest.mark.chart


def _trainer_files(helm, *args: str) -> tuple[dict, dict]:
    rendered = render(helm, *args)
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    cm = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "ctr-trainer-data"
    )
    secret = next(
        d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "ctr-trainer-config"
    )
    return cm["data"], yaml.safe_load(secret["stringData"]["values.yaml"])


TRAINING_SETS = [
    f
    for f in values_files()
    if chart_values.effective_values(chart_values.load_files([f]), CHART)["trainer"]["enabled"]
]


@pytest.mark.parametrize(
    "values_file", [None, *TRAINING_SETS], ids=lambda p: p.name if p else "defaults"
)
def test_rendered_data_config_and_values_parse_with_the_projects_own_readers(helm, values_file):
    args = ["-f", str(values_file)] if values_file else []
    files, runtime = _trainer_files(helm, *args)
    data = chart_values.effective_values(
        chart_values.load_files([values_file] if values_file else []), CHART
    )["global"]["data"]
    cfg = parse_data_config(files["data.config"], source="rendered data.config")
    assert cfg.sparse_dim == data["sparseDim"]  # 1000001, never 1.000001e+06
    assert cfg.start_date_hour == data["startDateHour"]
    assert cfg.end_date_hour == data["endDateHour"]
    assert cfg.hdfs_address == (data["hdfsAddress"] or "")
    assert cfg.dataset_path == (data["path"] or "http://ctr-fileserver:8080/data")
    assert parse_slot_conf(files["slot.conf"]) == data["slots"]
    train = from_values(runtime)
    assert train.sparse_dim == (data["sparseDim"] or None)
    assert train.slots == tuple(data["slots"])
    assert train.data_path == cfg.dataset_url  # hdfsAddress applied the same way


def test_large_sparse_dim_and_literal_values_survive_rendering(helm):
    """Helm reads numbers as float64: 2^40+1 and a path with a `$` must come back exact."""
    files, runtime = _trainer_files(
        helm,
        "--set",
        "global.data.sparseDim=1099511627777",
        "--set-string",
        "global.data.path=hdfs://nn:8020/ctr/$data",
    )
    cfg = parse_data_config(files["data.config"])
    assert cfg.sparse_dim == 1099511627777 and cfg.dataset_path == "hdfs://nn:8020/ctr/$data"
    assert from_values(runtime).sparse_dim == 1099511627777
