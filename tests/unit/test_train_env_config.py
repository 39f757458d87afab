"""Role environment contract, values → TrainConfig, model-spec validation, metrics."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from elasticctr import constants as C
from elasticctr.errors import EctlError, ValidationError
from elasticctr.train import env as role_env
from elasticctr.train import metrics
from elasticctr.train.config import from_values
from elasticctr.train.models import DEFAULTS, resolve_spec


@pytest.mark.fast
def test_explicit_paddle_env_for_a_trainer() -> None:
    renv = role_env.resolve(
        {
            C.ENV_TRAINING_ROLE: "TRAINER",
            C.ENV_PSERVER_ENDPOINTS: "10.0.0.1:6170,10.0.0.2:6170",
            C.ENV_TRAINERS_NUM: "3",
            C.ENV_TRAINER_ID: "2",
            C.ENV_POD_IP: "10.0.1.5",
            C.ENV_PADDLE_PORT: "6200",
        }
    )
    assert renv.role == C.ROLE_TRAINER and renv.index == 2 and renv.trainers_num == 3
    assert renv.pserver_endpoints == ("10.0.0.1:6170", "10.0.0.2:6170")
    assert renv.gloo_endpoint == f"10.0.0.1:{C.DEFAULT_GLOO_PORT}"
    env = renv.paddle_env()
    assert env[C.ENV_TRAINER_ID] == "2" and env[C.ENV_PIR_API] == "0"
    assert env[C.ENV_WITH_GLOO] == "1" and env[C.ENV_GLOO_RENDEZVOUS] == "3"


@pytest.mark.fast
def test_coordinator_url_from_env_or_the_volcano_coordinator_task() -> None:
    assert role_env.coordinator_url({}) is None  # no coordinator: `ectl train trainer` refuses
    vc = {C.ENV_VC_COORDINATOR_HOSTS: "job-coordinator-0.job"}
    assert (
        role_env.coordinator_url(vc) == f"http://job-coordinator-0.job:{C.DEFAULT_COORDINATOR_PORT}"
    )
    assert role_env.coordinator_url({**vc, C.ENV_COORDINATOR_PORT: "8400"}).endswith(":8400")
    explicit = {**vc, C.ENV_COORDINATOR_URL: "http://127.0.0.1:9/"}
    assert role_env.coordinator_url(explicit) == "http://127.0.0.1:9"
    with pytest.raises(ValidationError, match="not a port"):
        role_env.coordinator_url({**vc, C.ENV_COORDINATOR_PORT: "http"})


@pytest.mark.fast
def test_volcano_variables_map_to_paddle_for_both_roles() -> None:
    vc = {
        C.ENV_VC_PSERVER_HOSTS: "job-pserver-0.job,job-pserver-1.job",
        C.ENV_VC_TRAINER_HOSTS: "job-trainer-0.job,job-trainer-1.job,job-trainer-2.job",
        C.ENV_VC_TASK_INDEX: "1",
    }
    ps = role_env.resolve(vc, role="pserver")
    assert ps.pserver_endpoints == (
        f"job-pserver-0.job:{C.DEFAULT_PSERVER_PORT}",
        f"job-pserver-1.job:{C.DEFAULT_PSERVER_PORT}",
    )
    # Without POD_IP Paddle finds its shard (and binds) by the host name.
    assert ps.index == 1 and ps.pod_ip == "job-pserver-1.job"
    assert ps.port == C.DEFAULT_PSERVER_PORT and ps.trainers_num == 3
    tr = role_env.resolve(vc, role="trainer")
    assert tr.index == 1 and tr.trainers_num == 3
    assert tr.gloo_endpoint == f"job-pserver-0.job:{C.DEFAULT_GLOO_PORT}"


@pytest.mark.fast
def test_a_volcano_pserver_binds_its_pod_address_not_its_host_name() -> None:
    """The svc plugin's host names resolve only once a pod is Ready, and a pserver is Ready
    only once it listens: binding its own host name would deadlock the job's start. The
    pserver's own entry is its pod IP (what Paddle binds and finds its index by); the other
    entries, and every trainer's list, keep the host names in the same order."""
    vc = {
        C.ENV_VC_PSERVER_HOSTS: "job-pserver-0.job,job-pserver-1.job,job-pserver-2.job",
        C.ENV_VC_TRAINER_NUM: "2",
        C.ENV_PADDLE_PORT: "6170",
    }
    ps = role_env.resolve({**vc, C.ENV_VC_TASK_INDEX: "1", C.ENV_POD_IP: "10.244.0.7"}, "pserver")
    assert ps.index == 1 and ps.pod_ip == "10.244.0.7" and ps.port == 6170
    assert ps.pserver_endpoints == (
        "job-pserver-0.job:6170",
        "10.244.0.7:6170",
        "job-pserver-2.job:6170",
    )
    env = ps.paddle_env()
    # Paddle's role maker: index = list.index(POD_IP:PADDLE_PORT); the server binds that entry.
    listed = env[C.ENV_PSERVER_ENDPOINTS].split(",")
    assert listed.index(f"{env[C.ENV_POD_IP]}:{env[C.ENV_PADDLE_PORT]}") == 1
    ps0 = role_env.resolve({**vc, C.ENV_VC_TASK_INDEX: "0", C.ENV_POD_IP: "10.244.0.5"}, "pserver")
    assert ps0.pserver_endpoints[0] == "10.244.0.5:6170"
    assert ps0.gloo_endpoint == f"10.244.0.5:{C.DEFAULT_GLOO_PORT}"  # pserver 0 serves it
    tr = role_env.resolve({**vc, C.ENV_VC_TASK_INDEX: "1", C.ENV_POD_IP: "10.244.0.9"}, "trainer")
    assert tr.pserver_endpoints == tuple(f"job-pserver-{i}.job:6170" for i in range(3))


@pytest.mark.fast
def test_broken_environment_lists_every_problem() -> None:
    with pytest.raises(ValidationError) as err:
        role_env.resolve(
            {
                C.ENV_TRAINING_ROLE: "WORKER",
                C.ENV_PSERVER_ENDPOINTS: "nohost",
                C.ENV_TRAINERS_NUM: "x",
            }
        )
    text = "\n".join(err.value.problems)
    assert "TRAINING_ROLE" in text and "not host:port" in text and "integer" in text
    with pytest.raises(ValidationError) as err:
        role_env.resolve(
            {C.ENV_PSERVER_ENDPOINTS: "a:1", C.ENV_TRAINERS_NUM: "2", C.ENV_TRAINER_ID: "5"},
            role="trainer",
        )
    assert any("outside 0..1" in p for p in err.value.problems)


@pytest.mark.fast
def test_wait_for_endpoints_times_out_with_a_clear_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connection refused
        t0 = time.monotonic()
        with pytest.raises(EctlError) as err:
            role_env.wait_for_endpoints([f"127.0.0.1:{port}"], timeout=0.5)
        assert time.monotonic() - t0 < 5
    assert f"127.0.0.1:{port}" in str(err.value) and C.ENV_PSERVER_WAIT_SECONDS in str(err.value)


@pytest.mark.fast
def test_wait_for_endpoints_returns_once_listening() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        waited = role_env.wait_for_endpoints([f"127.0.0.1:{sock.getsockname()[1]}"], timeout=5)
    assert waited < 2


@pytest.mark.fast
def test_model_defaults_and_validation() -> None:
    spec = resolve_spec(None)
    assert spec.name == "dnn" and spec.table_dim == 9
    assert spec.params["hiddenUnits"] == [400, 400, 400] and spec.optimizer == "adam"
    assert resolve_spec({"name": "lr"}).table_dim == 1
    assert resolve_spec({"name": "deepfm", "embeddingDim": 4}).table_dim == 5
    assert resolve_spec({"name": "dcn"}).table_dim == DEFAULTS["dcn"]["embeddingDim"]
    with pytest.raises(ValidationError, match="unknown model"):
        resolve_spec({"name": "transformer"})
    with pytest.raises(ValidationError) as err:
        resolve_spec(
            {
                "name": "dnn",
                "optimizer": "lamb",
                "learningRate": -1,
                "cinLayers": [1],
                "hiddenUnits": [],
            }
        )
    text = "\n".join(err.value.problems)
    assert "optimizer" in text and "learningRate" in text
    assert "cinLayers: not a hyperparameter of dnn" in text and "hiddenUnits" in text


@pytest.mark.fast
def test_values_to_train_config() -> None:
    cfg = from_values(
        {
            "global": {
                "data": {
                    "path": "file:///d",
                    "slots": [3, 1],
                    "sparseDim": 1000,
                    "startDateHour": "20200401/00",
                },
                "modelStore": "file:///store",
                "mlflow": {"trackingUri": "http://mlflow:5000"},
            },
            "trainer": {"model": {"name": "wide_deep", "batchSize": 64}},
        }
    )
    assert cfg.slots == (3, 1) and cfg.sparse_dim == 1000 and cfg.model.batch_size == 64
    assert cfg.model_store == "file:///store" and cfg.mlflow_uri == "http://mlflow:5000"
    with pytest.raises(ValidationError) as err:
        from_values(
            {
                "global": {"data": {"slots": [1, 1], "startDateHour": "2020-04-01"}},
                "trainer": {"model": {"name": "dnn", "batchSize": 0}},
            }
        )
    text = "\n".join(err.value.problems)
    assert "unique" in text and "YYYYMMDD/HH" in text and "batchSize" in text


@pytest.mark.fast
def test_hdfs_address_and_the_ugi_from_the_environment_reach_the_train_config(monkeypatch):
    """global.data.hdfsAddress completes an hdfs:/// path, and HDFS_UGI from the environment
    (the chart's global.data.hdfsUgiSecret or store Secret) is used when the values carry none."""
    values = {
        "global": {
            "data": {
                "path": "hdfs:///ctr/data",
                "hdfsAddress": "namenode.hadoop:8020",
                "slots": [1],
                "startDateHour": "20200401/00",
            }
        },
        "trainer": {"model": {"name": "lr"}},
    }
    monkeypatch.delenv(C.ENV_HDFS_UGI, raising=False)
    values["global"]["modelStore"] = "hdfs:///ctr/models"
    cfg = from_values(values)
    assert cfg.data_path == "hdfs://namenode.hadoop:8020/ctr/data" and cfg.hdfs_ugi is None
    assert cfg.model_store == "hdfs://namenode.hadoop:8020/ctr/models"
    monkeypatch.setenv(C.ENV_HDFS_UGI, "ctr,secret")
    assert from_values(values).hdfs_ugi == "ctr,secret"
    values["global"]["data"]["hdfsUgi"] = "other,pw"  # the values file wins
    assert from_values(values).hdfs_ugi == "other,pw"
    values["global"]["data"]["path"] = "hdfs://nn2:9000/x"  # a full URL is kept
    assert from_values(values).data_path == "hdfs://nn2:9000/x"
    values["global"]["data"]["hdfsAddress"] = "s3://bucket"
    with pytest.raises(ValidationError, match="not usable") as err:
        from_values(values)
    assert any("global.data.hdfsAddress" in p for p in err.value.problems)


def test_auc_and_logloss_match_sklearn() -> None:
    from sklearn.metrics import log_loss, roc_auc_score

    rng = np.random.default_rng(0)
    label = rng.random(5000) < 0.3
    score = np.round(rng.random(5000) * 0.5 + label * 0.2, 2)  # many ties
    assert metrics.auc(label, score) == pytest.approx(roc_auc_score(label, score), abs=1e-12)
    prob = np.clip(score, 0.01, 0.99)
    assert metrics.logloss(label, prob) == pytest.approx(log_loss(label, prob), rel=1e-9)
    assert np.isnan(metrics.auc(np.ones(3), np.arange(3)))


@pytest.mark.fast
def test_cli_rejects_bad_values_before_starting_anything(tmp_path) -> None:
    from elasticctr.cli.main import _register, app

    _register()
    bad = tmp_path / "values.yaml"
    bad.write_text("trainer:\n  model:\n    name: nope\nglobal:\n  data:\n    slots: [0]\n")
    result = CliRunner().invoke(app, ["train", "--local", "-f", str(bad)])
    assert isinstance(result.exception, ValidationError)
    assert "unknown model" in "\n".join(result.exception.problems)
    missing = CliRunner().invoke(app, ["train", "--local", "-f", str(tmp_path / "nope.yaml")])
    assert isinstance(missing.exception, EctlError) and "does not exist" in str(missing.exception)


@pytest.mark.fast
def test_a_trainer_without_a_coordinator_is_bad_usage_naming_the_fix(
    tmp_path, monkeypatch, ectl_here
) -> None:
    """Every trainer leases from a coordinator (the one training path): `ectl train
    trainer` with none (no --coordinator, ELASTICCTR_COORDINATOR_URL or the Volcano
    coordinator task's hosts) exits 2 with one line that says how to give it one, before
    it reads the values or imports Paddle. The static mode's options are gone."""
    for name in (C.ENV_COORDINATOR_URL, C.ENV_VC_COORDINATOR_HOSTS):
        monkeypatch.delenv(name, raising=False)
    values = tmp_path / "values.yaml"
    values.write_text("global:\n  data:\n    slots: [0, 1]\n")
    proc = ectl_here("train", "trainer", "-f", str(values))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.strip().splitlines() == [
        "error: ectl train trainer needs a coordinator: pass --coordinator URL or set "
        f"{C.ENV_COORDINATOR_URL}; `ectl train --local` starts one"
    ]
    assert ectl_here("train", "trainer", "-f", str(tmp_path / "nope.yaml")).returncode == 2
    for gone in ("--synthetic-samples", "--synthetic-partitions", "--resume",
                 "--checkpoint-every", "--checkpoint-minutes"):  # fmt: skip
        proc = ectl_here("train", "trainer", "-f", str(values), gone, "1")
        assert proc.returncode == 2 and "No such option" in proc.stderr, (gone, proc.stderr)


@pytest.mark.fast
def test_training_threads_from_values_env_override_and_bounds(monkeypatch) -> None:
    base = {"global": {"data": {"slots": [0, 1]}}}
    monkeypatch.delenv(C.ENV_TRAIN_THREADS, raising=False)
    assert from_values(base).threads == C.DEFAULT_TRAIN_THREADS
    chart = {**base, "trainer": {"trainer": {"threads": 0}}}  # the chart's trainer.threads
    assert from_values(chart).threads == 0
    monkeypatch.setenv(C.ENV_TRAIN_THREADS, "4")
    assert from_values(chart).threads == 4
    for bad in ("-1", "x", str(C.MAX_TRAIN_THREADS + 1)):
        monkeypatch.setenv(C.ENV_TRAIN_THREADS, bad)
        with pytest.raises(ValidationError) as err:
            from_values(chart)
        assert any(
            p.startswith(f"{C.ENV_TRAIN_THREADS}: expected an integer") for p in err.value.problems
        )
    monkeypatch.delenv(C.ENV_TRAIN_THREADS)
    with pytest.raises(ValidationError, match="values are not usable"):
        from_values({**base, "trainer": {"trainer": {"threads": True}}})


@pytest.mark.fast
def test_ps_descriptor_edits_apply_once_to_what_fleet_builds(monkeypatch) -> None:
    """The pserver's plain dumps and the trainers' client flags reach the PSParameter Fleet
    serialises for Paddle's C++ side, each edit once however often it is installed."""
    from elasticctr.train import program, pserver

    program.import_paddle()  # as the roles import it (legacy IR), before Fleet's modules
    from paddle.distributed.fleet.proto import the_one_ps_pb2
    from paddle.distributed.ps import the_one_ps

    class Builder:  # Fleet's PsDescBuilder: builds self.ps_desc, returns it as text
        def __init__(self) -> None:
            self.ps_desc = the_one_ps_pb2.PSParameter()

        def build_server_desc(self) -> str:
            self.ps_desc.server_param.downpour_server_param.downpour_table_param.add()
            return "unedited"

        def build_worker_desc(self) -> str:
            return "unedited"

    monkeypatch.setattr(the_one_ps, "PsDescBuilder", Builder)
    for _ in range(2):
        pserver.plain_table_dumps()
        program.edit_ps_desc("build_worker_desc", program._client_flags)
    server = Builder()
    server.build_server_desc()
    tables = server.ps_desc.server_param.downpour_server_param.downpour_table_param
    assert [t.compress_in_save for t in tables] == [False]
    assert "compress_in_save: false" in Builder().build_server_desc()
    assert len(Builder.build_server_desc.ectl_ps_edits) == 1
    worker = Builder()
    text = worker.build_worker_desc()
    assert worker.ps_desc.init_gflags == program.PS_CLIENT_GFLAGS
    assert "-pserver_push_sparse_merge_limit=0" in text
    # Paddle's own defaults for an empty init_gflags are kept
    assert "-max_body_size=314217728" in worker.ps_desc.init_gflags
    # a real TableParameter defaults to compressed dumps: the edit is what turns it off
    assert the_one_ps_pb2.TableParameter().compress_in_save is True
