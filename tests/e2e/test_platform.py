"""One platform, several scenarios, on the one-node cluster, the way a user runs them.

A platform release (fileserver, MLflow, two cube shards, cube-transfer, serving; no
training job of its own) is installed from the published chart; two scenarios with other
slot configs and models are added with `ectl scenario add` (each a small release: its
coordinator, one 0.25-CPU pserver and an elastic trainer); their hours are uploaded to the
platform's fileserver under data/scenarios/<name>; both train, publish into
models/scenarios/<name>, get their own cube tables and are served by the one serving
Deployment at /v1/scenarios/<name>/predict. Predictions equal a local `ectl serve` of the
same version; every sample is trained once. Bad `scenario add` inputs install nothing.
Removing one scenario drops it from cube and serving while the other keeps serving.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from tests.conftest import REPO
from tests.e2e import releases
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.timeout(1800)

NS = "e2e-platform"
PLATFORM = "plat"
ECTL = releases.ECTL
HOURS = ["20200401/00", "20200401/01"]
LINES = 3000
SCENARIOS = {
    # name: (slots, generator options, model values)
    "coupon": ([*range(8)], ("--slots", "0-7", "--vocab", "200"), {"name": "lr"}),
    "feed": (
        [*range(13)],
        ("--slots", "0-12", "--vocab", "200"),
        {"name": "dnn", "embeddingDim": 8, "hiddenUnits": [16], "batchSize": 256},
    ),
}
SEEDS = {"coupon": 21, "feed": 22}
TEAMS = {"coupon": "growth", "feed": "content"}


def ectl(kube_cluster, *args: str, timeout: float = 300, env: dict | None = None, check=True):
    return releases.run_ectl(kube_cluster, NS, *args, timeout=timeout, env=env, check=check)


@pytest.fixture(scope="module")
def platform(kube_cluster, published, tmp_path_factory):
    """The installed platform; it and every scenario are uninstalled at the end."""
    tmp = tmp_path_factory.mktemp("platform")
    values = tmp / "platform.yaml"
    values.write_text(
        json.dumps(
            {
                "trainer": {"enabled": False},
                "cube": {"capacityMiB": 256},
                # One queue per team, each guaranteed its scenario's reserved part.
                "teams": {
                    "growth": {"guarantee": {"cpu": "400m", "memory": "1Gi"}},
                    "content": {"guarantee": {"cpu": "400m", "memory": "1Gi"}},
                },
                "tests": {"enabled": False},
            }
        )
    )
    t0 = time.monotonic()
    ectl(
        kube_cluster,
        "install", "--chart", published["chart"], "-f", str(REPO / "values" / "demo.yaml"),
        "-f", str(values), "-R", PLATFORM, "-n", NS, "--create-namespace", "--wait",
        "--timeout", "10m",
        timeout=900,
    )  # fmt: skip
    state = {"chart": published["chart"], "tmp": tmp, "install_s": time.monotonic() - t0}
    yield state
    for name in [*SCENARIOS, PLATFORM]:
        ectl(kube_cluster, "uninstall", "-R", name, "-n", NS, "--yes", check=False, timeout=300)


def scenario_values(tmp: Path, name: str) -> Path:
    slots, _, model = SCENARIOS[name]
    path = tmp / f"{name}.yaml"
    path.write_text(
        json.dumps(
            {
                "global": {
                    "data": {"slots": slots, "startDateHour": HOURS[0], "endDateHour": ""},
                    "scenario": {"team": TEAMS[name], "cubeMemoryMiB": 64},
                },
                "trainer": {
                    "model": model,
                    "coordinator": {
                        "pollSeconds": 5,
                        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"},
                                      "limits": {"cpu": "500m", "memory": "256Mi"}},
                    },
                    "pserver": {
                        "replicas": 1,
                        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"},
                                      "limits": {"cpu": "1", "memory": "1Gi"}},
                    },
                    "trainer": {
                        "replicas": 1, "minReplicas": 1,
                        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"},
                                      "limits": {"cpu": "1", "memory": "1Gi"}},
                    },
                    "staging": {"size": "1Gi"},
                    "volcano": {"queue": TEAMS[name]},
                },
            }
        )
    )  # fmt: skip
    return path


def scenario_list(kube_cluster) -> dict[str, dict]:
    proc = ectl(kube_cluster, "scenario", "list", "-P", PLATFORM, "-n", NS, "-o", "json")
    return {row["name"]: row for row in json.loads(proc.stdout)}


def installed(kube_cluster) -> set[str]:
    proc = subprocess.run(
        ["helm", "list", "-n", NS, "-q", "--kubeconfig", str(kube_cluster.kubeconfig)],
        capture_output=True, text=True, timeout=60, env=releases.kube_env(kube_cluster),
    )  # fmt: skip
    return set(proc.stdout.split())


def test_bad_scenarios_are_refused_and_install_nothing(kube_cluster, platform):
    tmp, chart = platform["tmp"], platform["chart"]
    values = scenario_values(tmp, "coupon")
    cases = [
        (["Bad_Name"], "is not a valid scenario name"),
        (["coupon", "-P", "nosuch"], "no release nosuch"),
        (["coupon", "--set", "trainer.volcano.queue=nosuch"],
         "Volcano queue 'nosuch' does not exist"),
        (["coupon", "--set", "global.scenario.cubeMemoryMiB=300"],
         "global.scenario.cubeMemoryMiB: 300 MiB does not fit the platform's cube"),
        (["coupon", "--set", "fileserver.enabled=true"],
         "a scenario release runs only its training job"),
    ]  # fmt: skip
    for args, message in cases:
        name, *rest = args
        rest = rest if "-P" in rest else [*rest, "-P", PLATFORM]
        proc = ectl(
            kube_cluster, "scenario", "add", name, "-f", str(values), "--chart", chart,
            "-n", NS, *rest, check=False,
        )  # fmt: skip
        assert proc.returncode != 0, (args, proc.stdout)
        assert message in proc.stderr, (message, proc.stderr[-2000:])
    assert installed(kube_cluster) == {PLATFORM}


def test_scenarios_train_publish_and_are_served_by_one_platform(kube_cluster, platform, tmp_path):
    tmp, chart = platform["tmp"], platform["chart"]
    t0 = time.monotonic()
    for name in SCENARIOS:
        ectl(
            kube_cluster, "scenario", "add", name, "-f", str(scenario_values(tmp, name)),
            "-P", PLATFORM, "-n", NS, "--chart", chart, "--wait", "--timeout", "8m",
            timeout=600,
        )  # fmt: skip
    platform["added_s"] = time.monotonic() - t0
    token = releases.fileserver_token(kube_cluster, PLATFORM, NS)
    for name, (_, options, _) in SCENARIOS.items():
        ectl(
            kube_cluster,
            "port-forward", "fileserver", "-R", PLATFORM, "-n", NS, "--",
            *ECTL, "data", "generate", f"{{url}}/data/scenarios/{name}",
            *releases.generate_args(HOURS[0], len(HOURS), LINES, 2, SEEDS[name], options),
            env={"ELASTICCTR_FILESERVER_TOKEN": token}, timeout=600,
        )  # fmt: skip
    t_data = time.monotonic()

    def all_served():
        rows = scenario_list(kube_cluster)
        return all(rows.get(n, {}).get("served") == HOURS[-1] for n in SCENARIOS) and rows

    rows = wait_until("both scenarios served", all_served, 900, kube_cluster, NS)
    platform["data_to_served_s"] = time.monotonic() - t_data
    print(
        f"\nplatform install {platform['install_s']:.0f} s, two scenarios added "
        f"{platform['added_s']:.0f} s, data -> both served {platform['data_to_served_s']:.0f} s"
    )
    assert rows["coupon"]["team"] == "growth" and rows["coupon"]["model"] == "lr"
    assert rows["coupon"]["queue"] == "growth" and rows["feed"]["queue"] == "content"
    assert rows["feed"]["model"] == "dnn" and rows["feed"]["trainers"].startswith("1/1/1")
    table = ectl(kube_cluster, "scenario", "list", "-P", PLATFORM, "-n", NS,
                 env={"COLUMNS": "200"}).stdout  # fmt: skip
    assert "coupon" in table and "feed" in table and HOURS[-1] in table, table

    # Every sample trained once, per scenario (the coordinator's own count).
    for name, (slots, options, _) in SCENARIOS.items():
        local = releases.local_copy(
            tmp_path / f"data-{name}", HOURS[0], len(HOURS), LINES, 2, SEEDS[name], options
        )
        want = releases.expected_samples([local], 1000001, tmp_path, slots)
        s = releases.status(kube_cluster, name, NS)
        assert s["coordinator"]["samples"] == want, (name, s["coordinator"])
        platform[f"local-{name}"] = local

    # One serving process answers both, each with its own version and model; the answers
    # equal a local `ectl serve` of coupon's version read from the platform's store.
    samples = {}
    for name in SCENARIOS:
        part = next(iter(sorted((platform[f"local-{name}"] / HOURS[-1]).glob("part-*"))))
        samples[name] = tmp_path / f"{name}.txt"
        samples[name].write_text("".join(part.read_text().splitlines(True)[:200]))
    deployed = {}
    for name in SCENARIOS:
        proc = ectl(
            kube_cluster, "port-forward", "serving", "-R", PLATFORM, "-n", NS, "--",
            *ECTL, "predict", str(samples[name]), "--scenario", name,
        )  # fmt: skip
        assert f"version={HOURS[-1]}" in proc.stderr, proc.stderr
        deployed[name] = [float(x) for x in proc.stdout.split()]
        assert len(deployed[name]) == 200
    local = releases.local_predictions(
        kube_cluster,
        NS,
        PLATFORM,
        "models/scenarios/coupon",
        HOURS[-1],
        samples["coupon"],
        tmp_path,
    )
    assert max(abs(a - b) for a, b in zip(deployed["coupon"], local, strict=True)) <= 2e-6


def test_removing_a_scenario_leaves_the_other_served(kube_cluster, platform, tmp_path):
    ectl(kube_cluster, "scenario", "remove", "feed", "-P", PLATFORM, "-n", NS, "--yes")
    wait_until(
        "feed gone from the platform", lambda: "feed" not in scenario_list(kube_cluster), 120,
        kube_cluster, NS,
    )  # fmt: skip
    samples = tmp_path / "coupon.txt"
    part = next(iter(sorted((platform["local-coupon"] / HOURS[-1]).glob("part-*"))))
    samples.write_text("".join(part.read_text().splitlines(True)[:50]))

    def feed_unknown():
        proc = ectl(
            kube_cluster, "port-forward", "serving", "-R", PLATFORM, "-n", NS, "--",
            *ECTL, "predict", str(samples), "--scenario", "feed", check=False,
        )  # fmt: skip
        return (
            proc.returncode != 0
            and "unknown_scenario" in proc.stderr + proc.stdout
            or ("no scenario 'feed'" in proc.stderr)
        )

    wait_until("serving forgets feed", feed_unknown, 180, kube_cluster, NS)
    proc = ectl(
        kube_cluster, "port-forward", "serving", "-R", PLATFORM, "-n", NS, "--",
        *ECTL, "predict", str(samples), "--scenario", "coupon",
    )  # fmt: skip
    assert f"version={HOURS[-1]}" in proc.stderr
    assert installed(kube_cluster) == {PLATFORM, "coupon"}
