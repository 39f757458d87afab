"""The shape of a model version: what every version of one store must share.

Training writes these facts into each version's manifest (`version_facts`); a scenario
re-added (or upgraded) onto a store prefix that already holds versions must keep them,
because serving, cube-transfer's rollback and the MLflow registered model treat the
versions of one prefix as one model: a version of another model, slot list, embedding
width or feasign hashing would be served beside (and rolled back to) versions it cannot
replace. `shape_problems` says which setting differs, by its values key.

Hyperparameters that change only how training proceeds (learning rates, optimizer,
batch size) are not part of the shape. No Paddle here: `ectl scenario add` imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from elasticctr.train.config import TrainConfig

DENSE_SHAPE_PARAMS = ("hiddenUnits", "cinLayers", "crossLayers")
"""Model hyperparameters that set the dense part's layer sizes (its parameter shapes)."""


def version_facts(cfg: TrainConfig) -> dict[str, Any]:
    """The manifest facts of a version trained with `cfg` (the sparse width,
    ``embedding_dim``, is added by the export from the table itself)."""
    return {
        "model": {"name": cfg.model.name, "params": cfg.model.params},
        "slots": list(cfg.slots),
        "first_order": cfg.model.first_order,
        "sparse_dim": cfg.sparse_dim,
    }


def shape_problems(manifest: Mapping[str, Any], cfg: TrainConfig) -> list[tuple[str, Any, Any]]:
    """(values key, the stored version's setting, `cfg`'s) for every shape setting that
    differs between a stored version's manifest and what `cfg` would train; [] if none."""
    model = manifest.get("model")
    stored_name = model.get("name") if isinstance(model, Mapping) else model
    stored_params = (model.get("params") if isinstance(model, Mapping) else None) or {}
    found: list[tuple[str, Any, Any]] = []
    if stored_name != cfg.model.name:
        found.append(("trainer.model.name", stored_name, cfg.model.name))
    elif manifest.get("embedding_dim") != cfg.model.table_dim:
        # table_dim: embeddingDim plus the first-order column of models that have one
        found.append(
            ("trainer.model.embeddingDim", stored_params.get("embeddingDim"),
             cfg.model.params.get("embeddingDim"))
        )  # fmt: skip
    if stored_name == cfg.model.name:
        for key in DENSE_SHAPE_PARAMS:
            if stored_params.get(key) != cfg.model.params.get(key):
                found.append((f"trainer.model.{key}", stored_params.get(key),
                              cfg.model.params.get(key)))  # fmt: skip
    if list(manifest.get("slots") or []) != list(cfg.slots):
        found.append(("global.data.slots", manifest.get("slots"), list(cfg.slots)))
    if manifest.get("sparse_dim") != cfg.sparse_dim:
        found.append(("global.data.sparseDim", manifest.get("sparse_dim"), cfg.sparse_dim))
    return found
