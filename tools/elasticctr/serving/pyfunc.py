"""An exported version as an MLflow pyfunc model: dense model + embeddings in one artifact.

`mlflow models serve` of it answers exactly what `ectl serve` answers for the same version:
both call `elasticctr.serving.model.Scorer` (pool per slot + dense forward), and both
decode ElasticCTR lines with the same parser. Input: a DataFrame with a `line` column (or
a list of lines); output: one probability per line.

    python -m elasticctr.serving.pyfunc STORE VERSION [--tracking-uri URI] [--register NAME]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import mlflow
import numpy as np

from elasticctr import constants as C
from elasticctr.errors import ValidationError

ARTIFACT = "version"
INPUT_COLUMN = "line"


class CTRModel(mlflow.pyfunc.PythonModel):
    """The pyfunc wrapper; the version directory is its one artifact."""

    def load_context(self, context):
        from elasticctr.data.parser import LineParser
        from elasticctr.serving.model import (
            DENSE_DIR,
            DenseModel,
            LocalTable,
            Scorer,
            VersionInfo,
            read_manifest,
            sparse_parts,
        )

        vdir = Path(context.artifacts[ARTIFACT])
        manifest = read_manifest(vdir)
        info = VersionInfo.from_manifest(manifest)
        self.scorer = Scorer(info, DenseModel(vdir / DENSE_DIR, len(info.slots), info.dim))
        self.table = LocalTable.from_parts(sparse_parts(vdir, manifest), info.dim)
        self.parser = LineParser(info.slots, info.sparse_dim)

    def predict(self, context, model_input, params=None):
        from elasticctr.serving.samples import CT_LINES, Limits, RequestError, decode

        lines = _lines(model_input)
        data = "\n".join(lines).encode() + b"\n"
        limits = Limits(max_samples=len(lines) + 1, max_body_bytes=len(data) + 1,
                        max_features=1 << 30)  # fmt: skip
        try:
            batch = decode(data, CT_LINES, self.parser, limits).batch
        except RequestError as exc:
            raise ValidationError(exc.message, exc.problems) from exc
        return self.scorer.predict(batch, self.table.lookup).astype(np.float64)


def _lines(model_input) -> list[str]:
    import pandas as pd

    if isinstance(model_input, pd.DataFrame):
        col = INPUT_COLUMN if INPUT_COLUMN in model_input.columns else model_input.columns[0]
        values = model_input[col].tolist()
    elif isinstance(model_input, str):
        values = [model_input]
    else:
        values = list(np.asarray(model_input).reshape(-1))
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]


def log_version(
    version_dir: Path,
    version: str,
    *,
    tracking_uri: str | None = None,
    experiment: str = "elasticctr-serving",
    registered_model_name: str | None = None,
) -> str:
    """Log `version_dir` (verified copy of one version) as a pyfunc model; returns its URI."""
    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_experiment(experiment)
    with mlflow.start_run(run_name=f"version {version}") as run:
        mlflow.pyfunc.log_model(
            name="model",
            python_model=CTRModel(),
            artifacts={ARTIFACT: str(version_dir)},
            pip_requirements=["elasticctr", "paddlepaddle==3.0.0", "numpy", "pandas"],
            registered_model_name=registered_model_name,
        )
        # tagged last: `already_logged` finds only complete (and registered) models
        mlflow.set_tag(C.MLFLOW_TAG_VERSION, version)
        return f"runs:/{run.info.run_id}/model"


def already_logged(version: str, tracking_uri: str | None, experiment: str) -> str | None:
    """URI of a model already logged for `version` in `experiment`, else None."""
    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    runs = client.search_runs(
        [exp.experiment_id], f"tags.`{C.MLFLOW_TAG_VERSION}` = '{version}'", max_results=1
    )
    return f"runs:/{runs[0].info.run_id}/model" if runs else None


def main() -> None:
    from elasticctr.serving import store

    ap = argparse.ArgumentParser(description="Log a model version as an MLflow pyfunc model.")
    ap.add_argument("store")
    ap.add_argument("version")
    ap.add_argument("--tracking-uri")
    ap.add_argument("--experiment", default="elasticctr-serving")
    ap.add_argument("--register", help="also register it under this model name")
    ap.add_argument("--cache", type=Path, default=Path(".elasticctr/serving-cache"))
    ap.add_argument("--skip-existing", action="store_true", help="no-op if already logged")
    args = ap.parse_args()
    if args.skip_existing:
        found = already_logged(args.version, args.tracking_uri, args.experiment)
        if found:
            print(found)
            return
    vdir = store.fetch(args.store, args.version, args.cache, dense_only=False)
    print(log_version(vdir, args.version, tracking_uri=args.tracking_uri,
                      experiment=args.experiment, registered_model_name=args.register))  # fmt: skip


if __name__ == "__main__":
    main()
