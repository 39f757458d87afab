"""Checkpoint + --resume: a second job restores the pservers from the first job's checkpoint.

Job A trains hour 00 and checkpoints. Job B (`--resume`, hours 00..01) must skip hour 00,
load the checkpoint into fresh pservers and train hour 01 on just 2 samples, so its
exported version is (almost) the checkpointed state: nearly every sparse row of version
00 reappears unchanged in version 01. Without the restore, version 01 would hold only
the handful of feasigns of those 2 samples.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from _static_roles import launch

from elasticctr.train.roles import read_checkpoint
from elasticctr.versions import verify_version

pytestmark = pytest.mark.integration


def _load_sparse(version: Path) -> tuple[np.ndarray, np.ndarray]:
    keys = np.concatenate([np.load(p) for p in sorted(version.glob("sparse/*.keys.npy"))])
    values = np.concatenate([np.load(p) for p in sorted(version.glob("sparse/*.values.npy"))])
    return keys, values


@pytest.mark.slow
def test_resume_restores_pservers_and_skips_done_partitions(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "global": {"data": {"slots": [0, 1, 2, 3]}, "modelStore": str(tmp_path / "store")},
                "trainer": {"model": {"name": "dnn", "batchSize": 256}},
            }
        )
    )
    ckpt = tmp_path / "checkpoint"
    common = ["--checkpoint-dir", str(ckpt), "--results", str(tmp_path / "results.jsonl")]
    launch(
        values,
        pservers=1,
        trainers=2,
        log_dir=tmp_path / "logs-a",
        extra_trainer_args=["--synthetic-samples", "20000", *common],
        timeout=300,
        echo=lambda _m: None,
    )
    assert read_checkpoint(ckpt)["version"] == "20200401/00"

    launch(
        values,
        pservers=1,
        trainers=2,
        log_dir=tmp_path / "logs-b",
        extra_trainer_args=[
            "--synthetic-samples",
            "2",
            "--synthetic-partitions",
            "2",
            "--resume",
            *common,
        ],
        timeout=300,
        echo=lambda _m: None,
    )
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["version"] for r in rows] == ["20200401/00", "20200401/01"]  # 00 not retrained
    assert rows[1]["samples"] == 2
    assert read_checkpoint(ckpt)["version"] == "20200401/01"
    log_b = (tmp_path / "logs-b" / "trainer-0.log").read_text()
    assert "resumed from checkpoint 20200401/00" in log_b

    store = tmp_path / "store" / "versions" / "20200401"
    verify_version(store / "00")
    verify_version(store / "01")
    k0, v0 = _load_sparse(store / "00")
    k1, v1 = _load_sparse(store / "01")
    assert k0.size > 1000
    common_keys, i0, i1 = np.intersect1d(k0, k1, return_indices=True)
    assert common_keys.size == k0.size  # every restored row is there
    same = np.all(np.abs(v0[i0] - v1[i1]) < 1e-6, axis=1)
    assert same.mean() > 0.98, same.mean()  # only the 2 new samples' feasigns moved
