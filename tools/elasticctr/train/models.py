"""Model zoo: the dense part of each CTR model on top of per-slot sum-pooled embeddings.

Every model shares one input: `pooled`, float32 [batch, num_slots, table_dim], the sum of
the sparse-table rows of each slot's feasigns (zero for an empty slot). Keeping the
sparse side identical for every model means one sparse table, one export format and one
cube/serving path; models with a first-order (linear) term reserve column 0 of each row
for it (`first_order=True`), the rest is the embedding.

Defaults live only in `elasticctr.zoo` (no Paddle there, so values checks read them too);
`resolve_spec` merges user values (`trainer.model` in values.yaml) over them and rejects
unknown names and bad values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from elasticctr.errors import ValidationError
from elasticctr.zoo import COMMON_DEFAULTS, DEFAULT_MODEL, DEFAULTS, OPTIMIZERS  # noqa: F401 (API)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def first_order(self) -> bool:
        """Whether column 0 of each sparse row is a linear weight."""
        return self.name in ("lr", "wide_deep", "deepfm", "xdeepfm")

    @property
    def embedding_dim(self) -> int:
        return int(self.params.get("embeddingDim", 0))

    @property
    def table_dim(self) -> int:
        """Width of a sparse-table row (what cube stores per feasign)."""
        if self.name == "lr":
            return 1
        return self.embedding_dim + (1 if self.first_order else 0)

    @property
    def learning_rate(self) -> float:
        return float(self.params["learningRate"])

    @property
    def sparse_learning_rate(self) -> float:
        """Rate of the sparse-table rule (embeddings are updated rarely, so it is larger)."""
        return float(self.params["sparseLearningRate"])

    @property
    def optimizer(self) -> str:
        return str(self.params["optimizer"])

    @property
    def batch_size(self) -> int:
        return int(self.params["batchSize"])


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def resolve_spec(model: Mapping[str, Any] | None) -> ModelSpec:
    """`trainer.model` → ModelSpec with defaults filled; ValidationError lists every problem."""
    model = dict(model or {})
    name = model.pop("name", DEFAULT_MODEL) or DEFAULT_MODEL
    problems: list[str] = []
    if name not in DEFAULTS:
        problem = (
            f"trainer.model.name: unknown model {name!r} (choose one of: {', '.join(DEFAULTS)})"
        )
        raise ValidationError(problem, [problem])
    allowed = {**COMMON_DEFAULTS, **DEFAULTS[name]}
    for key in model:
        if key not in allowed:
            problems.append(
                f"trainer.model.{key}: not a hyperparameter of {name} "
                f"(known: {', '.join(sorted(allowed))})"
            )
    params = {**allowed, **{k: v for k, v in model.items() if k in allowed}}
    if params["optimizer"] not in OPTIMIZERS:
        problems.append(
            f"trainer.model.optimizer: {params['optimizer']!r} is not one of {OPTIMIZERS}"
        )
    for key in ("learningRate", "sparseLearningRate"):
        lr = params[key]
        if isinstance(lr, bool) or not isinstance(lr, int | float) or not 0 < lr < 10:
            problems.append(f"trainer.model.{key}: expected a number in (0, 10), got {lr!r}")
    if not _positive_int(params["batchSize"]):
        problems.append(
            f"trainer.model.batchSize: expected a positive integer, got {params['batchSize']!r}"
        )
    if "embeddingDim" in params and not _positive_int(params["embeddingDim"]):
        problems.append(
            "trainer.model.embeddingDim: expected a positive integer, "
            f"got {params['embeddingDim']!r}"
        )
    for key in ("hiddenUnits", "cinLayers"):
        if key in params:
            units = params[key]
            if not isinstance(units, list) or not units or not all(map(_positive_int, units)):
                problems.append(
                    f"trainer.model.{key}: expected a non-empty list of positive integers"
                )
    if "crossLayers" in params and not _positive_int(params["crossLayers"]):
        problems.append("trainer.model.crossLayers: expected a positive integer")
    if problems:
        raise ValidationError(f"trainer.model ({name}) is invalid", problems)
    return ModelSpec(name=name, params=params)


# --- networks (Paddle static graph) -----------------------------------------------------


def _mlp(x, units: list[int]):
    import paddle

    for n in units:
        x = paddle.static.nn.fc(x, n, activation="relu")
    return x


def _sum_first_order(pooled):
    import paddle

    return paddle.sum(pooled[:, :, 0], axis=1, keepdim=True)


def _dnn(spec: ModelSpec, pooled, num_slots: int):
    import paddle

    x = paddle.reshape(pooled, [-1, num_slots * spec.table_dim])
    return paddle.static.nn.fc(_mlp(x, spec.params["hiddenUnits"]), 1)


def _lr(spec: ModelSpec, pooled, num_slots: int):
    import paddle

    bias = paddle.create_parameter([1], "float32", is_bias=True)
    return _sum_first_order(pooled) + bias


def _deep_of(spec: ModelSpec, emb, num_slots: int):
    import paddle

    x = paddle.reshape(emb, [-1, num_slots * spec.embedding_dim])
    return paddle.static.nn.fc(_mlp(x, spec.params["hiddenUnits"]), 1)


def _wide_deep(spec: ModelSpec, pooled, num_slots: int):
    return _sum_first_order(pooled) + _deep_of(spec, pooled[:, :, 1:], num_slots)


def _fm(emb):
    import paddle

    summed = paddle.sum(emb, axis=1)  # [B, e]
    squares = paddle.sum(emb * emb, axis=1)
    return 0.5 * paddle.sum(summed * summed - squares, axis=1, keepdim=True)


def _deepfm(spec: ModelSpec, pooled, num_slots: int):
    emb = pooled[:, :, 1:]
    return _sum_first_order(pooled) + _fm(emb) + _deep_of(spec, emb, num_slots)


def _dcn(spec: ModelSpec, pooled, num_slots: int):
    import paddle

    width = num_slots * spec.embedding_dim
    x0 = paddle.reshape(pooled, [-1, width])
    x = x0
    for _ in range(spec.params["crossLayers"]):
        w = paddle.create_parameter([width, 1], "float32")
        b = paddle.create_parameter([width], "float32", is_bias=True)
        x = x0 * paddle.matmul(x, w) + b + x
    deep = _mlp(x0, spec.params["hiddenUnits"])
    return paddle.static.nn.fc(paddle.concat([x, deep], axis=1), 1)


def _cin(emb, num_slots: int, layers: list[int]):
    import paddle

    dim = emb.shape[-1]
    x0, xk, prev = emb, emb, num_slots
    pooled = []
    for units in layers:
        z = paddle.unsqueeze(xk, 2) * paddle.unsqueeze(x0, 1)  # [B, prev, S, e]
        z = paddle.reshape(z, [-1, prev * num_slots, dim])
        w = paddle.create_parameter([prev * num_slots, units], "float32")
        xk = paddle.transpose(paddle.matmul(paddle.transpose(z, [0, 2, 1]), w), [0, 2, 1])
        xk = paddle.nn.functional.relu(xk)  # [B, units, e]
        pooled.append(paddle.sum(xk, axis=2))
        prev = units
    return paddle.static.nn.fc(paddle.concat(pooled, axis=1), 1)


def _xdeepfm(spec: ModelSpec, pooled, num_slots: int):
    emb = pooled[:, :, 1:]
    return (
        _sum_first_order(pooled)
        + _cin(emb, num_slots, spec.params["cinLayers"])
        + _deep_of(spec, emb, num_slots)
    )


NETWORKS: dict[str, Callable] = {
    "dnn": _dnn,
    "lr": _lr,
    "wide_deep": _wide_deep,
    "deepfm": _deepfm,
    "dcn": _dcn,
    "xdeepfm": _xdeepfm,
}


def dense_logit(spec: ModelSpec, pooled, num_slots: int):
    """logit [B, 1] of `spec`'s dense part from pooled [B, num_slots, table_dim]."""
    return NETWORKS[spec.name](spec, pooled, num_slots)
