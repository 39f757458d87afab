"""The MLflow model-registry contract shared by training and serving.

Training registers every published version under one registered model
($ECTL_MLFLOW_REGISTERED_MODEL, default `elasticctr`), tagged `elasticctr.version` =
YYYYMMDD/HH (elasticctr.train.registry). Serving moves the registry alias `serving` to the
registered version it answers with on every switch, rollbacks included, so MLflow says which
version is live. Neither side imports the other: both use this module.
"""

from __future__ import annotations

import os

from elasticctr import constants as C

SERVING_ALIAS = "serving"


def registered_model_name() -> str:
    """The registered model training adds versions to ($ECTL_MLFLOW_REGISTERED_MODEL)."""
    return os.environ.get(C.ENV_MLFLOW_REGISTERED_MODEL) or C.DEFAULT_MLFLOW_REGISTERED_MODEL


def client_for(tracking_uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)


def find_registered(client, name: str, version_id: str):
    """The registered version of `name` tagged with `version_id`, else None."""
    found = client.search_model_versions(
        f"name = '{name}' and tags.`{C.MLFLOW_TAG_VERSION}` = '{version_id}'"
    )
    return found[0] if found else None


def set_serving_alias(
    tracking_uri: str, version_id: str, *, name: str | None = None, client=None
) -> str | None:
    """Point the `serving` alias of the registered model at `version_id`'s registered
    version; returns that MLflow version number, or None when `version_id` is not
    registered (yet: training registers after publishing). MLflow errors propagate."""
    name = name or registered_model_name()
    client = client or client_for(tracking_uri)
    mv = find_registered(client, name, version_id)
    if mv is None:
        return None
    client.set_registered_model_alias(name, SERVING_ALIAS, mv.version)
    return str(mv.version)
