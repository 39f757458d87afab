"""The console's new-scenario flow without a platform: the form from the chart's schema,
YAML in and out, the checks (`ectl validate`'s messages at their fields), a real sample's
profile and suggestions, and bad input (docs/console.md, "New scenario")."""

from __future__ import annotations

import datetime as dt

import pytest

from elasticctr.cli.scenario import scenario_layers
from elasticctr.console import newscenario
from elasticctr.data.generate import GeneratorSpec, generate
from elasticctr.errors import EctlError, ValidationError
from elasticctr.values import split_problem

pytestmark = pytest.mark.fast

PLATFORM = {"global": {"mlflow": {"trackingUri": "http://mlflow:5000"}}}


def layers(name: str = "coupon"):
    return scenario_layers(PLATFORM, name, "elasticctr")


@pytest.fixture(scope="module")
def hours(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("data")
    generate(
        str(root),
        GeneratorSpec(slots=[0, 1, 2, 5], vocab=50),
        start=dt.datetime(2020, 4, 1, 0),
        hours=2,
        lines_per_hour=600,
    )
    return f"file://{root}"


def test_the_form_is_the_charts_schema_and_defaults():
    doc = newscenario.form()
    by_path = {s["path"]: s for s in doc["sections"]}
    assert list(by_path) == list(newscenario.SECTIONS)
    model = by_path["trainer.model"]
    assert "lr" in model["schema"]["properties"]["name"]["enum"]
    assert model["default"]["name"] == "dnn"  # the chart's values.yaml
    assert by_path["trainer.volcano.queue"]["schema"]["type"] == "string"
    # the platform fills in its own name: not a field of the form
    scenario = by_path["global.scenario"]["schema"]
    assert "platform" not in scenario["properties"] and "platform" not in scenario["required"]
    assert "name" in scenario["properties"]


def test_yaml_round_trips_and_bad_yaml_is_a_problem_with_its_line():
    values = {"global": {"scenario": {"name": "coupon"}, "data": {"slots": [0, 1]}}}
    assert newscenario.parse_yaml(newscenario.dump_yaml(values)) == values
    assert newscenario.parse_yaml("  \n") == {}
    with pytest.raises(ValidationError) as bad:
        newscenario.parse_yaml("global:\n  data: [1, 2\n")
    assert bad.value.problems[0].startswith("(yaml): line 3")
    with pytest.raises(ValidationError) as listed:
        newscenario.parse_yaml("- a\n- b\n")
    assert "a values file is a mapping, got list" in listed.value.problems[0]


def test_problems_are_validates_at_their_fields():
    good = {
        "global": {
            "scenario": {"name": "coupon", "team": "growth", "cubeMemoryMiB": 64},
            "data": {"slots": [0, 1, 2], "startDateHour": "20200401/00"},
        },
        "trainer": {"model": {"name": "lr"}, "volcano": {"queue": "growth"}},
    }
    assert newscenario.check(good, *layers()) == []
    bad = {
        "global": {
            "scenario": {"name": "Coupon!"},
            "data": {"slots": [], "startDateHour": "20200231/00"},
        },
        "trainer": {"model": {"name": "gbdt"}, "trainer": {"replicas": 1, "minReplicas": 3}},
    }
    problems = [split_problem(p) for p in newscenario.check(bad, *layers("Coupon!"))]
    paths = {p["path"] for p in problems}
    assert {
        "global.scenario.name",
        "global.data.slots",
        "global.data.startDateHour",
        "trainer.model.name",
    } <= paths, problems
    assert any("minReplicas" in p["path"] or "minReplicas" in p["message"] for p in problems)
    # the same messages as `ectl validate`
    from elasticctr import values as chart_values

    expected = chart_values.validate(newscenario.merged(bad, *layers("Coupon!")))
    assert newscenario.check(bad, *layers("Coupon!")) == expected


def test_a_sample_suggests_slots_the_first_hour_and_a_model(hours):
    prof = newscenario.profile_path(hours)
    assert prof["hours"] == ["20200401/00", "20200401/01"]
    assert prof["samples"] == 1200 and {s["slot"] for s in prof["slots"]} == {0, 1, 2, 5}
    values = newscenario.suggest(hours, prof)
    assert values["global"]["data"] == {
        "path": hours,
        "slots": [0, 1, 2, 5],
        "startDateHour": "20200401/00",
    }
    assert values["trainer"]["model"]["name"] == "lr"  # 600 samples an hour
    assert (
        newscenario.check(
            values | {"global": {**values["global"], "scenario": {"name": "coupon"}}}, *layers()
        )
        == []
    )
    # a slot the data never shows is named, with the slots seen
    with_typo = {"global": {"data": {"path": hours, "slots": [0, 1, 42]}}}
    (problem,) = newscenario.data_problems(with_typo, prof)
    assert problem.startswith("global.data.slots: slot(s) 42 never occur") and "0, 1, 2, 5" in (
        problem
    )
    assert newscenario.data_problems(values, prof) == []


def test_a_path_without_data_is_one_clear_error(tmp_path):
    with pytest.raises(EctlError, match="not found"):
        newscenario.profile_path(f"file://{tmp_path}/nothing-here")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EctlError, match="no data files"):
        newscenario.profile_path(f"file://{tmp_path}/empty")
    (tmp_path / "blank").mkdir()
    (tmp_path / "blank" / "part-00000").write_text("\n\n")
    with pytest.raises(EctlError, match="no samples"):
        newscenario.profile_path(f"file://{tmp_path}/blank/part-00000")


def test_profiles_are_kept_a_while(hours):
    profiles = newscenario.Profiles(size=1)
    first = profiles.get(hours)
    assert profiles.get(hours) is first


def test_split_keeps_a_message_without_a_field_whole():
    assert split_problem("global.data.path: give it") == {
        "path": "global.data.path",
        "message": "give it",
    }
    assert split_problem("release x exists: pick another")["path"] == ""


def test_credentials_never_reach_the_audit_log():
    values = {"global": {"data": {"hdfsUgi": "ana,secret", "path": "hdfs://nn/x"}}}
    assert newscenario.redacted(values) == {
        "global": {"data": {"hdfsUgi": "(redacted)", "path": "hdfs://nn/x"}}
    }
    assert values["global"]["data"]["hdfsUgi"] == "ana,secret"  # the values stay as given
    assert newscenario.redacted({"trainer": {}}) == {"trainer": {}}
