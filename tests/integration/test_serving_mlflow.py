"""The MLflow pyfunc of a version predicts what `ectl serve` predicts (to 1e-5)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from serving_helpers import ServeProc
from test_serving import SLOTS, V1
from tests.conftest import shared_path

pytestmark = pytest.mark.integration


def test_pyfunc_matches_the_service(tmp_path):
    import mlflow
    import pandas as pd

    from elasticctr.serving.pyfunc import log_version
    from elasticctr.serving.testing import keys_of_file, write_version

    demo = shared_path("data", "elasticctr", "serving_demo_data.txt")
    store = tmp_path / "store"
    vdir = write_version(store, V1, slots=SLOTS, dim=8, keys=keys_of_file(demo, SLOTS), seed=5)
    uri = log_version(vdir, V1, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                      registered_model_name="ctr-test")  # fmt: skip
    run = mlflow.get_run(uri.split("/")[1])
    assert run.data.tags["elasticctr.version"] == V1
    model = mlflow.pyfunc.load_model(uri)
    lines = demo.read_text().splitlines()
    from_pyfunc = np.asarray(model.predict(pd.DataFrame({"line": lines})))

    proc = ServeProc(["--store", str(store), "--poll-interval", "0",
                      "--cache", str(tmp_path / "cache")], tmp_path / "serve.log")  # fmt: skip
    try:
        proc.wait_ready()
        r = httpx.post(proc.url + "/v1/predict", content="\n".join(lines),
                       headers={"Content-Type": "text/plain"})  # fmt: skip
        assert r.status_code == 200, r.text
        from_service = np.asarray(r.json()["probabilities"])
    finally:
        proc.stop()
    assert from_pyfunc.shape == from_service.shape == (100,)
    np.testing.assert_allclose(from_pyfunc, from_service, atol=1e-5, rtol=0)
    # bad lines are refused with the parser's message, not a crash
    from elasticctr.errors import ValidationError

    with pytest.raises(ValidationError, match="click 3 > show 1"):
        model.predict(pd.DataFrame({"line": ["1 3 5:0"]}))
