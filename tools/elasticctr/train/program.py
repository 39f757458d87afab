"""The Paddle side of both training roles: one static program and the Fleet PS runtime.

Both roles build the same static program (`build_net`: one sparse table of raw uint64
feasigns, sum-pooled per slot, then the zoo model's dense part) and hand it to Fleet's
async parameter server (`init_fleet`); the pserver (`elasticctr.train.pserver`) then
serves the tables, the elastic trainer (`elasticctr.train.elastic`) starts its worker
(`start_worker`), pulls the dense parameters itself (`dense_puller`) and feeds batches
(`elasticctr.train.feeds`, or the native pipeline of `native_feed`).

Start-up order problems handled here (see docs/training.md): a trainer reaches every
pserver endpoint before it uses it, with a timeout and a clear error, instead of
Paddle's "push dense param failed".
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from elasticctr import constants as C
from elasticctr.train import env as role_env
from elasticctr.train.config import TrainConfig
from elasticctr.train.feeds import CLICK_VAR, PAD_FEASIGN, SHOW_VAR
from elasticctr.train.models import ModelSpec, dense_logit

SPARSE_TABLE = "SparseFeatFactors"  # ElasticCTR's name for the shared embedding table
SPARSE_SHARDS = 64
DENSE_PULL_EVERY = 5
"""Steps between dense-parameter pulls (see dense_puller); 1 costs ~40% throughput."""
DENSE_PULL_SECONDS = 0.1
"""The native pipeline's dense pull period (a side thread; no Python per step there)."""


def log(msg: str) -> None:
    """One line of a training role's log (stdout, flushed: the supervisor or the pod
    log has it at once)."""
    print(f"[ectl-train {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def import_paddle():
    """Import paddle in static-graph, legacy-IR mode (Fleet PS needs both)."""
    os.environ[C.ENV_PIR_API] = "0"
    # One BLAS/OpenMP thread per training thread: the native pipeline runs trainer.threads
    # Hogwild threads; more BLAS threads each only spin (measured: -20% trainer CPU).
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    if _amd_with_avx2():
        # Paddle's MKL (mklml 2019) takes its generic SSE path on AMD CPUs; type 5 makes it
        # use AVX2: a 512x400x400 matmul went from 16.4 to 42.5 GFLOP per CPU-second on
        # this machine's EPYC, and the DNN spends ~70% of a trainer's CPU in GEMM.
        os.environ.setdefault("MKL_DEBUG_CPU_TYPE", "5")
    import paddle

    if paddle.base.framework.use_pir_api():
        # The variable is read once, at paddle's import: another module of this process
        # imported paddle first. Switch this process to the legacy IR for good.
        paddle.pir_utils.OldIrGuard().__enter__()
    paddle.enable_static()
    return paddle


def _amd_with_avx2() -> bool:
    try:
        info = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return False
    flags = next((line for line in info.splitlines() if line.startswith("flags")), "")
    return "AuthenticAMD" in info and " avx2" in flags


@dataclass
class Net:
    feasigns: object  # slot-major graph: the one LoD input; per-slot graph: None
    label: object
    pooled: object
    prob: object
    loss: object
    infer_program: object
    slot_vars: list = field(default_factory=list)  # per-slot graph: one LoD input per slot
    show: object = None
    click: object = None

    @property
    def per_slot(self) -> bool:
        return bool(self.slot_vars)

    @property
    def use_vars(self) -> list:
        """The dataset's slots, in the order ectl-slotfeed writes them (native.py)."""
        return [*self.slot_vars, self.label, self.show, self.click]


def build_net(spec: ModelSpec, num_slots: int, per_slot: bool = False) -> Net:
    """The training graph; `infer_program` is the pre-optimizer clone used for export.

    Two input layouts of the same sparse table and the same pooled tensor: slot-major
    (one LoD input holding every slot, one lookup; the Python feed) and per-slot (one LoD
    input per slot, as Paddle's MultiSlot dataset delivers them; Fleet fuses the lookups
    of the one table into one pull and one push). Parameters are the same, so tables,
    checkpoints and exported versions are interchangeable.
    """
    paddle = import_paddle()
    dim = spec.table_dim
    label = paddle.static.data("label", shape=[-1, 1], dtype="float32")
    # The data's show/click of every sequence (one per slot and sample) go with the
    # gradients into the sparse table's statistics (its show/click columns).
    show = paddle.static.data(SHOW_VAR, shape=[-1, 1], dtype="float32")
    click = paddle.static.data(CLICK_VAR, shape=[-1, 1], dtype="float32")

    def lookup(ids):
        return paddle.static.nn.sparse_embedding(
            ids,
            size=[1024, dim],
            padding_idx=PAD_FEASIGN,
            param_attr=paddle.ParamAttr(name=SPARSE_TABLE),
            entry=paddle.distributed.ShowClickEntry(SHOW_VAR, CLICK_VAR),
        )

    feasigns, slot_vars = None, []
    if per_slot:
        slot_vars = [
            paddle.static.data(f"slot_{j}", shape=[-1, 1], dtype="int64", lod_level=1)
            for j in range(num_slots)
        ]
        pools = [
            paddle.static.nn.sequence_lod.sequence_pool(lookup(v), "sum", pad_value=0.0)
            for v in slot_vars
        ]
        pooled = paddle.stack(pools, axis=1)
    else:
        feasigns = paddle.static.data("feasigns", shape=[-1, 1], dtype="int64", lod_level=1)
        # Sequences are slot-major (all samples of slot 0, then slot 1, ...), so one lookup
        # and one pool serve every slot.
        flat = paddle.static.nn.sequence_lod.sequence_pool(lookup(feasigns), "sum", pad_value=0.0)
        pooled = paddle.transpose(paddle.reshape(flat, [num_slots, -1, dim]), [1, 0, 2])
    logit = dense_logit(spec, pooled, num_slots)
    prob = paddle.nn.functional.sigmoid(logit)
    loss = paddle.mean(paddle.nn.functional.binary_cross_entropy_with_logits(logit, label))
    infer_program = paddle.static.default_main_program().clone(for_test=True)
    if per_slot:
        # train_from_dataset runs no Python per batch: a py_func op hands each batch's
        # loss, predictions and labels to native.BATCHES (the train_loss and train_auc
        # metrics; one GIL grab per batch).
        from elasticctr.train import native as _native

        paddle.static.py_func(_native.record_batch, [loss, prob, label], out=None)
    return Net(feasigns, label, pooled, prob, loss, infer_program, slot_vars, show, click)


def optimizer(spec: ModelSpec):
    """The dense part's optimizer. Paddle's PS dense tables support only SGD and Adam
    ("The dense optimizer in PS is only supported SGD or Adam!"), so `adagrad` means
    AdaGrad for the sparse table (the classic CTR embedding rule) and Adam for the dense
    part."""
    paddle = import_paddle()
    cls = {
        "adam": paddle.optimizer.Adam,
        "sgd": paddle.optimizer.SGD,
        "adagrad": paddle.optimizer.Adam,
    }[spec.optimizer]
    return cls(learning_rate=spec.learning_rate)


_SPARSE_RULES = {
    "adam": "SparseAdamSGDRule",
    "sgd": "SparseNaiveSGDRule",
    "adagrad": "SparseAdaGradSGDRule",
}
_SPARSE_RULE_PARAM = {"adam": "adam", "sgd": "naive", "adagrad": "adagrad"}


def sparse_table_config(spec: ModelSpec) -> dict:
    """Sparse-table settings: same optimizer family as the dense part, its own rate."""
    prefix = f"table_parameters.{SPARSE_TABLE}"
    rule, sub = _SPARSE_RULES[spec.optimizer], _SPARSE_RULE_PARAM[spec.optimizer]
    config = {f"{prefix}.shard_num": SPARSE_SHARDS}
    for part in ("embed_sgd_param", "embedx_sgd_param"):
        config[f"{prefix}.accessor.{part}.name"] = rule
        config[f"{prefix}.accessor.{part}.{sub}.learning_rate"] = spec.sparse_learning_rate
    return config


def init_fleet(
    renv: role_env.RoleEnv, spec: ModelSpec, num_slots: int, per_slot: bool = False
) -> Net:
    """Fleet's role set-up of this process (pserver or trainer, from `renv`'s Paddle
    variables) and the program built and minimised by the async PS optimizer."""
    os.environ.update(renv.paddle_env())
    paddle = import_paddle()
    import paddle.distributed.fleet as fleet

    fleet.init(fleet.PaddleCloudRoleMaker())
    net = build_net(spec, num_slots, per_slot)
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    # Paddle's default of 1000 shards makes every dump 1000 files; 64 is plenty here.
    strategy.sparse_table_configs = {SPARSE_TABLE: sparse_table_config(spec)}
    fleet.distributed_optimizer(optimizer(spec), strategy).minimize(net.loss)
    del paddle
    return net


def edit_ps_desc(method: str, edit) -> None:
    """Have Fleet's `PsDescBuilder.<method>` (`build_server_desc` / `build_worker_desc`)
    apply `edit(ps_desc)` to the PSParameter it builds, before it is serialised for
    Paddle's C++ side: settings the_one_ps neither sets nor passes through from the
    strategy. Idempotent per method and edit."""
    from google.protobuf import text_format
    from paddle.distributed.ps import the_one_ps

    build = getattr(the_one_ps.PsDescBuilder, method)
    if edit in getattr(build, "ectl_ps_edits", ()):
        return

    def built(self) -> str:
        build(self)
        edit(self.ps_desc)
        return text_format.MessageToString(self.ps_desc)

    built.ectl_ps_edits = (*getattr(build, "ectl_ps_edits", ()), edit)
    setattr(the_one_ps.PsDescBuilder, method, built)


PS_CLIENT_GFLAGS = (
    # Paddle's defaults when init_gflags is empty (brpc message and pool sizes) ...
    "-max_body_size=314217728 -socket_max_unwritten_bytes=2048000000 "
    "-max_connection_pool_size=1950 "
    # ... and: send each batch's sparse gradients at the next push cycle (every 10 ms).
    "-pserver_push_sparse_merge_limit=0"
)
"""The trainers' PS client flags (PSParameter.init_gflags, parsed by gflags).

Paddle's client sums the sparse gradients of `pserver_push_sparse_merge_limit` (12)
batches per key before it sends them, so each embedding row got one Adam step per 12
batches: with 0 it sends what is queued every push cycle (10 ms). Measured
(docs/training.md "Sparse pushes merged"): held-out AUC 0.7027 -> 0.7072 against
DeepCTR-Torch's 0.7061 on the bench (3 rounds), the first hour of the small-vocabulary
test from 0.52-0.73 to 0.71-0.74, at about the same CPU."""


def _client_flags(ps_desc) -> None:
    ps_desc.init_gflags = PS_CLIENT_GFLAGS


def start_worker(renv: role_env.RoleEnv, pserver_wait: float, note: str = ""):
    """A trainer's start: run the startup program, wait until every pserver listens,
    `fleet.init_worker()`; returns (paddle, fleet, place, executor)."""
    paddle = import_paddle()
    import paddle.distributed.fleet as fleet

    place = paddle.CPUPlace()
    exe = paddle.static.Executor(place)
    exe.run(paddle.static.default_startup_program())
    waited = role_env.wait_for_endpoints(renv.pserver_endpoints, pserver_wait)
    log(f"all pservers reachable after {waited:.1f}s")
    t_init = time.monotonic()
    edit_ps_desc("build_worker_desc", _client_flags)
    fleet.init_worker()
    log(f"worker initialised in {time.monotonic() - t_init:.1f}s{note}")
    return paddle, fleet, place, exe


def dense_puller():
    """A function that refreshes this trainer's dense parameters from the pservers.

    Paddle 3.0's async communicator sends dense gradients but never receives the dense
    parameters back (measured: trainer-side values stay at their initial values), so
    without this the trainers compute gradients at the initial point forever and the
    server-side dense part diverges. We pull every DENSE_PULL_EVERY steps ourselves.
    """
    import paddle.distributed.fleet as fleet
    from paddle.distributed.ps.utils.public import get_the_one_recv_context

    rt = fleet.fleet._runtime_handle
    dense_map = get_the_one_recv_context(rt.context, split_dense_table=rt.is_heter_ps_mode)

    def pull() -> None:
        rt._pull_all_dense(rt.scopes, rt._send_ctx, dense_map)

    return pull


def dense_names() -> list[str]:
    """Dense parameter names in the order the pservers' dense table stores them."""
    import paddle.distributed.fleet as fleet
    from paddle.distributed.ps.utils.public import get_the_one_recv_context

    rt = fleet.fleet._runtime_handle
    dense_map = get_the_one_recv_context(rt.context, split_dense_table=rt.is_heter_ps_mode)
    names: list[str] = []
    for table_id in sorted(dense_map):
        names.extend(dense_map[table_id])
    return names


def native_feed(cfg: TrainConfig, net: Net):
    """The native pipeline for this trainer, or None (threads 0, or no reader binary:
    then the Python reader serves, which the log says once)."""
    from elasticctr.train import native

    if cfg.threads <= 0:
        return None
    if native.binary() is None:
        log(f"native reader unavailable ({native.unavailable()}); using the Python reader")
        return None
    log(f"native pipeline: {cfg.threads} thread(s), reader {native.binary()}")
    return native.NativeFeed(
        cfg.slots, cfg.sparse_dim, net.use_vars, cfg.threads, cfg.model.batch_size, cfg.hdfs_ugi
    )


def dense_pull_seconds() -> float:
    """Seconds between dense pulls while the native pipeline trains (default 0.1)."""
    return float(os.environ.get(C.ENV_DENSE_PULL_SECONDS, DENSE_PULL_SECONDS))
