"""The model zoo's names and hyperparameter defaults: data only, no Paddle.

The one home of these defaults: `elasticctr.train.models` builds the networks from them,
`elasticctr.values` checks `trainer.model` against them, and
tests/unit/test_chart_defaults.py checks that the chart's validation
(`elasticctr.validateValues`) knows the same names and that the chart's default model
is `DEFAULT_MODEL`.
"""

from __future__ import annotations

from typing import Any

COMMON_DEFAULTS: dict[str, Any] = {
    "optimizer": "adam",
    "learningRate": 0.001,
    "sparseLearningRate": 0.05,
    "batchSize": 512,
}
"""Hyperparameters every model has."""

DEFAULTS: dict[str, dict[str, Any]] = {
    # ElasticCTR's network: 9-wide embeddings, three 400-unit ReLU layers.
    "dnn": {"embeddingDim": 9, "hiddenUnits": [400, 400, 400]},
    "lr": {},
    "wide_deep": {"embeddingDim": 8, "hiddenUnits": [400, 400, 400]},
    # The FM term squares sums of embeddings: at the common 0.05 sparse rate it blew up on
    # real Criteo rows (held-out AUC 0.63, logloss 1.14); 0.01 gives 0.728.
    "deepfm": {"embeddingDim": 8, "hiddenUnits": [400, 400, 400], "sparseLearningRate": 0.01},
    "dcn": {"embeddingDim": 8, "hiddenUnits": [400, 400, 400], "crossLayers": 3},
    "xdeepfm": {"embeddingDim": 8, "hiddenUnits": [400, 400, 400], "cinLayers": [128, 128]},
}
DEFAULT_MODEL = "dnn"
OPTIMIZERS = ("adam", "sgd", "adagrad")
