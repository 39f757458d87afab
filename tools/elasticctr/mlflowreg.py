"""The MLflow model-registry contract shared by training and serving.

Training registers every published version under one registered model
($ELASTICCTR_MLFLOW_REGISTERED_MODEL, default `elasticctr`), tagged `elasticctr.version` =
YYYYMMDD/HH (elasticctr.train.registry). Serving moves the registry alias `serving` to the
registered version it answers with on every switch, rollbacks included, so MLflow says which
version is live. Neither side imports the other: both use this module.

Serving's image has no MLflow client (it would add MLflow's dependency tree to every
serving pod), so against a tracking server (http/https URI) the alias is moved through
MLflow's REST API (`GET model-versions/search`, `POST registered-models/alias`, the calls
MlflowClient makes) with httpx; other URIs (sqlite, file: local mode, tests) use
MlflowClient.
"""

from __future__ import annotations

import os

from elasticctr import constants as C
from elasticctr.errors import EctlError

SERVING_ALIAS = "serving"


def registered_model_name() -> str:
    """The registered model training adds versions to ($ELASTICCTR_MLFLOW_REGISTERED_MODEL)."""
    return os.environ.get(C.ENV_MLFLOW_REGISTERED_MODEL) or C.DEFAULT_MLFLOW_REGISTERED_MODEL


def client_for(tracking_uri: str):
    try:
        from mlflow import MlflowClient
    except ImportError as exc:  # the serving image: only http(s) tracking URIs (REST)
        raise EctlError(
            f"no MLflow client here for tracking URI {tracking_uri}",
            hint="use the tracking server's http(s) URL, or install mlflow-skinny",
        ) from exc
    return MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)


def find_registered(client, name: str, version_id: str):
    """The registered version of `name` tagged with `version_id`, else None."""
    found = client.search_model_versions(_version_filter(name, version_id))
    return found[0] if found else None


def set_serving_alias(
    tracking_uri: str, version_id: str, *, name: str | None = None, client=None
) -> str | None:
    """Point the `serving` alias of the registered model at `version_id`'s registered
    version; returns that MLflow version number, or None when `version_id` is not
    registered (yet: training registers after publishing). MLflow errors propagate."""
    name = name or registered_model_name()
    if client is None and tracking_uri.startswith(("http://", "https://")):
        return _set_alias_rest(tracking_uri, name, version_id)
    client = client or client_for(tracking_uri)
    mv = find_registered(client, name, version_id)
    if mv is None:
        return None
    client.set_registered_model_alias(name, SERVING_ALIAS, mv.version)
    return str(mv.version)


def _version_filter(name: str, version_id: str) -> str:
    return f"name = '{name}' and tags.`{C.MLFLOW_TAG_VERSION}` = '{version_id}'"


def _rest(tracking_uri: str):
    """(httpx client, API base URL) of a tracking server; MLflow's own auth variables are
    honoured: MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME/PASSWORD."""
    import httpx

    if not tracking_uri.startswith(("http://", "https://")):
        raise EctlError(
            f"MLflow tracking URI {tracking_uri}: not a tracking server (http:// or https://)"
        )
    headers, auth = {}, None
    if token := os.environ.get("MLFLOW_TRACKING_TOKEN"):
        headers["Authorization"] = f"Bearer {token}"
    elif user := os.environ.get("MLFLOW_TRACKING_USERNAME"):
        auth = (user, os.environ.get("MLFLOW_TRACKING_PASSWORD", ""))
    base = tracking_uri.rstrip("/") + "/api/2.0/mlflow"
    return httpx.Client(timeout=30, headers=headers, auth=auth), base


def _set_alias_rest(tracking_uri: str, name: str, version_id: str) -> str | None:
    """set_serving_alias through the tracking server's REST API."""
    http, base = _rest(tracking_uri)
    with http:
        found = http.get(
            base + "/model-versions/search", params={"filter": _version_filter(name, version_id)}
        )
        found.raise_for_status()
        versions = found.json().get("model_versions") or []
        if not versions:
            return None
        number = str(versions[0]["version"])
        done = http.post(
            base + "/registered-models/alias",
            json={"name": name, "alias": SERVING_ALIAS, "version": number},
        )
        done.raise_for_status()
        return number


# --- a scenario's entries, read and deleted by `ectl scenario remove` (REST only: the CLI
# reaches the platform's tracking server over http, and has no MLflow client either) ---


def _answer(resp, what: str) -> dict | None:
    """The JSON of an MLflow REST answer; None for RESOURCE_DOES_NOT_EXIST."""
    if resp.status_code == 404 or (
        resp.status_code == 400 and "RESOURCE_DOES_NOT_EXIST" in resp.text
    ):
        return None
    if resp.status_code >= 300:
        raise EctlError(f"MLflow: {what}: HTTP {resp.status_code} {resp.text[:200]}")
    return resp.json() if resp.content else {}


def registered_aliases(tracking_uri: str, name: str) -> dict[str, str] | None:
    """Every alias of registered model `name` -> its MLflow version number (the `serving`
    alias included); None when there is no such registered model."""
    http, base = _rest(tracking_uri)
    with http:
        doc = _answer(
            http.get(base + "/registered-models/get", params={"name": name}),
            f"registered model {name}",
        )
    if doc is None:
        return None
    model = doc.get("registered_model") or {}
    return {a["alias"]: str(a["version"]) for a in model.get("aliases") or []}


def pins(aliases: dict[str, str] | None) -> dict[str, str]:
    """The aliases that pin a version: every one but `serving`, which serving itself moves
    to whatever it answers with (docs/platform.md, "Removing a scenario")."""
    return {a: v for a, v in (aliases or {}).items() if a != SERVING_ALIAS}


def delete_registered_model(tracking_uri: str, name: str) -> bool:
    """Delete registered model `name` with all its versions; False when it did not exist."""
    http, base = _rest(tracking_uri)
    with http:
        done = _answer(
            http.request("DELETE", base + "/registered-models/delete", json={"name": name}),
            f"delete registered model {name}",
        )
    return done is not None


def delete_experiment(tracking_uri: str, name: str) -> str | None:
    """Delete experiment `name` (MLflow keeps deleted runs until `mlflow gc` on the server)
    after renaming it to ``<name>.deleted-<id>``, so a scenario added again under the same
    name gets a new experiment (MLflow refuses to reuse a deleted one's name). Returns the
    new name, or None when there was no such experiment."""
    http, base = _rest(tracking_uri)
    with http:
        doc = _answer(
            http.get(base + "/experiments/get-by-name", params={"experiment_name": name}),
            f"experiment {name}",
        )
        if doc is None:
            return None
        exp_id = str(doc["experiment"]["experiment_id"])
        renamed = f"{name}.deleted-{exp_id}"
        _answer(
            http.post(
                base + "/experiments/update",
                json={"experiment_id": exp_id, "new_name": renamed},
            ),
            f"rename experiment {name}",
        )
        _answer(
            http.post(base + "/experiments/delete", json={"experiment_id": exp_id}),
            f"delete experiment {name}",
        )
    return renamed
