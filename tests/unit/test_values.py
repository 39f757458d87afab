"""elasticctr.values: the chart's defaults, schemas and cross-field rules, without helm.

tests/chart/test_chart.py checks that helm reports the same problems for the same values.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from elasticctr import values as V
from elasticctr.errors import EctlError, ValidationError
from elasticctr.values import PLATFORM_PARTS

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "elasticctr"


@pytest.fixture(scope="module")
def chart() -> V.Umbrella:
    return V.load_chart(CHART)


def test_chart_loads_umbrella_and_every_subchart(chart):
    assert chart.chart.name == "elasticctr"
    assert [s.name for s in chart.subcharts] == [
        "trainer",
        "fileserver",
        "mlflow",
        "cube",
        "serving",
        "console",
    ]
    for sub in chart.subcharts:
        # the console: its own switch when set, else serving's (a platform gets it)
        extra = ",serving.enabled" if sub.name == "console" else ""
        assert sub.condition == f"{sub.name}.enabled{extra}"
        assert sub.schema["additionalProperties"] is False
    # The library of named templates is a dependency but no part: no values of its own.
    assert chart.libraries == ("common",)


def test_library_charts_are_found_from_their_chart_yaml(chart):
    declared = yaml.safe_load((CHART / "Chart.yaml").read_text())["dependencies"]
    libraries = [
        d["name"]
        for d in declared
        if yaml.safe_load((CHART / "charts" / d["name"] / "Chart.yaml").read_text()).get("type")
        == "library"
    ]
    assert tuple(libraries) == chart.libraries
    assert "common" not in V.effective_values({}, chart)


@pytest.mark.parametrize(
    "values_file",
    sorted((REPO / "values").glob("*.yaml")) + sorted((CHART / "ci").glob("*-values.yaml")),
    ids=lambda p: p.name,
)
def test_shipped_values_files_are_valid(values_file, chart):
    assert V.validate_files([values_file], chart) == []


def test_defaults_are_valid(chart):
    assert V.validate({}, chart) == []


def test_effective_values_layer_subchart_umbrella_and_user(chart):
    values = V.effective_values({"cube": {"shards": 5}}, chart)
    assert values["cube"]["shards"] == 5
    assert values["cube"]["keepVersions"] == 3  # subchart default survives
    assert values["cube"]["enabled"] is True  # umbrella default
    assert values["global"]["data"]["slots"][0] == 0


def test_lists_are_replaced_and_null_removes_a_default(chart):
    values = V.effective_values(
        {"global": {"data": {"slots": [7]}}, "trainer": {"nodeSelector": None}}, chart
    )
    assert values["global"]["data"]["slots"] == [7]
    assert "nodeSelector" not in values["trainer"]


def test_null_between_files_still_removes_the_default(tmp_path, chart):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("cube:\n  keepVersions: 5\n")
    b.write_text("cube:\n  keepVersions: null\n")
    merged = V.load_files([a, b])
    assert merged["cube"]["keepVersions"] is None
    # Removing a required key is a problem the schema reports, like helm would.
    assert V.validate(merged, chart) == ["cube.keepVersions: required"]


def test_schema_problems_are_paths_with_actionable_messages(chart):
    problems = V.validate(
        {
            "global": {"image": {"tag": "latest"}, "data": {"startDateHour": "2020-04-01"}},
            "trainer": {"model": {"name": "gbdt"}, "bogus": 1},
            "cube": {"shards": 0},
        },
        chart,
    )
    assert "global.image.tag: must not be 'latest'" in problems
    assert any(
        p.startswith("global.data.startDateHour: '2020-04-01' does not match")
        and "YYYYMMDD/HH" in p
        for p in problems
    )
    assert any(p.startswith("trainer.model.name: 'gbdt' is not one of") for p in problems)
    assert any(p.startswith("trainer.bogus: unknown key (allowed: ") for p in problems)
    assert "cube.shards: 0 is less than the minimum of 1" in problems
    assert len(problems) == 5


def test_unknown_top_level_key_is_reported(chart):
    assert V.validate({"trainers": {}}, chart) == [
        "trainers: unknown key (allowed: console, cube, fileserver, global, mlflow, serving, "
        "teams, tests, trainer)"
    ]
    # The umbrella's schema knows `common` (Helm hands the library the globals), but it
    # takes no values: never offered, and anything set in it is refused.
    assert "common" in chart.chart.schema["properties"]
    assert V.validate({"common": {"x": 1}}, chart) == ["common.x: unknown key (allowed: global)"]


def test_global_is_open_for_a_parent_chart_but_ectl_refuses_typos_in_it(chart):
    """The chart's schema lets a parent umbrella's own globals through (Helm hands them to
    this chart when it is a subchart); ectl installs it as the top chart, where an unknown
    global key is a typo, and our own global objects are closed for helm too."""
    schema_global = chart.chart.schema["properties"]["global"]
    assert "additionalProperties" not in schema_global
    assert all(
        prop.get("additionalProperties") is not None
        for prop in schema_global["properties"].values()
        if prop.get("type") == "object"
    )
    problems = V.validate({"global": {"modelstore": "s3://b/m", "image": {"tagg": "1"}}}, chart)
    assert len(problems) == 2, problems
    assert problems[0].startswith("global.modelstore: unknown key (allowed: commonLabels, data, ")
    assert "modelStore" in problems[0]
    assert problems[1].startswith("global.image.tagg: unknown key (allowed: ")
    # The chart's own file is not changed by the check.
    assert "additionalProperties" not in chart.chart.schema["properties"]["global"]


def test_a_key_an_earlier_chart_accepted_says_where_it_moved(chart):
    # values files written for the chart before the stores had one home (docs/chart.md)
    old = {"trainer": {"hdfs": {"existingSecret": "hdfs-ugi", "existingSecretKey": "hdfsUgi"}}}
    problems = V.validate(old, chart)
    assert problems == [f"trainer.hdfs: moved to {V.MOVED['trainer.hdfs']}"]
    assert "global.data.hdfsUgiSecret" in problems[0]
    new = {"global": {"data": {"hdfsUgiSecret": {"name": "hdfs-ugi", "key": "hdfsUgi"}}}}
    assert V.validate(new, chart) == []


def test_a_key_that_no_longer_does_anything_says_so(chart):
    problems = V.validate({"trainer": {"rbac": {"create": True}}}, chart)
    assert problems == [f"trainer.rbac: removed ({V.REMOVED['trainer.rbac']})"]
    assert "delete the key" in problems[0]


def test_disabled_subchart_is_not_schema_checked(chart):
    assert (
        V.validate(
            {
                "cube": {"enabled": False, "shards": 0},
                "serving": {"enabled": False},
                "console": {"enabled": False},
            },
            chart,
        )
        == []
    )


# Each cross-field rule, with its exact message: those of elasticctr.validateValues, and
# those a values.schema.json states (`if`/`then`, `allOf`), whose `errorMessage` ectl prints.
RULES = [
    (
        {
            "global": {
                "scenario": {"name": "coupon"},
                "data": {"path": "hdfs://nn:8020/d"},
                "modelStore": "hdfs://nn:8020/m",
                "mlflow": {"trackingUri": "http://mlflow:5000"},
            },
            **{part: {"enabled": False} for part in PLATFORM_PARTS},
        },
        "global.scenario.platform: required with global.scenario.name (the platform release "
        "that serves the scenario; ectl scenario add --platform sets it)",
    ),
    (
        {"trainer": {"trainer": {"replicas": 2, "minReplicas": 3}}},
        "trainer.trainer.minReplicas: 3 is more than trainer.trainer.replicas (2)",
    ),
    (
        {"trainer": {"model": {"name": "dnn", "crossLayers": 2, "learningRate": 0.01}}},
        "trainer.model.crossLayers: not a hyperparameter of dnn "
        "(known: batchSize, embeddingDim, hiddenUnits, learningRate, optimizer, "
        "sparseLearningRate)",
    ),
    (
        {"trainer": {"model": {"name": "lr", "hiddenUnits": [8]}}},
        "trainer.model.hiddenUnits: not a hyperparameter of lr "
        "(known: batchSize, learningRate, optimizer, sparseLearningRate)",
    ),
    (
        {"fileserver": {"enabled": False}, "global": {"modelStore": "hdfs://nn:8020/m"}},
        "global.data.path: required when fileserver.enabled is false "
        "(empty means the release's fileserver)",
    ),
    (
        {"global": {"data": {"path": "hdfs:///ctr/data"}}},
        "global.data.hdfsAddress: required when global.data.path is an hdfs:/// URL "
        "without a namenode",
    ),
    (
        {"fileserver": {"auth": {"existingSecret": "fs-token"}}},
        "trainer.fileserverToken.existingSecret: must be fs-token like "
        "fileserver.auth.existingSecret (training uploads model versions to the fileserver "
        "with that token)",
    ),
    (
        {"trainer": {"volcano": {"priorityClasses": {"create": True, "guaranteed": "ps"}}}},
        "trainer.volcano.priorityClasses.trainer: required when "
        "trainer.volcano.priorityClasses.create is true (creating the classes needs both "
        "names, guaranteed and trainer)",
    ),
    (
        {
            "trainer": {
                "volcano": {
                    "priorityClasses": {
                        "create": True,
                        "guaranteed": "ps",
                        "trainer": "tr",
                        "guaranteedValue": 10,
                        "trainerValue": 10,
                    }
                }
            }
        },
        "trainer.volcano.priorityClasses.trainerValue: 10 must be lower than guaranteedValue (10)",
    ),
    (
        {"trainer": {"volcano": {"priorityClasses": {"guaranteed": "c", "trainer": "c"}}}},
        "trainer.volcano.priorityClasses.trainer: must differ from guaranteed "
        "(trainers are the preemptible part)",
    ),
    (
        {"trainer": {"volcano": {"createQueue": {"enabled": True}}}},
        "trainer.volcano.createQueue.enabled: the default queue is Volcano's own; "
        "name this release's queue in trainer.volcano.queue",
    ),
    (
        {"global": {"data": {"startDateHour": "20200402/00", "endDateHour": "20200401/23"}}},
        "global.data.endDateHour: 20200401/23 is before global.data.startDateHour 20200402/00",
    ),
    (
        {"fileserver": {"enabled": False}, "global": {"data": {"path": "file:///d"}}},
        "global.modelStore: required when fileserver.enabled is false "
        "(empty means the release's fileserver)",
    ),
    (
        {
            "fileserver": {"auth": {"token": "0123456789abcdef", "existingSecret": "tok"}},
            "trainer": {"fileserverToken": {"existingSecret": "tok"}},
        },
        "fileserver.auth: set token or existingSecret, not both",
    ),
    (
        {"cube": {"enabled": False}, "console": {"enabled": False}},
        "serving.enabled: serving needs cube.enabled (it looks embeddings up in the cube shards)",
    ),
    (
        {"cube": {"enabled": False}, "serving": {"enabled": False}, "console": {"enabled": True}},
        "console.enabled: the console serves a platform, which runs cube and serving; set "
        "console.enabled: false in a release without them",
    ),
    (
        {"serving": {"autoscaling": {"minReplicas": 5, "maxReplicas": 3}}},
        "serving.autoscaling.minReplicas: 5 is more than serving.autoscaling.maxReplicas (3)",
    ),
    (
        {"serving": {"autoscaling": {"enabled": False}, "replicas": 1}},
        "serving.podDisruptionBudget.minAvailable: 1 must be lower than the minimum replica "
        "count (1), or no node could ever be drained",
    ),
    (
        {"serving": {"ingress": {"enabled": True}}},
        "serving.ingress.host: required when serving.ingress.enabled",
    ),
    (
        {"mlflow": {"backendStore": {"type": "external"}}},
        "mlflow.backendStore.existingSecret: required when mlflow.backendStore.type is external",
    ),
    (
        {"mlflow": {"ingress": {"enabled": True}}},
        "mlflow.ingress.host: required when mlflow.ingress.enabled",
    ),
    ({"mlflow": {"enabled": False}}, V.MLFLOW_NOT_DEPLOYED),
    (
        {"cube": {"shards": 2, "replicas": 1, "podDisruptionBudget": {"maxUnavailable": 2}}},
        "cube.podDisruptionBudget.maxUnavailable: 2 would let every shard (2) go down at once",
    ),
    (
        {"cube": {"shards": 3, "replicas": 2, "podDisruptionBudget": {"maxUnavailable": 2}}},
        "cube.podDisruptionBudget.maxUnavailable: 2 would let every replica (2) of a shard go "
        "down at once",
    ),
    (
        {"cube": {"transfer": {"serviceAccount": {"create": False}}}},
        "cube.transfer.serviceAccount.name: required when cube.transfer.serviceAccount.create "
        "is false and cube.transfer.scenarios is on (its Role, which reads the scenario "
        "registrations, would be bound to the namespace's default account)",
    ),
]


@pytest.mark.parametrize("user,message", RULES, ids=[m.split(":")[0] for _, m in RULES])
def test_cross_field_rule(user, message, chart):
    assert V.validate(user, chart) == [message]


def _error_messages(node) -> list[str]:
    if isinstance(node, dict):
        own = [node["errorMessage"]] if isinstance(node.get("errorMessage"), str) else []
        return own + [m for v in node.values() for m in _error_messages(v)]
    if isinstance(node, list):
        return [m for v in node for m in _error_messages(v)]
    return []


def test_every_schema_rule_has_a_case_and_sits_apart(chart):
    """Every `errorMessage` of the schemas is printed by some case of RULES; and each sits in
    a subschema of its rule alone (an `if`/`then` leaf or an `allOf` item), never beside
    `properties` or `type`, where it would also be printed for any other failure there."""
    messages = [m for c in (chart.chart, *chart.subcharts) for m in _error_messages(c.schema)]
    assert len(messages) == 9
    printed = [m.split(": ", 1)[1] for _, m in RULES]
    assert [m for m in messages if m not in printed] == []

    def owners(node):
        if isinstance(node, dict):
            if "errorMessage" in node:
                yield node
            for v in node.values():
                yield from owners(v)
        elif isinstance(node, list):
            for v in node:
                yield from owners(v)

    for c in (chart.chart, *chart.subcharts):
        for node in owners(c.schema):
            assert not {"properties", "type", "description"} & set(node), (c.name, node)


def test_every_part_that_sends_the_fileserver_token_reads_the_fileservers_secret(chart):
    """trainer (uploads) always; cube-transfer and serving (reads) when reads are protected:
    each must name the fileserver's existing Secret and key, or it sends no token (401)."""
    fs = {"existingSecret": "fs", "existingSecretKey": "tok"}
    user = {"fileserver": {"auth": {**fs, "protectReads": True}}}
    assert [p.split(":")[0] for p in V.validate(user, chart)] == [
        f"{part}.fileserverToken.{key}"
        for part in ("trainer", "cube", "serving")
        for key in ("existingSecret", "existingSecretKey")
    ]
    same = {part: {"fileserverToken": fs} for part in ("trainer", "cube", "serving")}
    assert V.validate({**user, **same}, chart) == []
    # Open reads: only the trainer needs the token.
    assert V.validate({"fileserver": {"auth": fs}, "trainer": same["trainer"]}, chart) == []
    # The generated Secret keeps the token under `token`.
    assert V.validate({"trainer": {"fileserverToken": {"existingSecretKey": "t"}}}, chart) == [
        "trainer.fileserverToken.existingSecretKey: must be token like the fileserver's token "
        "key (training uploads model versions to the fileserver with that token)"
    ]
    # A model store elsewhere: the fileserver's token is nobody's business.
    assert V.validate({**user, "global": {"modelStore": "hdfs://nn:8020/m"}}, chart) == []


def test_all_cross_field_problems_are_reported_together(chart):
    """Helm stops at a failed schema check; ectl reports everything at once: the schemas'
    problems (umbrella, then each subchart) before the templates' rules."""
    problems = V.validate(
        {
            "trainer": {"trainer": {"replicas": 1, "minReplicas": 2}},
            "serving": {"ingress": {"enabled": True}},
            "mlflow": {"ingress": {"enabled": True}},
        },
        chart,
    )
    assert [p.split(":")[0] for p in problems] == [
        "mlflow.ingress.host",
        "serving.ingress.host",
        "trainer.trainer.minReplicas",
    ]


def test_bad_files_raise_user_errors(tmp_path, chart):
    broken = tmp_path / "broken.yaml"
    broken.write_text("trainer: [unclosed\n")
    with pytest.raises(ValidationError, match=r"broken.yaml:\d+:\d+: not valid YAML"):
        V.validate_files([broken], chart)
    listing = tmp_path / "list.yaml"
    listing.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(ValidationError, match="must be a mapping, got list"):
        V.validate_files([listing], chart)
    with pytest.raises(EctlError, match="cannot read values file"):
        V.validate_files([tmp_path / "missing.yaml"], chart)
    with pytest.raises(EctlError, match="no chart at"):
        V.load_chart(tmp_path)


def test_non_mapping_values_are_a_problem_not_a_crash(chart):
    assert V.validate([1], chart) == ["(root): values must be a mapping, got list"]  # type: ignore[arg-type]
    # Wrong types inside are schema problems; the cross-field rules skip what they cannot read.
    problems = V.validate({"serving": {"autoscaling": "yes"}}, chart)
    assert problems == ["serving.autoscaling: 'yes' is not of type 'object'"]


@pytest.mark.parametrize(
    ("user", "deployed"),
    [
        ({}, True),
        ({"serving": {"enabled": False}, "cube": {"enabled": False}}, False),
        ({"console": {"enabled": False}}, False),
        (
            {"global": {"scenario": {"name": "a", "platform": "p"}}, "serving": {"enabled": False}},
            False,
        ),
    ],
)
def test_the_console_follows_serving_unless_set(chart, user, deployed):
    """Helm's condition `console.enabled,serving.enabled`: a platform release gets the
    console, a training-only or scenario release none, without a key in their values (an
    upgrade of such a release with its old values file passes)."""
    values = V.effective_values(user, chart)
    console = next(s for s in chart.subcharts if s.name == "console")
    assert V._enabled(values, console.condition) is deployed
    assert not [p for p in V.validate(user, chart) if "console" in p]
