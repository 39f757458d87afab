"""Driving a release of the chart on the one-node cluster the way a user does, through
`ectl` (tests/e2e/test_preemption.py; tests/e2e/test_release.py uses its runner and
environment and does the release steps inline).

Data hours are generated with fixed options and a seed, so `local_copy` writes the same
bytes as `upload_hours` uploaded; `expected_samples` counts what the job must train once
each (every line minus the held-out ones, by the trainers' own rule).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import REPO

ECTL = [sys.executable, "-m", "elasticctr.cli.main"]


def kube_env(kube_cluster) -> dict:
    env = dict(os.environ, KUBECONFIG=str(kube_cluster.kubeconfig))
    env["PATH"] = f"{REPO / '.tools' / 'bin'}:{env['PATH']}"
    env.pop("ELASTICCTR_RELEASE", None)
    env.pop("ELASTICCTR_NAMESPACE", None)
    return env


def run_ectl(
    kube_cluster,
    namespace: str,
    *args: str,
    timeout: float = 300,
    env: dict | None = None,
    check: bool = True,
):
    """`ectl ARGS` against the cluster; a failure fails the test with the namespace's
    diagnostics."""
    proc = subprocess.run(
        [*ECTL, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**kube_env(kube_cluster), **(env or {})},
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"ectl {' '.join(args)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n"
            f"{proc.stderr[-3000:]}\n{kube_cluster.diagnostics(namespace)}",
            pytrace=False,
        )
    return proc


def core_api(kube_cluster):
    from kubernetes import client

    return client.CoreV1Api(kube_cluster.api())


def fileserver_token(kube_cluster, release: str, namespace: str) -> str:
    secret = core_api(kube_cluster).read_namespaced_secret(f"{release}-fileserver", namespace)
    return base64.b64decode(secret.data["token"]).decode()


def generate_args(start: str, hours: int, lines: int, files: int, seed: int,
                  options: tuple[str, ...] = ()) -> list[str]:  # fmt: skip
    """`ectl data generate` arguments; `options` are further generator options (e.g.
    `("--slots", "0-7", "--vocab", "100")`)."""
    return ["--start", start, "--hours", str(hours), "--lines", str(lines),
            "--files", str(files), "--seed", str(seed), *options]  # fmt: skip


def upload_hours(kube_cluster, release: str, namespace: str, start: str, hours: int,
                 lines: int, files: int, seed: int,
                 options: tuple[str, ...] = ()) -> None:  # fmt: skip
    """Generate hours with a fixed seed and upload them to the release's fileserver through
    `ectl port-forward` (partitions + donefiles)."""
    run_ectl(
        kube_cluster, namespace,
        "port-forward", "fileserver", "-R", release, "-n", namespace, "--",
        *ECTL, "data", "generate", "{url}/data",
        *generate_args(start, hours, lines, files, seed, options),
        env={"ELASTICCTR_FILESERVER_TOKEN": fileserver_token(kube_cluster, release, namespace)},
        timeout=600,
    )  # fmt: skip


def local_copy(out: Path, start: str, hours: int, lines: int, files: int, seed: int,
               options: tuple[str, ...] = ()) -> Path:  # fmt: skip
    """The same bytes as `upload_hours` wrote (same generator options and seed), locally."""
    args = generate_args(start, hours, lines, files, seed, options)
    subprocess.run(
        [*ECTL, "data", "generate", f"file://{out}", *args],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return out


def expected_samples(
    roots: list[Path], sparse_dim: int, tmp_path: Path, slots: list[int] | None = None
) -> int:
    """Samples a job must train once each: every line of every hour under `roots` minus the
    held-out ones (elasticctr.train.elastic.heldout_mask, the trainers' own rule).
    `sparse_dim` must be the release's: it changes the hashed feasigns the held-out rule
    reads (without it 10,745 were expected where the job rightly trained 10,808); so must
    `slots` (default: the chart's 27)."""
    from elasticctr.train import config
    from elasticctr.train.elastic import _read, heldout_mask

    values = tmp_path / "expected-values.yaml"
    data = {"slots": slots or list(range(27)), "sparseDim": sparse_dim}
    values.write_text(json.dumps({"global": {"data": data}}))
    cfg = config.load(values)
    total = 0
    for root in roots:
        for part in sorted(root.glob("*/*/part-*")):
            for batch in _read(cfg, f"file://{part}"):
                total += len(batch) - int(heldout_mask(batch).sum())
    return total


def status(kube_cluster, release: str, namespace: str, env: dict | None = None) -> dict:
    proc = run_ectl(
        kube_cluster, namespace, "status", "-R", release, "-n", namespace, "-o", "json",
        timeout=120, env=env,
    )  # fmt: skip
    return json.loads(proc.stdout)


def serving_handoff(kube_cluster, namespace: str, release: str) -> dict[str, dict]:
    """Every serving replica's elasticctr_serving_handoff_seconds, through the API
    server's pod proxy, summed over replicas and scenarios: since -> {"count", "sum",
    "p50"} (p50 interpolated in its bucket, as PromQL's histogram_quantile does)."""
    from elasticctr.cli.status import _pod_proxy_get

    core = core_api(kube_cluster)
    pods = core.list_namespaced_pod(
        namespace,
        label_selector=f"app.kubernetes.io/instance={release},app.kubernetes.io/component=serving",
    ).items
    return handoff_of([str(_pod_proxy_get(core, namespace, p, "/metrics")) for p in pods])


def handoff_of(texts: list[str]) -> dict[str, dict]:
    """`serving_handoff` of the /metrics texts of the replicas."""
    import re

    buckets: dict[str, dict[float, float]] = {}
    totals: dict[str, dict[str, float]] = {}
    series = re.compile(r"^elasticctr_serving_handoff_seconds_(bucket|count|sum)\{(.*)\} (\S+)$")
    for text in texts:
        for line in text.splitlines():
            m = series.match(line)
            if not m:
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            since, value = labels["since"], float(m.group(3))
            if m.group(1) == "bucket":
                le = float("inf") if labels["le"] == "+Inf" else float(labels["le"])
                buckets.setdefault(since, {})[le] = buckets.get(since, {}).get(le, 0.0) + value
            else:
                t = totals.setdefault(since, {"count": 0.0, "sum": 0.0})
                t[m.group(1)] += value
    out = {}
    for since, t in totals.items():
        edges = sorted(buckets[since].items())
        rank, lower, below, p50 = t["count"] / 2, 0.0, 0.0, float("nan")
        for le, cumulative in edges:
            if cumulative >= rank and cumulative > below:
                upper = le if le != float("inf") else lower
                p50 = lower + (upper - lower) * (rank - below) / (cumulative - below)
                break
            lower, below = le, cumulative
        out[since] = {**t, "p50": p50}
    return out


def exported(kube_cluster, release: str, namespace: str) -> set[str]:
    coordinator = status(kube_cluster, release, namespace).get("coordinator") or {}
    return {p["partition"] for p in coordinator.get("partitions", []) if p.get("exported")}


def local_predictions(
    kube_cluster, namespace: str, release: str, store_path: str, version: str,
    samples: Path, tmp_path: Path, store_url: str | None = None, env: dict | None = None,
) -> list[float]:  # fmt: skip
    """Probabilities of `samples` from a local `ectl serve --version VERSION`: what the
    deployed serving must answer. It reads `store_url` when given (an HDFS or S3 store the
    host reaches; `env` carries its credentials), else the release's fileserver store at
    `store_path` (`models`, or `models/scenarios/NAME` for a scenario) through `ectl
    port-forward`."""
    import httpx
    from tests.e2e.conftest import wait_until

    from elasticctr.net import free_port

    env = {**kube_env(kube_cluster), **(env or {})}
    serve_port = free_port()
    procs = []
    try:
        if store_url is None:
            env["ELASTICCTR_FILESERVER_TOKEN"] = fileserver_token(kube_cluster, release, namespace)
            fs_port = free_port()
            procs.append(subprocess.Popen(
                [*ECTL, "port-forward", "fileserver", "-R", release, "-n", namespace,
                 "-p", str(fs_port)],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))  # fmt: skip
            wait_until(
                "the fileserver port-forward",
                lambda: httpx.get(f"http://127.0.0.1:{fs_port}/healthz", timeout=5).status_code
                == 200,
                120, kube_cluster, namespace,
            )  # fmt: skip
            store_url = f"http://127.0.0.1:{fs_port}/{store_path}"
        procs.append(subprocess.Popen(
            [*ECTL, "serve", "--store", store_url, "--version", version, "--port",
             str(serve_port), "--poll-interval", "2", "--cache", str(tmp_path / "cache")],
            env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "serve.log", "w"),
        ))  # fmt: skip
        url = f"http://127.0.0.1:{serve_port}"

        def answered():
            proc = subprocess.run(
                [*ECTL, "predict", str(samples), "--url", url],
                capture_output=True, text=True, timeout=120, env=env,
            )  # fmt: skip
            return proc if proc.returncode == 0 else None

        run = wait_until("local ectl serve", answered, 300, kube_cluster, namespace)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)
    assert f"version={version}" in run.stderr, run.stderr
    return [float(x) for x in run.stdout.split()]


def s3_secret(kube_cluster, namespace: str, s3, name: str) -> None:
    """Secret `name` with the S3 server's credentials (global.s3.existingSecret), as a user
    creates it before installing."""
    from kubernetes import client

    core_api(kube_cluster).create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name=name),
            string_data={
                "AWS_ACCESS_KEY_ID": s3.access_key,
                "AWS_SECRET_ACCESS_KEY": s3.secret_key,
            },
        ),
    )
