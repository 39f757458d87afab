"""Every version the service serves is logged to MLflow as a pyfunc model, and that model
predicts what `ectl serve` predicts (to 1e-5)."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest
from serving_helpers import ServeProc
from test_serving import SLOTS, V1, V2
from tests.conftest import shared_path

pytestmark = pytest.mark.integration


def test_served_version_is_logged_and_the_pyfunc_matches_the_service(tmp_path):
    import mlflow
    import pandas as pd

    from elasticctr.errors import ValidationError
    from elasticctr.serving.pyfunc import already_logged
    from elasticctr.serving.testing import keys_of_file, write_version

    demo = shared_path("data", "elasticctr", "serving_demo_data.txt")
    store = tmp_path / "store"
    write_version(store, V1, slots=SLOTS, dim=8, keys=keys_of_file(demo, SLOTS), seed=5)
    lines = demo.read_text().splitlines()
    db = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # this test reads the store while the service writes it: create its tables first, or
    # both first clients of a new SQLite store create them and one fails
    mlflow.MlflowClient(tracking_uri=db).search_experiments(max_results=1)
    proc = ServeProc(["--store", str(store), "--poll-interval", "0", "--mlflow-tracking-uri",
                      db, "--mlflow-model-name", "ctr-test", "--cache", str(tmp_path / "c")],
                     tmp_path / "serve.log")  # fmt: skip
    try:
        proc.wait_ready()
        r = httpx.post(proc.url + "/v1/predict", content="\n".join(lines),
                       headers={"Content-Type": "text/plain"})  # fmt: skip
        assert r.status_code == 200, r.text
        from_service = np.asarray(r.json()["probabilities"])
        # logged in a child process of the service, once per version
        deadline = time.monotonic() + 150
        while not (uri := already_logged(V1, db, "elasticctr-serving")):
            assert time.monotonic() < deadline, proc.text()
            time.sleep(2)
    finally:
        proc.stop()

    mlflow.set_tracking_uri(db)
    assert mlflow.get_run(uri.split("/")[1]).data.tags["elasticctr.version"] == V1
    assert mlflow.MlflowClient().get_registered_model("ctr-test").name == "ctr-test"
    model = mlflow.pyfunc.load_model(uri)
    from_pyfunc = np.asarray(model.predict(pd.DataFrame({"line": lines})))
    assert from_pyfunc.shape == from_service.shape == (100,)
    np.testing.assert_allclose(from_pyfunc, from_service, atol=1e-5, rtol=0)
    # bad lines are refused with the parser's message, not a crash
    with pytest.raises(ValidationError, match="click 3 > show 1"):
        model.predict(pd.DataFrame({"line": ["1 3 5:0"]}))


def test_registry_alias_serving_follows_every_switch_and_rollback(tmp_path, mlflow_server):
    """Training registers each published version (elasticctr.train.registry); serving moves
    the registered model's alias `serving` to the version it answers with, on every switch,
    a rollback included, so MLflow says which version is live. Against a real tracking
    server over http, as in the chart: serving moves the alias through MLflow's REST API
    (its image has no MLflow client)."""
    import mlflow

    from elasticctr import mlflowreg
    from elasticctr.serving.testing import write_version
    from elasticctr.train import registry

    store = tmp_path / "store"
    uri, wait = mlflow_server
    db = wait()
    numbers = {}
    mlflow.set_tracking_uri(db)
    mlflow.set_experiment("alias-test")
    with mlflow.start_run() as run:  # MLflow 3 refuses file:// sources: run-manifest ones
        for version in (V1, V2):
            vdir = write_version(store, version, slots=SLOTS, dim=8, keys=[1, 2, 3], seed=1)
            mv = registry.register_version(
                db, version, str(vdir), vdir / "manifest.json", run_id=run.info.run_id
            )
            assert mv is not None
            numbers[version] = str(mv.version)
    client = mlflow.MlflowClient(tracking_uri=db, registry_uri=db)
    name = mlflowreg.registered_model_name()

    def alias_points_at(version: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if (
                    str(client.get_model_version_by_alias(name, "serving").version)
                    == numbers[version]
                ):
                    return
            except mlflow.exceptions.MlflowException:
                pass  # no alias yet
            assert time.monotonic() < deadline, f"alias not on {version}\n{proc.text()}"
            time.sleep(0.5)

    proc = ServeProc(["--store", str(store), "--version", V1, "--poll-interval", "0.5",
                      "--mlflow-tracking-uri", db, "--cache", str(tmp_path / "c")],
                     tmp_path / "serve.log")  # fmt: skip
    try:
        proc.wait_ready()
        alias_points_at(V1)
        for target in (V2, V1):  # a switch, then a rollback
            r = httpx.post(proc.url + "/admin/version", json={"version": target}, timeout=60)
            assert r.status_code == 200 and r.json()["changed"], r.text
            alias_points_at(target)
    finally:
        proc.stop()
