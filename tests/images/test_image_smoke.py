"""One real job per image, run inside containers of the built images (docs/images.md):
the fileserver serves and stores files, a cube shard loads a version and answers lookups,
serving predicts from a version it downloads from the fileserver container over http://
(fsspec + aiohttp inside the image), and an elastic trainer leases byte ranges of an hour
read over http:// from a coordinator container and trains them against a pserver container
(the chart's Volcano Job: coordinator, pserver and trainer tasks). Containers talk over a
Docker network of their own; the test reaches them on published loopback ports. The
MLflow image keeps runs in a real PostgreSQL (the production preset's backend store)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml
from image_helpers import REPO, Docker
from tests.conftest import shared_path

pytestmark = [pytest.mark.images, pytest.mark.integration]

sys.path.insert(0, str(REPO / "tests" / "integration"))
TOKEN = "image-smoke-token"


def _name(what: str) -> str:
    return f"ectl-test-{what}-{uuid.uuid4().hex[:8]}"


def _fileserver(docker: Docker, image: str, root: Path, network: str | None = None) -> str:
    """A fileserver container serving `root` with a write token; returns its name."""
    token = root.parent / "fileserver.token"
    token.write_text(TOKEN)
    token.chmod(0o644)
    name = _name("fs")
    net = ("--network", network, "--network-alias", "fs") if network else ()
    docker.start(
        image, "fileserver", "--root", "/srv", "--host", "0.0.0.0", "--port", "8080",
        "--token-file", "/run/fileserver/token",
        name=name,
        options=("-v", f"{root}:/srv", "-v", f"{token}:/run/fileserver/token:ro",
                 "-p", "127.0.0.1::8080", "--read-only", "--tmpfs", "/tmp", *net),
    )  # fmt: skip
    docker.wait_http(name, f"http://{docker.published(name, 8080)}/healthz")
    return name


def test_fileserver_serves_and_stores_files(docker, images, scratch):
    root = scratch / "srv"
    (root / "data").mkdir(parents=True)
    (root / "data" / "hello.txt").write_text("hello from the host\n")
    root.chmod(0o777)  # the container's user (10001) stores uploads here
    name = _fileserver(docker, images["fileserver"], root)
    base = f"http://{docker.published(name, 8080)}"
    r = httpx.get(f"{base}/data/hello.txt")
    assert r.status_code == 200 and r.text == "hello from the host\n"
    assert httpx.get(f"{base}/data/hello.txt", headers={"Range": "bytes=0-4"}).text == "hello"
    assert httpx.put(f"{base}/models/x.bin", content=b"\x00\x01").status_code == 401
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.put(f"{base}/models/x.bin", content=b"\x00\x01\x02", headers=auth)
    assert r.status_code in (200, 201), r.text
    # Written by uid 10001 inside the container, onto the host directory.
    stored = root / "models" / "x.bin"
    assert stored.read_bytes() == b"\x00\x01\x02" and stored.stat().st_uid == 10001
    # /metrics through prometheus_client (a core dependency: this image has only core).
    metrics = httpx.get(f"{base}/metrics")
    assert metrics.status_code == 200, metrics.text
    lines = dict(
        line.split(" ", 1) for line in metrics.text.splitlines() if not line.startswith("#")
    )
    assert float(lines["elasticctr_fileserver_stored_files_total"]) == 1
    assert float(lines["elasticctr_fileserver_stored_bytes_total"]) == 3
    assert float(lines["elasticctr_fileserver_unauthorized_total"]) == 1


def test_cube_shard_loads_a_version_and_answers_lookups(docker, images, scratch):
    check_cube_shard(docker, images["cube"], scratch)


def check_cube_shard(docker: Docker, image: str, scratch: Path, options: tuple[str, ...] = ()):
    """A cube container (`options`: more `docker run` flags, e.g. --platform) loads a
    version built on this host, commits it and answers lookups with its rows."""
    from _cube_procs import make_version, random_keys, version_rows

    from elasticctr.cube.builder import build_version
    from elasticctr.cube.client import ShardClient
    from elasticctr.cube.modelstore import verify_version

    version, keys = "20200401/00", random_keys(2000, seed=5)
    store, cube_root = scratch / "store", scratch / "cube"
    build_version(verify_version(make_version(store, version, keys, tag=7), version), cube_root, 1)
    name = _name("cube")
    docker.start(
        image, "cube", "server", "--cube-root", "/cube", "--state-dir", "/tmp/state",
        "--shard", "0", "--num-shards", "1", "--host", "0.0.0.0", "--port", "8500",
        name=name,
        options=("-v", f"{cube_root}:/cube:ro", "-p", "127.0.0.1::8500", "--read-only",
                 "--tmpfs", "/tmp", "-e", "ELASTICCTR_CUBE_ADMIN_TOKEN=admin-secret", *options),
    )  # fmt: skip
    url = f"http://{docker.published(name, 8500)}"
    docker.wait_http(name, f"{url}/healthz")
    shard = ShardClient(url, token="admin-secret")
    try:
        with pytest.raises(Exception, match="401"):
            ShardClient(url, token="wrong").load(version)
        shard.load(version)
        shard.commit(version)
        assert httpx.get(f"{url}/readyz").json()["version"] == version
        query = np.concatenate([keys[:500], np.array([1, 2, 3], np.uint64)])
        found = shard.lookup(query, version)
    finally:
        shard.close()
    assert found.version == version and found.missing == 3
    np.testing.assert_array_equal(found.rows[:500], version_rows(keys[:500], 7))
    np.testing.assert_array_equal(found.rows[500:], 0)


def test_serving_predicts_from_a_version_on_the_fileserver(docker, images, scratch):
    from test_serving import SLOTS, expected

    from elasticctr.serving.testing import keys_of_file, write_version

    demo = shared_path("data", "elasticctr", "serving_demo_data.txt")
    version = "20261130/00"
    root = scratch / "srv"
    store = root / "models"
    write_version(store, version, slots=SLOTS, dim=8, keys=keys_of_file(demo, SLOTS), seed=1)
    network = docker.network(_name("net"))
    _fileserver(docker, images["fileserver"], root, network)
    name = _name("serving")
    docker.start(
        images["serving"], "serve", "--store", "http://fs:8080/models", "--version", version,
        "--host", "0.0.0.0", "--port", "8600", "--poll-interval", "0", "--cache", "/tmp/cache",
        name=name,
        options=("--network", network, "--network-alias", "serving", "-p", "127.0.0.1::8600",
                 "--read-only", "--tmpfs", "/tmp", "-e", "GLOG_minloglevel=2"),
    )  # fmt: skip
    url = f"http://{docker.published(name, 8600)}"
    docker.wait_http(name, f"{url}/readyz", timeout=180)
    lines = demo.read_bytes().splitlines(keepends=True)[:50]
    r = httpx.post(f"{url}/v1/predict", content=b"".join(lines),
                   headers={"Content-Type": "text/plain"}, timeout=60)  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["version"] == version
    want = expected(store, version, b"".join(lines))
    np.testing.assert_allclose(np.array(body["probabilities"]), want, atol=1e-6)
    # The image's own client (`ectl predict`) against the serving container.
    sample = scratch / "lines.txt"
    sample.write_bytes(b"".join(lines[:10]))
    sample.chmod(0o644)
    done = docker.run(
        images["serving"], "predict", "--url", "http://serving:8600", "/in/lines.txt",
        options=("--network", network, "-v", f"{sample}:/in/lines.txt:ro"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = [float(x) for x in done.stdout.split()]  # one probability a line, 6 decimals
    np.testing.assert_allclose(printed, want[:10], atol=2e-6)
    assert f"samples=10 version={version}" in done.stderr


def test_elastic_trainer_trains_with_coordinator_and_pserver_containers(docker, images, scratch):
    """The training image's three roles as the chart runs them (templates of
    charts/elasticctr/charts/trainer: `ectl coordinator ... --from-checkpoint`, `ectl train
    pserver`, `ectl train trainer` finding the coordinator through VC_COORDINATOR_HOSTS and
    ELASTICCTR_COORDINATOR_PORT, every Paddle role with ELASTICCTR_TRAIN_ELASTIC=1): the
    trainer leases the hour's byte ranges, trains them, exports the version, writes the
    checkpoint and exits 0 once the coordinator says the job is finished."""
    from elasticctr.versions import verify_version

    root = scratch / "srv"
    root.mkdir()
    subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", "data", "generate", f"file://{root}/data",
         "--hours", "1", "--lines", "600", "--files", "2", "--slots", "0-3", "--seed", "4",
         "--vocab", "200"],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    work = scratch / "work"
    (work / "store").mkdir(parents=True)
    (work / "staging").mkdir()
    for d in (work, work / "store", work / "staging"):
        d.chmod(0o777)
    values = work / "values.yaml"
    values.write_text(yaml.safe_dump({
        "global": {
            "data": {"path": "http://fs:8080/data", "slots": [0, 1, 2, 3],
                     "startDateHour": "20200401/00", "endDateHour": "20200401/00"},
            "modelStore": "file:///work/store",
        },
        "trainer": {"model": {"name": "dnn", "batchSize": 64}},
    }))  # fmt: skip
    values.chmod(0o644)
    network = docker.network(_name("net"))
    _fileserver(docker, images["fileserver"], root, network)
    checkpoint = "/work/staging/checkpoint"
    mounts = ["--network", network, "-v", f"{work}:/work", "--read-only", "--tmpfs", "/tmp"]
    coord = _name("coordinator")
    docker.start(
        images["train"], "coordinator", "-f", "/work/values.yaml", "--host", "0.0.0.0",
        "--port", "8300", "--lease-seconds", "30", "--task-mb", "0.01", "--poll-seconds", "0.5",
        "--checkpoint-every", "1", "--from-checkpoint", checkpoint,
        name=coord,
        options=(*mounts, "--network-alias", "coordinator", "-p", "127.0.0.1::8300"),
    )  # fmt: skip
    progress_url = f"http://{docker.published(coord, 8300)}/v1/progress"
    docker.wait_http(coord, progress_url)
    common = [
        *mounts,
        "-e", "PADDLE_PSERVERS_IP_PORT_LIST=ps0:6170", "-e", "PADDLE_TRAINERS_NUM=1",
        "-e", "ELASTICCTR_TRAIN_STAGING=/work/staging", "-e", "ELASTICCTR_TRAIN_ELASTIC=1",
        "-e", "FLAGS_enable_pir_api=0", "-e", "GLOG_minloglevel=2",
    ]  # fmt: skip
    ps = _name("ps0")
    docker.start(
        images["train"], "train", "pserver", "-f", "/work/values.yaml",
        name=ps,
        options=(*common, "--network-alias", "ps0", "--hostname", "ps0",
                 "-e", "TRAINING_ROLE=PSERVER", "-e", "PADDLE_PORT=6170", "-e", "POD_IP=ps0"),
    )  # fmt: skip
    done = docker.run(
        images["train"], "train", "trainer", "-f", "/work/values.yaml",
        options=(*common, "--hostname", "trainer0", "-e", "TRAINING_ROLE=TRAINER",
                 "-e", "PADDLE_TRAINER_ID=0", "-e", "PADDLE_PORT=6172", "-e", "POD_IP=trainer0",
                 "-e", "VC_COORDINATOR_HOSTS=coordinator", "-e", "ELASTICCTR_COORDINATOR_PORT=8300",
                 "-e", f"ELASTICCTR_TRAIN_CHECKPOINT={checkpoint}"),
        timeout=600,
    )  # fmt: skip
    logs = (done.stdout[-3000:], done.stderr[-3000:], docker.logs(ps), docker.logs(coord))
    assert done.returncode == 0, logs
    assert "leased task 20200401/00#" in done.stdout, logs
    progress = httpx.get(progress_url, timeout=10).json()
    assert progress["finished"] and progress["tasks_done"] >= 2, progress  # 2 files, 10 KiB tasks
    manifest = verify_version(work / "store" / "versions" / "20200401" / "00")
    assert manifest["version"] == "20200401/00" and manifest["slots"] == [0, 1, 2, 3]
    metrics = manifest["metrics"]
    # 600 lines, ~10% held out (the feature-hash rule); one trainer trained all the rest.
    assert metrics["samples_chief"] == progress["samples"] > 400, (metrics, progress)
    assert (
        metrics["eval_samples"] > 20 and metrics["samples_chief"] + metrics["eval_samples"] == 600
    )
    assert manifest["sparse"]["rows"] > 50
    checkpointed = json.loads(
        (work / "staging" / "checkpoint" / "ps" / "progress.json").read_text()
    )
    assert checkpointed["version"] == "20200401/00", checkpointed


PG_BIN = Path("/usr/lib/postgresql/15/bin")


@pytest.fixture
def postgres(tmp_path):
    """A real PostgreSQL 15 (Debian's postgresql-15, installed with apt when missing) on a
    free loopback port, as the `postgres` user; yields the port."""
    from elasticctr.net import free_port, wait_for_port

    if not (PG_BIN / "initdb").exists():
        done = subprocess.run(
            ["apt-get", "-o", "DPkg::Lock::Timeout=300", "install", "-y",
             "--no-install-recommends", "postgresql-15"],
            capture_output=True, text=True, timeout=900,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    # Not under pytest's tmp_path: its parents are private to root.
    data = Path(tempfile.mkdtemp(prefix="ectl-test-pg-"))
    shutil.chown(data, "postgres", "postgres")
    as_pg = ["runuser", "-u", "postgres", "--"]
    done = subprocess.run(
        [*as_pg, str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "mlflow"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    port = free_port()
    proc = subprocess.Popen(
        [*as_pg, str(PG_BIN / "postgres"), "-D", str(data), "-k", str(data),
         "-h", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "pg.log", "wb"),  # noqa: SIM115
    )  # fmt: skip
    try:
        wait_for_port(
            "127.0.0.1", port, timeout=60, what="postgres", alive=lambda: proc.poll() is None
        )
        import psycopg

        with psycopg.connect(
            f"postgresql://mlflow@127.0.0.1:{port}/postgres", autocommit=True
        ) as c:
            c.execute("CREATE DATABASE mlflow")
        yield port
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data, ignore_errors=True)


@pytest.mark.slow
def test_mlflow_image_keeps_runs_in_postgresql(docker, images, postgres):
    """The production preset's backend store: the elasticctr-mlflow container runs `mlflow
    server` on a PostgreSQL URI (the form the chart documents), creates its schema there and
    stores what a client logs."""
    import mlflow
    import psycopg

    from elasticctr.net import free_port

    uri = f"postgresql://mlflow@127.0.0.1:{postgres}/mlflow"
    port = free_port()
    name = _name("mlflow")
    docker.start(
        images["mlflow"], "server", "--host", "127.0.0.1", "--port", str(port),
        "--backend-store-uri", uri, "--serve-artifacts", "--artifacts-destination",
        "/tmp/artifacts",
        name=name, options=("--network", "host", "--read-only", "--tmpfs", "/tmp"),
    )  # fmt: skip
    docker.wait_http(name, f"http://127.0.0.1:{port}/health", timeout=180)
    client = mlflow.tracking.MlflowClient(tracking_uri=f"http://127.0.0.1:{port}")
    run = client.create_run(client.create_experiment("image-smoke"))
    client.log_metric(run.info.run_id, "auc", 0.7125)
    client.set_terminated(run.info.run_id)
    with psycopg.connect(uri) as conn:
        rows = conn.execute(
            "SELECT m.value, r.status FROM metrics m JOIN runs r ON r.run_uuid = m.run_uuid "
            "WHERE m.key = 'auc'"
        ).fetchall()
    assert rows == [(0.7125, "FINISHED")]
