"""Serving a version written by the training export (real export graph, legacy IR,
`export.build_version` + `publish`) gives the training side's own evaluation numbers."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import numpy as np
import pytest
from serving_helpers import ServeProc
from tests.conftest import shared_path

pytestmark = pytest.mark.integration
VERSION = "20261201/05"

# Runs in a child: Fleet's export graph needs FLAGS_enable_pir_api=0, process-wide.
_EXPORT = r"""
import sys
from pathlib import Path
import numpy as np
import paddle
from elasticctr.data.parser import parse_bytes
from elasticctr.modelstore import open_store
from elasticctr.train import export
from elasticctr.train.models import resolve_spec
from elasticctr.train.program import build_net

store, demo, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
slots = list(range(27))
paddle.enable_static()
spec = resolve_spec({"name": "deepfm", "hiddenUnits": [16], "embeddingDim": 4})
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
    net = build_net(spec, len(slots))
exe = paddle.static.Executor(paddle.CPUPlace())
scope = paddle.static.Scope()
batch, _ = parse_bytes(demo.read_bytes(), slots)
keys = np.unique(np.concatenate(batch.ids))
values = np.random.default_rng(3).normal(0, 0.3, (keys.size, spec.table_dim)).astype("float32")
with paddle.static.scope_guard(scope):
    exe.run(startup)
    dense = out / "dense-src"
    paddle.static.save_inference_model(
        str(dense / "model"), [net.pooled], [net.prob], exe, program=net.infer_program
    )
    meta = {"model": {"name": spec.name, "params": {}}, "slots": slots, "sparse_dim": None,
            "metrics": {}, "dense": {"path": "dense", "prefix": "dense/model",
            "input": net.pooled.name, "input_shape": [-1, len(slots), spec.table_dim],
            "output": net.prob.name}}
    export.build_version(out / "built", version_id=sys.argv[4], dense_dir=dense, keys=keys,
                         values=values, meta=meta, rows_per_part=500)
    open_store(str(store)).publish(out / "built", sys.argv[4])
    # the training side's own evaluation path: export.pool + the saved program
    program, feeds, fetches = paddle.static.load_inference_model(
        str(store / "versions" / sys.argv[4] / "dense" / "model"), exe)
    (prob,) = exe.run(program, feed={feeds[0]: export.pool(keys, values, batch)},
                      fetch_list=fetches)
np.save(out / "ref.npy", np.asarray(prob).reshape(-1))
"""


def test_training_export_is_served_with_the_training_numbers(tmp_path):
    demo = shared_path("data", "elasticctr", "serving_demo_data.txt")
    store = tmp_path / "store"
    env = {**os.environ, "FLAGS_enable_pir_api": "0", "GLOG_minloglevel": "2"}
    run = subprocess.run(
        [sys.executable, "-c", _EXPORT, str(store), str(demo), str(tmp_path), VERSION],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    ref = np.load(tmp_path / "ref.npy")
    assert ref.shape == (100,)
    proc = ServeProc(["--store", str(store), "--poll-interval", "0",
                      "--cache", str(tmp_path / "c")], tmp_path / "serve.log")  # fmt: skip
    try:
        proc.wait_ready()
        info = httpx.get(proc.url + "/v1/version").json()
        assert info["version"] == VERSION and info["model"] == "deepfm"
        assert info["embedding_dim"] == 5  # table_dim: embedding 4 + first-order column
        r = httpx.post(proc.url + "/v1/predict", content=demo.read_bytes(),
                       headers={"Content-Type": "text/plain"})  # fmt: skip
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(r.json()["probabilities"], ref, atol=1e-5, rtol=0)
    finally:
        proc.stop()
