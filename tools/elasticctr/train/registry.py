"""Every exported model version as a version of one MLflow registered model.

Training (trainer 0, the elastic chief) calls `register_version` after a version is
published to the model store. The registered version points at the model store; the big
tables are not uploaded to MLflow:

- `source` is the model-store URL of the version (a local path becomes `file:///...`);
- `run_id` is the training run that logged the version's metrics;
- tags (docs/contracts.md "MLflow registry"): `elasticctr.version` (YYYYMMDD/HH),
  `elasticctr.model`, `elasticctr.auc`, `elasticctr.logloss`,
  `elasticctr.manifest_sha256`, `elasticctr.sparse_rows`, `elasticctr.store_url`,
  `elasticctr.source_kind`.

An MLflow *server* refuses some sources (measured with MLflow 3.17): a local path unless
it lies in the run's artifact folder, and `http(s)://`/`hdfs://` unless the server runs
with `MLFLOW_ALLOWED_HOST_ADDRESSED_ARTIFACT_SCHEMES` naming the scheme. Then the version
is registered with source `runs:/<run>/versions/YYYYMMDD/HH`, where the run holds only the
version's manifest.json (kilobytes); `elasticctr.store_url` still names the store, and
`elasticctr.source_kind` says `run-manifest` instead of `model-store`.

Registration never fails an export: any error is logged as a warning (with what to run
to register the version later) and `register_version` returns None. Registering a version
that is already registered returns the existing one.

    python -m elasticctr.train.registry STORE VERSION --tracking-uri URI [--run-id RUN]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from elasticctr import constants as C
from elasticctr import modelstore, versions
from elasticctr.mlflowreg import client_for, find_registered, registered_model_name

TAG_MODEL = "elasticctr.model"
TAG_AUC = "elasticctr.auc"
TAG_LOGLOSS = "elasticctr.logloss"
TAG_MANIFEST_SHA256 = "elasticctr.manifest_sha256"
TAG_SPARSE_ROWS = "elasticctr.sparse_rows"
TAG_STORE_URL = "elasticctr.store_url"
TAG_SOURCE_KIND = "elasticctr.source_kind"
SOURCE_STORE = "model-store"
SOURCE_RUN = "run-manifest"
ARTIFACT_DIR = "versions"
"""Run artifact folder of the fallback source: versions/YYYYMMDD/HH/manifest.json."""


def _print(msg: str) -> None:
    print(f"[ectl-train {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def store_url(target: str) -> str:
    """The model-store location of a version as a URL: paths become absolute file:// URLs."""
    if "://" in target:
        return target
    return Path(target).resolve().as_uri()


def version_tags(version_id: str, manifest: dict[str, Any], manifest_sha256: str) -> dict:
    """The registry tags of a version, all from its manifest (strings, as MLflow keeps them)."""
    metrics = manifest.get("metrics") or {}
    model = manifest.get("model")  # {"name", "params"} from training; a bare name is read too
    tags = {
        C.MLFLOW_TAG_VERSION: version_id,
        TAG_MODEL: str(model.get("name", "")) if isinstance(model, dict) else str(model or ""),
        TAG_MANIFEST_SHA256: manifest_sha256,
        TAG_SPARSE_ROWS: str((manifest.get("sparse") or {}).get("rows", "")),
    }
    for tag, key in ((TAG_AUC, "auc"), (TAG_LOGLOSS, "logloss")):
        if isinstance(metrics.get(key), int | float):
            tags[tag] = repr(float(metrics[key]))
    return tags


def _is_refused_source(exc: Exception) -> bool:
    code = getattr(exc, "error_code", "")
    return code == "INVALID_PARAMETER_VALUE" and "source" in str(exc).lower()


def _ensure_registered_model(client, name: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(name)
        return
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
    try:
        client.create_registered_model(
            name,
            tags={"elasticctr.kind": "ctr"},
            description="ElasticCTR model versions (YYYYMMDD/HH), one per trained partition; "
            "each version's source is its folder in the model store.",
        )
    except MlflowException as exc:  # created meanwhile by another job
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise


def register_version(
    tracking_uri: str,
    version_id: str,
    target: str,
    manifest_path: Path,
    *,
    run_id: str | None = None,
    name: str | None = None,
    client=None,
    log: Callable[[str], None] = _print,
):
    """Register a published version; returns the MLflow ModelVersion, or None on any error.

    `target` is where `ModelStore.publish` put the version; `manifest_path` a local copy of its
    manifest.json (tags come from it); `run_id` the training run (needed for the fallback
    source). `client` (an MlflowClient) is for tests.
    """
    name = name or registered_model_name()
    url = store_url(target)
    try:
        manifest_path = Path(manifest_path)
        manifest = json.loads(manifest_path.read_text())
        tags = version_tags(version_id, manifest, versions.sha256_file(manifest_path))
        tags[TAG_STORE_URL] = url
        if client is None:
            client = client_for(tracking_uri)
        _ensure_registered_model(client, name)
        existing = find_registered(client, name, version_id)
        if existing is not None:
            log(f"{version_id}: already registered as {name} version {existing.version}")
            return existing
        auc, logloss = tags.get(TAG_AUC, "?"), tags.get(TAG_LOGLOSS, "?")
        description = f"{tags[TAG_MODEL]} {version_id}: held-out auc {auc}, logloss {logloss}"
        try:
            mv = client.create_model_version(
                name,
                url,
                run_id=run_id,
                tags={**tags, TAG_SOURCE_KIND: SOURCE_STORE},
                description=description,
            )
        except Exception as exc:
            if not (_is_refused_source(exc) and run_id):
                raise
            log(
                f"WARNING: MLflow refused the model-store URL {url} as the source of "
                f"{name} {version_id} ({exc}); registering source runs:/{run_id}/"
                f"{ARTIFACT_DIR}/{version_id} (the manifest only) with tag "
                f"{TAG_STORE_URL}. For http(s)/hdfs stores, start the MLflow server with "
                "MLFLOW_ALLOWED_HOST_ADDRESSED_ARTIFACT_SCHEMES=http,https,hdfs to keep the "
                "store URL as the source (a local-path store never is, on a server)."
            )
            mv = _register_with_run_manifest(
                client, name, version_id, manifest_path, run_id, tags, description
            )
        log(f"{version_id}: registered as MLflow model {name} version {mv.version} ({mv.source})")
        return mv
    except Exception as exc:
        log(
            f"WARNING: MLflow registration of {version_id} failed, the version stays "
            f"published at {url}: {type(exc).__name__}: {exc}. Register it later with "
            f"`python -m elasticctr.train.registry STORE {version_id} --tracking-uri "
            f"{tracking_uri}`."
        )
        return None


def _register_with_run_manifest(client, name, version_id, manifest_path, run_id, tags, desc):
    artifact_path = f"{ARTIFACT_DIR}/{version_id}"
    with tempfile.TemporaryDirectory() as tmp:
        # log_artifact keeps the file name: copy it so the run gets exactly manifest.json
        copy = Path(tmp) / versions.MANIFEST
        copy.write_bytes(Path(manifest_path).read_bytes())
        client.log_artifact(run_id, str(copy), artifact_path)
    return client.create_model_version(
        name,
        f"runs:/{run_id}/{artifact_path}",
        run_id=run_id,
        tags={**tags, TAG_SOURCE_KIND: SOURCE_RUN},
        description=desc,
    )


def main(argv: list[str] | None = None) -> int:
    """Register a version already in the model store (e.g. after a failed registration)."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("store", help="model store (global.modelStore): path, file://, http(s)://")
    ap.add_argument("version", help="version id YYYYMMDD/HH")
    ap.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI"))
    ap.add_argument("--run-id", help="training run of the version (fallback source)")
    ap.add_argument("--name", default=None, help=f"default: ${C.ENV_MLFLOW_REGISTERED_MODEL}")
    args = ap.parse_args(argv)
    store = modelstore.open_store(args.store)
    target = store.version_url(args.version)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / versions.MANIFEST
        local.write_bytes(store.read_bytes(args.version, versions.MANIFEST))
        mv = register_version(
            args.tracking_uri or "", args.version, target, local, run_id=args.run_id, name=args.name
        )
    return 0 if mv is not None else 1


if __name__ == "__main__":
    sys.exit(main())
