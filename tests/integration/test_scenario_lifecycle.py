"""`ectl scenario add | remove`'s decisions against real stores and a real MLflow server.

- a scenario name used before keeps the shape of the versions in its store prefix
  (model, embedding width, dense layer sizes, slots, feasign hashing): versions written
  by training's own writers (`export.build_version`, `ModelStore.publish`) in a local
  store and on the project's fileserver (reads and writes protected, as in a release);
- `--purge` deletes exactly the scenario's prefix (the platform's other scenarios stay)
  in a local store, on the fileserver (only with its token), HDFS and S3;
- MLflow: an alias other than `serving` pins a version and refuses the removal; a purge
  deletes the registered model and frees the experiment's name for a new scenario.

The cluster side (helm uninstall, the port-forwards) is tests/e2e/test_platform.py's.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest
from tests.fileserver_fixture import running_fileserver

from elasticctr import modelstore, scenarios
from elasticctr import values as chart_values
from elasticctr.cli.scenario import pin_problem, scenario_store, shape_problems
from elasticctr.errors import EctlError
from elasticctr.net import free_port
from elasticctr.train import config as train_config
from elasticctr.train import export, shape

pytestmark = pytest.mark.integration

TOKEN = "lifecycle-t0ken"
SLOTS = [0, 1, 2, 3]


def scenario_values(**model) -> dict:
    """Effective values of a scenario, as `ectl scenario add` checks them."""
    return chart_values.effective_values(
        {
            "global": {"data": {"slots": model.pop("slots", SLOTS)}},
            "trainer": {"model": {"name": "deepfm", "embeddingDim": 8, **model}},
        }
    )


def publish(root: modelstore.ModelStore, name: str, version: str, values: dict, tmp: Path):
    """One version as training exports it, into scenario `name`'s prefix of `root`."""
    cfg = train_config.from_values(values)
    dense = tmp / "dense-src"
    dense.mkdir(exist_ok=True)
    (dense / "model.json").write_text("{}")
    keys = np.arange(1, 50, dtype=np.uint64)
    table = np.zeros((keys.size, cfg.model.table_dim), np.float32)
    local = tmp / f"build-{uuid.uuid4().hex[:6]}"
    meta = {**shape.version_facts(cfg), "dense": {}, "metrics": {"auc": 0.71}}
    export.build_version(
        local, version_id=version, dense_dir=dense, keys=keys, values=table, meta=meta
    )
    scenario_store(root, name).publish(local, version)


def _shape_rules(root: modelstore.ModelStore, tmp: Path) -> None:
    publish(root, "coupon", "20200401/00", scenario_values(), tmp)
    publish(root, "coupon", "20200401/01", scenario_values(), tmp)
    store = scenario_store(root, "coupon")
    assert store.list_versions() == ["20200401/00", "20200401/01"]

    # the same shape, other hyperparameters: allowed
    assert shape_problems(store, "coupon", scenario_values(learningRate=0.01, batchSize=64)) == []
    # an unused name, or a prefix without versions: nothing to keep
    assert shape_problems(scenario_store(root, "fresh"), "fresh", scenario_values(name="lr")) == []

    (msg,) = shape_problems(store, "coupon", scenario_values(embeddingDim=16))
    assert msg.startswith("trainer.model.embeddingDim: 16 differs from 8 of the versions")
    assert "newest 20200401/01" in msg and "scenarios/coupon" in msg
    assert "pick a new scenario name" in msg and "ectl scenario remove coupon --purge" in msg
    (msg,) = shape_problems(store, "coupon", scenario_values(name="dcn"))
    assert msg.startswith("trainer.model.name: 'dcn' differs from 'deepfm'")
    (msg,) = shape_problems(store, "coupon", scenario_values(hiddenUnits=[32, 16]))
    assert msg.startswith("trainer.model.hiddenUnits: [32, 16] differs from")
    both = shape_problems(store, "coupon", scenario_values(slots=[0, 1, 2], embeddingDim=4))
    assert [m.split(":")[0] for m in both] == ["trainer.model.embeddingDim", "global.data.slots"]
    hashed = chart_values.merge(scenario_values(), {"global": {"data": {"sparseDim": 1000}}})
    (msg,) = shape_problems(store, "coupon", hashed)
    assert msg.startswith("global.data.sparseDim: 1000 differs from 1000001")


def test_versions_keep_their_shape_in_a_local_store(tmp_path):
    _shape_rules(modelstore.open_store(f"file://{tmp_path / 'store'}"), tmp_path)


@pytest.fixture(scope="module")
def fileserver(tmp_path_factory):
    root = tmp_path_factory.mktemp("fileserver") / "root"
    root.mkdir()
    port = free_port()
    with running_fileserver(root, port, TOKEN):
        yield f"http://127.0.0.1:{port}", root


def test_versions_keep_their_shape_on_the_fileserver(fileserver, tmp_path):
    url, _ = fileserver
    root = modelstore.open_store(f"{url}/shape", token=TOKEN)
    _shape_rules(root, tmp_path)
    # a store that refuses the read is an error, never "no versions yet"
    with pytest.raises(EctlError, match="HTTP 401"):
        shape_problems(
            scenario_store(modelstore.open_store(f"{url}/shape", token=""), "coupon"),
            "coupon",
            scenario_values(),
        )


@pytest.mark.parametrize("where", ["local", "fileserver", "hdfs", "s3"])
def test_purge_deletes_the_scenario_prefix_only(where, request, tmp_path):
    if where == "local":
        root = modelstore.open_store(str(tmp_path / "store"))
    elif where == "fileserver":
        url = request.getfixturevalue("fileserver")[0]
        root = modelstore.open_store(f"{url}/purge-{uuid.uuid4().hex[:6]}", token=TOKEN)
    else:
        base = request.getfixturevalue("hdfs_dir" if where == "hdfs" else "s3_prefix")
        root = modelstore.open_store(f"{base}/models")
    for name in ("coupon", "feed"):
        publish(root, name, "20200401/00", scenario_values(), tmp_path)
    coupon = scenario_store(root, "coupon")
    if where == "fileserver":  # reads may be open to all; deletes need the token
        no_token = modelstore.ModelStore(coupon.url, token=None)
        with pytest.raises(EctlError, match="refused the (request|delete) \\(HTTP 401\\)"):
            no_token.delete_all()
        assert coupon.list_versions() == ["20200401/00"]
    assert coupon.delete_all() is True
    assert coupon.list_versions() == []
    assert coupon.delete_all() is False  # nothing left: not an error
    assert scenario_store(root, "feed").list_versions() == ["20200401/00"]
    # SeaweedFS's S3 gateway keeps empty folder entries once their objects are gone
    assert root.list_scenarios() == (["coupon", "feed"] if where == "s3" else ["feed"])
    with pytest.raises(EctlError, match="platform's store root"):
        scenario_store(root, scenarios.DEFAULT)


def test_mlflow_pins_refuse_removal_and_purge_frees_the_names(mlflow_server, tmp_path):
    import mlflow

    from elasticctr import mlflowreg

    uri = mlflow_server[1]()
    name = f"pin{uuid.uuid4().hex[:6]}"
    model = scenarios.registered_model_name(name)
    experiment = scenarios.experiment_name(name)
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    # nothing registered yet: nothing pinned, nothing to delete
    assert mlflowreg.registered_aliases(uri, model) is None
    assert pin_problem(name, model, None) is None
    assert mlflowreg.delete_registered_model(uri, model) is False
    assert mlflowreg.delete_experiment(uri, experiment) is None

    exp_id = client.create_experiment(experiment)
    run = client.create_run(exp_id)
    client.create_registered_model(model)
    for _ in range(2):
        client.create_model_version(model, f"runs:/{run.info.run_id}/model", run.info.run_id)
    client.set_registered_model_alias(model, mlflowreg.SERVING_ALIAS, "2")
    aliases = mlflowreg.registered_aliases(uri, model)
    assert aliases == {"serving": "2"}
    assert pin_problem(name, model, aliases) is None  # serving's own alias pins nothing

    client.set_registered_model_alias(model, "prod", "1")
    aliases = mlflowreg.registered_aliases(uri, model)
    assert mlflowreg.pins(aliases) == {"prod": "1"}
    msg = pin_problem(name, model, aliases)
    assert msg == (
        f"scenario {name}: MLflow registered model {model} has pinned versions ('prod' -> "
        f"version 1); delete the alias(es) in MLflow first, or pass --force"
    )

    assert mlflowreg.delete_registered_model(uri, model) is True
    assert mlflowreg.registered_aliases(uri, model) is None
    renamed = mlflowreg.delete_experiment(uri, experiment)
    assert renamed == f"{experiment}.deleted-{exp_id}"
    assert client.get_experiment(exp_id).lifecycle_stage == "deleted"
    # the scenario added again: training's set_experiment gets a new, active experiment
    mlflow.set_tracking_uri(uri)
    again = mlflow.set_experiment(experiment)
    assert again.experiment_id != exp_id and again.lifecycle_stage == "active"
