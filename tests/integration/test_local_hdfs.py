"""`ectl local up | status | down` from a values file whose data lives on a real HDFS
(MiniDFSCluster): services as processes, Paddle PS training reads hdfs://, cube and
serving switch to the newest version, and `down` leaves no process behind."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def ectl(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_local_deployment_trains_from_hdfs_and_serves(hdfs_dir, tmp_path):
    data = f"{hdfs_dir}/ctr"
    gen = ectl("data", "generate", data, "--hours", "3", "--lines", "3000", "--slots", "6",
               "--vocab", "300")  # fmt: skip
    assert gen.returncode == 0, gen.stderr
    values = {
        "global": {
            "data": {
                "path": data,
                "startDateHour": "20200401/00",
                "endDateHour": "20200401/01",
                "slots": list(range(6)),
            }
        },
        "trainer": {"model": {"name": "dnn", "embeddingDim": 8, "hiddenUnits": [16]}},
        "cube": {"shards": 1},
    }
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    workdir = tmp_path / "local"
    up = ectl("local", "up", "-f", str(values_file), "--workdir", str(workdir),
              "-p", "1", "-t", "1")  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr + (workdir / "supervisor.log").read_text()
        status = ectl("local", "status", "--workdir", str(workdir), "-o", "json")
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        assert all(p["alive"] for p in state["processes"]), state["processes"]
        serving = state["endpoints"]["serving"]
        deadline, version = time.monotonic() + 420, None
        while time.monotonic() < deadline:
            try:
                version = httpx.get(f"{serving}/v1/version", timeout=5).json().get("version")
            except (httpx.HTTPError, ValueError):
                version = None
            if version == "20200401/01":
                break
            time.sleep(2)
        assert version == "20200401/01", (workdir / "supervisor.log").read_text()[-3000:]
        resp = httpx.post(
            f"{serving}/v1/predict",
            content=b"1 0 5:0 7:1 9:2\n",
            headers={"Content-Type": "text/plain"},
            timeout=10,
        )
        assert resp.status_code == 200 and resp.json()["version"] == "20200401/01"
    finally:
        down = ectl("local", "down", "--workdir", str(workdir))
    assert down.returncode == 0, down.stderr
    leftover = subprocess.run(["pgrep", "-f", str(workdir)], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""
    assert ectl("local", "status", "--workdir", str(workdir)).returncode == 1
