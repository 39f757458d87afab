"""data.config and slot.conf readers: ElasticCTR's own files, shell syntax, every error."""

from __future__ import annotations

import datetime as dt

import pytest

from elasticctr.data.config import (
    DataConfig,
    dataset_url,
    format_slot_conf,
    parse_data_config,
    parse_date_hour,
    parse_slot_conf,
    read_data_config,
    read_slot_conf,
)
from elasticctr.errors import ValidationError

pytestmark = pytest.mark.fast

# The shape of ElasticCTR's data.config template (elastic-ctr-cli/data.config).
ELASTICCTR_TEMPLATE = """\
export HDFS_ADDRESS="hdfs://${IP}:9000"
export HDFS_UGI="root,i_am_a_password"
export START_DATE_HR=20200401/00
export END_DATE_HR=20200401/03
export DATASET_PATH="/train_data"
export SPARSE_DIM="1000001"
"""


def test_elasticctr_template_with_variable_from_environment(monkeypatch):
    monkeypatch.setenv("IP", "10.0.0.7")
    cfg = parse_data_config(ELASTICCTR_TEMPLATE)
    assert cfg.hdfs_address == "hdfs://10.0.0.7:9000"
    assert cfg.hdfs_ugi == "root,i_am_a_password"
    assert cfg.start_date_hour == "20200401/00" and cfg.end_date_hour == "20200401/03"
    assert cfg.dataset_path == "/train_data"
    assert cfg.sparse_dim == 1000001
    assert cfg.dataset_url == "hdfs://10.0.0.7:9000/train_data"
    assert cfg.to_values([0, 1, 2]) == {
        "path": "hdfs://10.0.0.7:9000/train_data",
        "hdfsAddress": "hdfs://10.0.0.7:9000",
        "hdfsUgi": "root,i_am_a_password",
        "startDateHour": "20200401/00",
        "endDateHour": "20200401/03",
        "sparseDim": 1000001,
        "slots": [0, 1, 2],
    }


def test_undefined_variable_is_an_error_with_line(monkeypatch):
    monkeypatch.delenv("IP", raising=False)
    with pytest.raises(ValidationError) as err:
        parse_data_config(ELASTICCTR_TEMPLATE, source="my/data.config")
    assert err.value.problems == [
        "my/data.config:1: $IP is not defined (set it above or in the environment)"
    ]


def test_shell_syntax_quotes_comments_blank_lines_and_expansion():
    text = """
# comment line
   # indented comment
NN=namenode:9000
HDFS_ADDRESS=$NN          # trailing comment
HDFS_UGI='user,pa$$word'
START_DATE_HR="20200401/22"
END_DATE_HR=
DATASET_PATH="file:///data/ctr set"
OTHER_KEY=kept
"""
    cfg = parse_data_config(text)
    assert cfg.hdfs_address == "hdfs://namenode:9000"
    assert cfg.hdfs_ugi == "user,pa$$word"  # single quotes: no expansion
    assert cfg.start_date_hour == "20200401/22" and cfg.end_date_hour == ""
    assert cfg.dataset_url == "file:///data/ctr set"  # a URL is kept as is
    assert cfg.sparse_dim == 0
    assert cfg.extra == {"NN": "namenode:9000", "OTHER_KEY": "kept"}
    assert cfg.to_values()["endDateHour"] == ""
    assert "slots" not in cfg.to_values()


@pytest.mark.parametrize(
    "line,expected",
    [
        (
            "START_DATE_HR=2020040100",
            "data.config:2: START_DATE_HR '2020040100' is not YYYYMMDD/HH",
        ),
        (
            "START_DATE_HR=20200231/00",
            "data.config:2: START_DATE_HR '20200231/00': 20200231 is not",
        ),
        ("START_DATE_HR=20200401/24", "data.config:2: START_DATE_HR '20200401/24': hour 24 is not"),
        ("SPARSE_DIM=abc", "data.config:2: SPARSE_DIM must be a positive integer: 'abc'"),
        ("SPARSE_DIM=0", "data.config:2: SPARSE_DIM must be a positive integer: '0'"),
        ("this is not an assignment", "data.config:2: expected KEY=VALUE"),
        ('HDFS_UGI="unterminated', "data.config:2: cannot read the value"),
        ("HDFS_UGI=a b", "data.config:2: value has spaces"),
        ("HDFS_ADDRESS=http://x:1", "data.config:2: HDFS_ADDRESS 'http://x:1' is not an HDFS"),
        ("HDFS_UGI=,pw", "data.config:2: HDFS_UGI must start with a user name"),
        ("END_DATE_HR=20200331/23", "data.config:2: END_DATE_HR 20200331/23 is before START"),
    ],
)
def test_bad_lines_are_reported_with_file_and_line(line, expected):
    text = "DATASET_PATH=/d\n" + line + "\n"
    if "START_DATE_HR" not in line:
        text += "START_DATE_HR=20200401/00\n"
    with pytest.raises(ValidationError) as err:
        parse_data_config(text)
    assert any(p.startswith(expected) for p in err.value.problems), err.value.problems
    assert "data.config" in str(err.value)


def test_missing_required_keys_all_reported_at_once():
    with pytest.raises(ValidationError) as err:
        parse_data_config("HDFS_UGI=u,p\n")
    joined = "\n".join(err.value.problems)
    assert "DATASET_PATH is missing" in joined and "START_DATE_HR is missing" in joined


def test_date_hour_and_dataset_url_helpers():
    assert parse_date_hour("20201231/23") == dt.datetime(2020, 12, 31, 23)
    with pytest.raises(ValueError):
        parse_date_hour("2020-12-31 23")
    assert dataset_url("/data", "nn:9000") == "hdfs://nn:9000/data"
    assert dataset_url("hdfs:///data", "hdfs://nn:9000/") == "hdfs://nn:9000/data"
    assert dataset_url("hdfs://other:1/data", "nn:9000") == "hdfs://other:1/data"
    assert dataset_url("/data") == "/data"
    assert DataConfig(dataset_path="/x").dataset_url == "/x"


def test_slot_conf_reader():
    assert parse_slot_conf("0\n1\n\n# comment\n 27 \n5 # trailing\n") == [0, 1, 27, 5]
    assert format_slot_conf([3, 1]) == "3\n1\n"
    with pytest.raises(ValidationError) as err:
        parse_slot_conf("1\nabc\n-2\n1\n", source="s.conf")
    assert err.value.problems == [
        "s.conf:2: slot id must be a non-negative integer, got 'abc'",
        "s.conf:3: slot id must be a non-negative integer, got '-2'",
        "s.conf:4: duplicate slot 1 (first on line 1)",
    ]
    with pytest.raises(ValidationError) as err:
        parse_slot_conf("\n# nothing\n")
    assert err.value.problems == ["slot.conf: no slot ids (one per line)"]
    with pytest.raises(ValidationError) as err:
        parse_slot_conf(f"{2**64}\n")
    assert "does not fit in uint64" in err.value.problems[0]


def test_read_from_files(tmp_path):
    (tmp_path / "data.config").write_text("DATASET_PATH=/d\nSTART_DATE_HR=20200401/00\n")
    (tmp_path / "slot.conf").write_text("".join(f"{i}\n" for i in range(27)))
    cfg = read_data_config(str(tmp_path / "data.config"))
    assert cfg.source.endswith("data.config") and cfg.dataset_path == "/d"
    assert read_slot_conf(f"file://{tmp_path}/slot.conf") == list(range(27))
    with pytest.raises(Exception, match="not found"):
        read_slot_conf(str(tmp_path / "missing.conf"))
