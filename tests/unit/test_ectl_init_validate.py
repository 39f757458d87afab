"""`ectl init` with ElasticCTR's own inputs and `ectl validate` against the real chart.

ElasticCTR's options must work unchanged (`-u -m -t -p -b -s -f -hd`), data.config and
slot.conf come from tests/fixtures/elasticctr (shaped like elastic-ctr-cli's files), and
every written file must pass the chart's own validation. Errors list every problem, exit
non-zero, never write a file and never show a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from elasticctr import values as chart_values
from elasticctr.cli.main import _register, app
from elasticctr.constants import repo_root

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "elasticctr"
DATA_CONFIG = FIXTURES / "data.config"
SLOT_CONF = FIXTURES / "slot.conf"
VALUES_DIR = repo_root() / "values"


@pytest.fixture(scope="module", autouse=True)
def registered():
    _register()


def flat(text: str) -> str:
    return " ".join(text.split())


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


# --- init --------------------------------------------------------------------------------


@pytest.mark.fast
def test_init_with_elasticctr_options_just_works(tmp_path):
    out = tmp_path / "values.yaml"
    args = ["init", "-u", "4", "-m", "20", "-t", "2", "-p", "2", "-b", "5"]
    args += ["-s", str(SLOT_CONF), "-f", str(DATA_CONFIG), "-O", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    values = load(out)
    assert values["global"]["data"] == {
        "path": "hdfs://192.168.1.10:9000/train_data",
        "hdfsAddress": "hdfs://192.168.1.10:9000",
        "hdfsUgi": "root,i_am_a_password",
        "startDateHour": "20200401/00",
        "endDateHour": "20200401/03",
        "sparseDim": 1000001,
        "slots": list(range(27)),
    }
    resources = {
        "requests": {"cpu": "4", "memory": "20Gi"},
        "limits": {"cpu": "4", "memory": "20Gi"},
    }
    assert values["trainer"]["pserver"] == {"replicas": 2, "resources": resources}
    assert values["trainer"]["trainer"] == {"replicas": 2, "resources": resources}
    assert values["cube"] == {"shards": 5}
    assert "&id" not in out.read_text()  # no YAML anchors for people to puzzle over
    assert chart_values.validate_files([out]) == []


@pytest.mark.fast
def test_init_long_options_and_model(tmp_path):
    out = tmp_path / "v.yaml"
    result = runner.invoke(
        app,
        [
            "init", "--cpu", "500m", "--mem", "512Mi", "--trainer", "3", "--pserver", "1",
            "--cube", "2", "--slot_conf", str(SLOT_CONF), "--datafile", str(DATA_CONFIG),
            "--hdfs_address", "namenode:9000", "--model", "deepfm",
            "--model-store", "hdfs://namenode:9000/models", "--out", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    values = load(out)
    assert values["trainer"]["model"] == {"name": "deepfm"}
    assert values["trainer"]["trainer"]["resources"]["limits"] == {"cpu": "500m", "memory": "512Mi"}
    assert values["global"]["modelStore"] == "hdfs://namenode:9000/models"
    assert values["global"]["data"]["hdfsAddress"] == "hdfs://namenode:9000"
    assert chart_values.validate_files([out]) == []


def test_init_hd_two_letter_short_option_through_the_console_script(tmp_path):
    """`-hd` is ElasticCTR's spelling; it must work from a real shell, not only in-process."""
    out = tmp_path / "values.yaml"
    proc = subprocess.run(
        [
            sys.executable, "-m", "elasticctr.cli.main", "init", "-u", "4", "-m", "20",
            "-t", "2", "-p", "2", "-b", "5", "-s", str(SLOT_CONF), "-f", str(DATA_CONFIG),
            "-hd", "hdfs://x:9000", "-O", str(out),
        ],
        capture_output=True, text=True, timeout=120, env=dict(os.environ),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = load(out)["global"]["data"]
    # -hd overrides data.config's HDFS_ADDRESS, and the dataset URL follows it
    assert data["hdfsAddress"] == "hdfs://x:9000"
    assert data["path"] == "hdfs://x:9000/train_data"
    assert "# Written by: ectl init -u 4" in out.read_text()


@pytest.mark.fast
def test_init_without_data_config_keeps_chart_defaults(tmp_path):
    out = tmp_path / "v.yaml"
    result = runner.invoke(app, ["init", "-t", "4", "-O", str(out), "--no-interactive"])
    assert result.exit_code == 0, result.output
    assert load(out) == {"trainer": {"trainer": {"replicas": 4}}}


@pytest.mark.fast
def test_init_refuses_to_overwrite(tmp_path, ectl_here):
    out = tmp_path / "values.yaml"
    out.write_text("# mine\n")
    proc = ectl_here("init", "-t", "2", "-O", str(out))
    assert proc.returncode == 1
    assert "exists" in proc.stderr and "--force" in proc.stderr
    assert out.read_text() == "# mine\n"
    proc = ectl_here("init", "-t", "2", "-O", str(out), "--force")
    assert proc.returncode == 0, proc.stderr
    assert load(out)["trainer"]["trainer"]["replicas"] == 2


@pytest.mark.fast
def test_init_bad_elasticctr_inputs_list_every_problem(tmp_path, ectl_here, monkeypatch):
    monkeypatch.delenv("ELASTICCTR_TEST_UNSET_IP", raising=False)
    out = tmp_path / "values.yaml"
    proc = ectl_here(
        "init", "-f", str(FIXTURES / "bad_data.config"), "-s", str(FIXTURES / "bad_slot.conf"),
        "-O", str(out),
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    expected = [
        "bad_slot.conf:3: slot id must be a non-negative integer, got 'x'",
        "bad_slot.conf:4: duplicate slot 1 (first on line 2)",
        "bad_data.config:1: $ELASTICCTR_TEST_UNSET_IP is not defined",
        "bad_data.config:2: START_DATE_HR '20200431/00': 20200431 is not a calendar date",
        "bad_data.config:3: DATASET_PATH is missing or empty",
    ]
    for problem in expected:
        assert any(problem in line for line in lines), (problem, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.fast
def test_init_values_the_chart_rejects_are_not_written(tmp_path, ectl_here):
    out = tmp_path / "values.yaml"
    proc = ectl_here("init", "-hd", "http://not-hdfs:9000", "-O", str(out))
    assert proc.returncode == 2
    assert "-hd/--hdfs_address" in proc.stderr
    assert not out.exists()


@pytest.mark.fast
@pytest.mark.parametrize(
    "args,message",
    [
        (["-t", "0"], "must be at least 1"),
        (["-m", "lots"], "not a memory size"),
        (["-u", "-1"], "must be positive"),
        (["--model", "gbdt"], "choose one of"),
        (["-s", "/no/such/slot.conf"], "cannot read slot.conf"),
    ],
)
def test_init_bad_flags(args, message, tmp_path, ectl_here):
    out = tmp_path / "v.yaml"
    proc = ectl_here("init", *args, "-O", str(out))
    assert proc.returncode in (1, 2)
    assert message in flat(proc.stderr)
    assert "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.fast
def test_init_interactive_questions(tmp_path):
    out = tmp_path / "values.yaml"
    answers = "\n".join(
        [
            "",  # no data.config
            str(SLOT_CONF),
            "file:///data/ctr",  # data URL
            "20200401/05",
            "wide_deep",
            "3",  # trainers
            "1",  # pservers
            "4",  # cube shards
            "2",  # cpu
            "8",  # mem GiB
        ]
    )
    result = runner.invoke(app, ["init", "--interactive", "-O", str(out)], input=answers + "\n")
    assert result.exit_code == 0, result.output
    values = load(out)
    assert values["global"]["data"]["path"] == "file:///data/ctr"
    assert values["global"]["data"]["startDateHour"] == "20200401/05"
    assert values["global"]["data"]["slots"] == list(range(27))
    assert values["trainer"]["model"]["name"] == "wide_deep"
    assert values["trainer"]["trainer"]["replicas"] == 3
    assert values["trainer"]["pserver"]["resources"]["limits"]["memory"] == "8Gi"
    assert values["cube"]["shards"] == 4


# --- validate ----------------------------------------------------------------------------


def _shipped_values() -> list[Path]:
    return sorted(VALUES_DIR.glob("*.yaml"))


@pytest.mark.fast
def test_shipped_values_files_exist():
    assert {p.name for p in _shipped_values()} >= {"demo.yaml", "production.yaml"}


@pytest.mark.fast
@pytest.mark.parametrize("name", [p.name for p in _shipped_values()])
def test_validate_shipped_values(name, ectl_here):
    proc = ectl_here("validate", str(VALUES_DIR / name))
    assert proc.returncode == 0, proc.stderr
    assert "valid" in proc.stdout


BAD_VALUES = """\
global:
  data:
    startDateHour: "2020-04-01"
    slots: [1, "x"]
trainer:
  pserver:
    replicas: 0
  nosuch: 1
cube:
  shards: "x"
"""
BAD_PATHS = [
    "global.data.startDateHour",
    "global.data.slots[1]",
    "trainer.pserver.replicas",
    "trainer.nosuch",
    "cube.shards",
]


@pytest.mark.fast
def test_validate_lists_every_problem_at_once(tmp_path, ectl_here):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_VALUES)
    proc = ectl_here("validate", str(bad))
    assert proc.returncode == 2
    problem_lines = [ln.strip() for ln in proc.stderr.splitlines()[1:]]
    for path in BAD_PATHS:
        assert any(ln.startswith(f"{path}: ") for ln in problem_lines), (path, proc.stderr)
    assert len(problem_lines) == len(BAD_PATHS)
    assert proc.stderr.startswith("error: ")
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


@pytest.mark.fast
def test_validate_json_shape(tmp_path, ectl_here):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_VALUES)
    proc = ectl_here("validate", str(bad), "-o", "json")
    assert proc.returncode == 2
    report = json.loads(proc.stdout)
    assert report["files"] == [str(bad)] and report["valid"] is False
    assert sorted(p["path"] for p in report["problems"]) == sorted(BAD_PATHS)
    assert all(set(p) == {"path", "message"} and p["message"] for p in report["problems"])
    good = ectl_here("validate", str(VALUES_DIR / "demo.yaml"), "-o", "json")
    assert good.returncode == 0
    assert json.loads(good.stdout) == {
        "files": [str(VALUES_DIR / "demo.yaml")],
        "valid": True,
        "problems": [],
    }


@pytest.mark.fast
def test_validate_merges_files_like_helm(tmp_path, ectl_here):
    fix = tmp_path / "fix.yaml"
    fix.write_text("trainer:\n  pserver:\n    replicas: 1\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  pserver:\n    replicas: 0\n")
    assert ectl_here("validate", str(bad)).returncode == 2
    assert ectl_here("validate", str(bad), str(fix)).returncode == 0  # later file wins


@pytest.mark.fast
def test_validate_broken_yaml_and_missing_file(tmp_path, ectl_here):
    broken = tmp_path / "broken.yaml"
    broken.write_text("trainer:\n  pserver: [\n")
    also = tmp_path / "list.yaml"
    also.write_text("- not a mapping\n")
    proc = ectl_here("validate", str(broken), str(also))
    assert proc.returncode == 2
    assert f"{broken}:3:1: not valid YAML" in proc.stderr
    assert f"{also}: values file must be a mapping" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = ectl_here("validate", str(tmp_path / "missing.yaml"))
    assert proc.returncode == 1
    assert "cannot read values file" in proc.stderr


def test_validate_console_script_exit_code_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_VALUES)
    proc = subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", "validate", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "trainer.pserver.replicas: 0 is less than the minimum of 1" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.fast
def test_validate_with_set_overrides(tmp_path, ectl_here):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  pserver:\n    replicas: 0\n")
    assert ectl_here("validate", str(bad), "--set", "trainer.pserver.replicas=2").returncode == 0
    proc = ectl_here("validate", str(bad), "--set", "cube.shards=[1]", "--set", "nokey")
    assert proc.returncode == 2
    assert '--set nokey: key "nokey" has no value (write key=value' in proc.stderr
    proc = ectl_here("validate", str(bad), "--set", "cube.shards=[1]")
    assert proc.returncode == 2
    # helm's --set reads no YAML: [1] is text (a list is written {1})
    assert "cube.shards: '[1]' is not of type 'integer'" in proc.stderr
    assert "trainer.pserver.replicas: 0 is less than the minimum of 1" in proc.stderr


# --- findings of a new user's first session (issue 17) ---------------------------------

ELASTICCTR_TEMPLATE = """\
export HDFS_ADDRESS="hdfs://${IP}:9000"
export HDFS_UGI="root,i_am_a_password"
export START_DATE_HR=20200401/00
export END_DATE_HR=20200401/03
export DATASET_PATH="/train_data"
export SPARSE_DIM="1000001"
"""
"""ElasticCTR's data.config as shipped: HDFS_ADDRESS uses ${IP}, which nobody defines."""


@pytest.mark.fast
def test_init_hd_fills_the_undefined_ip_of_the_data_config_template(
    tmp_path, ectl_here, monkeypatch
):
    monkeypatch.delenv("IP", raising=False)
    config = tmp_path / "data.config"
    config.write_text(ELASTICCTR_TEMPLATE)
    out = tmp_path / "values.yaml"
    proc = ectl_here("init", "-f", str(config), "-hd", "hdfs://10.0.0.7:9000", "-O", str(out))
    assert proc.returncode == 0, proc.stderr
    data = load(out)["global"]["data"]
    assert data["hdfsAddress"] == "hdfs://10.0.0.7:9000"
    assert data["path"] == "hdfs://10.0.0.7:9000/train_data"
    # without -hd the undefined variable is an error that says how to fix it
    proc = ectl_here("init", "-f", str(config), "-O", str(tmp_path / "other.yaml"))
    assert proc.returncode == 2
    assert "$IP is not defined" in proc.stderr and "-hd/--hdfs_address" in proc.stderr
    assert not (tmp_path / "other.yaml").exists()


@pytest.mark.fast
def test_init_without_options_or_terminal_writes_nothing(tmp_path):
    out = tmp_path / "values.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", "init", "-O", str(out)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "nothing to write" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()
    # --no-interactive without options: the same, not an empty file
    proc = subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", "init", "--no-interactive", "-O", str(out)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "nothing to write" in proc.stderr, proc.stderr
    assert not out.exists()


@pytest.mark.fast
def test_init_file_with_the_hdfs_password_is_owner_only(tmp_path, ectl_here):
    old = os.umask(0o022)
    try:
        secret = tmp_path / "secret.yaml"
        assert ectl_here("init", "-f", str(DATA_CONFIG), "-O", str(secret)).returncode == 0
        assert load(secret)["global"]["data"]["hdfsUgi"] == "root,i_am_a_password"
        assert secret.stat().st_mode & 0o777 == 0o600
        plain = tmp_path / "plain.yaml"
        assert ectl_here("init", "-t", "2", "-O", str(plain)).returncode == 0
        assert plain.stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(old)


@pytest.mark.fast
def test_validate_rejects_impossible_hours(tmp_path, ectl_here):
    bad = tmp_path / "dates.yaml"
    bad.write_text(
        'global:\n  data:\n    startDateHour: "20200231/25"\n    endDateHour: "20200401/24"\n'
    )
    proc = ectl_here("validate", str(bad))
    assert proc.returncode == 2, proc.stderr
    text = flat(proc.stderr)
    assert "global.data.startDateHour: 20200231/25 is not a real hour" in text
    assert "global.data.endDateHour: 20200401/24 is not a real hour (hour 24" in text
    good = tmp_path / "ok.yaml"
    good.write_text('global:\n  data:\n    startDateHour: "20200229/23"\n')
    assert ectl_here("validate", str(good)).returncode == 0


@pytest.mark.fast
def test_validate_non_utf8_values_file_is_a_clear_error(tmp_path, ectl_here):
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"global:\n  data:\n    path: /donn\xe9es\n")
    proc = ectl_here("validate", str(latin1))
    assert proc.returncode == 2, proc.stderr
    assert f"{latin1}:3:16: not valid YAML (byte 0xe9 is not UTF-8 text" in flat(proc.stderr)
    assert "internal error" not in proc.stderr
    # the roles read values files with the same reader
    from elasticctr.errors import ValidationError
    from elasticctr.train.config import load_values

    with pytest.raises(ValidationError, match="not UTF-8"):
        load_values(latin1)


@pytest.mark.fast
def test_validate_takes_the_metrics_values_of_docs_operations(tmp_path, ectl_here):
    """The `metrics.yaml` of docs/operations.md ("Turn it on") is valid as it is; the same
    keys with wrong values are each reported."""
    text = (repo_root() / "docs" / "operations.md").read_text()
    block = text.split("# metrics.yaml, beside your values file\n", 1)[1].split("```", 1)[0]
    good = tmp_path / "metrics.yaml"
    good.write_text(block)
    assert load(good)["global"]["metrics"]["serviceMonitor"]["enabled"] is True
    proc = ectl_here("validate", str(VALUES_DIR / "demo.yaml"), str(good))
    assert proc.returncode == 0, proc.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "global:\n  data: {utcOffset: '+8'}\n  metrics:\n"
        "    serviceMonitor: {enabled: yes-please, interval: 30sec}\n"
        "    dashboard: {label: {}}\n"
        "serving:\n  metrics: {enabled: 1}\n"
    )
    proc = ectl_here("validate", str(bad))
    assert proc.returncode == 2
    for path in (
        "global.data.utcOffset",
        "global.metrics.serviceMonitor.enabled",
        "global.metrics.serviceMonitor.interval",
        "global.metrics.dashboard.label",
        "serving.metrics.enabled",
    ):
        assert f"{path}: " in proc.stderr, (path, proc.stderr)
