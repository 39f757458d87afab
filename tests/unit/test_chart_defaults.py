"""Defaults that both the chart and the Python code need are the same on both sides.

The Python side is the source (elasticctr.constants, elasticctr.zoo); the chart's
values.yaml and its validation template must say the same, or a pod and a local run of
the same values would behave differently.
"""

from __future__ import annotations

import re

import pytest
import yaml

from elasticctr import constants as C
from elasticctr import zoo
from elasticctr.values import model_hyperparameters

CHART = C.repo_root() / "charts" / "elasticctr"


def _values(sub: str) -> dict:
    return yaml.safe_load((CHART / "charts" / sub / "values.yaml").read_text())


@pytest.mark.fast
@pytest.mark.parametrize(
    ("sub", "path", "python"),
    [
        ("trainer", "coordinator.leaseSeconds", C.DEFAULT_COORDINATOR_LEASE_SECONDS),
        ("trainer", "coordinator.port", C.DEFAULT_COORDINATOR_PORT),
        ("trainer", "coordinator.taskMiB", C.DEFAULT_COORDINATOR_TASK_MIB),
        ("trainer", "coordinator.window", C.DEFAULT_COORDINATOR_WINDOW),
        ("trainer", "coordinator.checkpointEvery", C.DEFAULT_COORDINATOR_CHECKPOINT_EVERY),
        ("trainer", "coordinator.pollSeconds", C.DEFAULT_COORDINATOR_POLL_SECONDS),
        ("trainer", "model.name", zoo.DEFAULT_MODEL),
        ("serving", "batching.maxBatchSamples", C.SERVING_MAX_BATCH_SAMPLES),
        ("serving", "batching.maxWaitMs", C.SERVING_MAX_WAIT_MS),
        ("serving", "batching.maxQueueSamples", C.SERVING_MAX_QUEUE_SAMPLES),
    ],
)
def test_chart_value_equals_the_python_default(sub, path, python):
    node = _values(sub)
    for key in path.split("."):
        node = node[key]
    assert node == python, f"charts/elasticctr/charts/{sub}/values.yaml {path}: {node!r}"


@pytest.mark.fast
def test_fixed_ports_of_the_cube_templates_are_the_constants():
    """Shard and cube-transfer ports are not values: the templates take the constants from
    the library's elasticctr.port (tests/chart/test_ports.py checks its numbers), and
    cube-transfer's port is `--listen`'s default, so the container only declares it."""
    templates = CHART / "charts" / "cube" / "templates"
    shards = (templates / "statefulset.yaml").read_text()
    assert 'containerPort: {{ include "elasticctr.port" "cube" }}\n' in shards
    transfer = (templates / "transfer-deployment.yaml").read_text()
    assert re.findall(r"containerPort: (.+)", transfer) == [
        '{{ include "elasticctr.port" "cubeTransfer" }}'
    ]
    assert "- --listen" not in transfer  # the default of the option, not an argument


@pytest.mark.fast
def test_scenario_contract_is_the_charts():
    """The umbrella's global.scenario default budget, the scenario label names and the
    registration key are elasticctr.scenarios' (cube-transfer reads what the chart writes)."""
    from elasticctr import scenarios

    umbrella = yaml.safe_load((CHART / "values.yaml").read_text())
    assert umbrella["global"]["scenario"]["cubeMemoryMiB"] == scenarios.DEFAULT_CUBE_MEMORY_MIB
    helpers = (CHART / "charts" / "trainer" / "templates" / "_helpers.tpl").read_text()
    for label in (scenarios.LABEL_PLATFORM, scenarios.LABEL_SCENARIO):
        assert f"{label}: " in helpers, label
    registration = (CHART / "charts" / "trainer" / "templates" / "registration.yaml").read_text()
    assert f"  {scenarios.SPEC_KEY}: " in registration
    assert f"/{scenarios.SCENARIOS_DIR}/" in helpers
    policies = [
        (CHART / "charts" / part / "templates" / "networkpolicy.yaml").read_text()
        for part in ("fileserver", "mlflow")
    ]
    assert all(f"{scenarios.LABEL_PLATFORM}: {{{{ .Release.Name }}}}" in p for p in policies)


@pytest.mark.fast
def test_chart_validation_knows_the_zoo_hyperparameters():
    """`elasticctr.validateValues` lists each model's hyperparameter names; they must be
    the zoo's (the same check `ectl validate` runs from elasticctr.zoo)."""
    tpl = (CHART / "templates" / "_helpers.tpl").read_text()

    def names(var: str) -> list[str]:
        match = re.search(r"\$" + var + r" := list((?: \"\w+\")*)", tpl)
        assert match, f"_helpers.tpl: no ${var} list"
        return re.findall(r'"(\w+)"', match.group(1))

    common, deep = set(names("common")), set(names("deep"))
    zoo_line = re.search(r"\$zoo := dict (.*?) -\}\}", tpl)
    assert zoo_line, "_helpers.tpl: no $zoo dict"
    chart = {}
    for name, own in re.findall(r'"(\w+)" (\$deep|list|\(append \$deep "\w+"\))', zoo_line[1]):
        extra = set(re.findall(r'append \$deep "(\w+)"', own))
        chart[name] = common | (deep if "$deep" in own else set()) | extra
    assert chart == model_hyperparameters()
    assert common == set(zoo.COMMON_DEFAULTS)


@pytest.mark.fast
def test_trainer_values_comment_does_not_restate_zoo_numbers():
    """The zoo's numbers live in elasticctr.zoo (and docs/training.md's table, checked
    below); the chart's comment names the keys only, so it cannot drift."""
    text = (CHART / "charts" / "trainer" / "values.yaml").read_text()
    block = text.split("\nmodel:")[0].rsplit("\n\n", 1)[-1]
    assert not re.search(r"\(\d", block), block


@pytest.mark.fast
def test_training_doc_states_the_zoo_defaults():
    doc = (C.repo_root() / "docs" / "training.md").read_text()
    common = zoo.COMMON_DEFAULTS
    assert f"`learningRate` ({common['learningRate']}" in doc
    assert f"`sparseLearningRate`\n({common['sparseLearningRate']}" in doc or (
        f"`sparseLearningRate` ({common['sparseLearningRate']}" in doc
    )
    assert f"`batchSize` ({common['batchSize']})" in doc
    deepfm = zoo.DEFAULTS["deepfm"]["sparseLearningRate"]
    assert f"deepfm {deepfm}" in doc
    assert f"`embeddingDim` ({zoo.DEFAULTS['dnn']['embeddingDim']})" in doc
    assert f"`crossLayers`: {zoo.DEFAULTS['dcn']['crossLayers']}" in doc
