"""The two Paddle Fleet parameter-server roles: `pserver` and `trainer` (async PS).

Both build the same static program (one sparse table of raw uint64 feasigns, sum-pooled
per slot, then the zoo model's dense part); the pserver serves the tables until it is
stopped, the trainers push/pull asynchronously. Per partition (date-hour) the trainers
train on their share, meet at a barrier, have the pservers dump the sparse table, and
trainer 0 pulls the dense parameters, exports version `YYYYMMDD/HH`, evaluates that
exported version on held-out samples, logs to MLflow and registers the published version
in the MLflow model registry (`elasticctr.train.registry`).

Start-up order problems this module handles (see docs/training.md): the trainers reach
pserver 0's rendezvous store and every pserver endpoint before they use them, with a
timeout and a clear error, instead of Paddle's "push dense param failed".
"""

from __future__ import annotations

import os
import queue
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from elasticctr import constants as C
from elasticctr import modelstore, versions
from elasticctr.errors import EctlError
from elasticctr.train import env as role_env
from elasticctr.train import export, metrics, native, shape
from elasticctr.train.config import TrainConfig
from elasticctr.train.models import ModelSpec, dense_logit

SPARSE_TABLE = "SparseFeatFactors"  # ElasticCTR's name for the shared embedding table
SPARSE_SHARDS = 64
HOLDOUT_EVERY = 10
DENSE_PULL_EVERY = 5
"""Steps between dense-parameter pulls (see _dense_puller); 1 costs ~40% throughput."""
DENSE_PULL_SECONDS = 0.1
"""The native pipeline's dense pull period (a side thread; no Python per step there)."""
"""Trainer 0 keeps every 10th batch of each partition out of training for evaluation."""
DEFAULT_START = "20200401/00"


def log(msg: str) -> None:
    print(f"[ectl-train {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _paddle():
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
    paddle = _paddle()
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


def _optimizer(spec: ModelSpec):
    """The dense part's optimizer. Paddle's PS dense tables support only SGD and Adam
    ("The dense optimizer in PS is only supported SGD or Adam!"), so `adagrad` means
    AdaGrad for the sparse table (the classic CTR embedding rule) and Adam for the dense
    part."""
    paddle = _paddle()
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


def _init_fleet(
    renv: role_env.RoleEnv, spec: ModelSpec, num_slots: int, per_slot: bool = False
) -> Net:
    os.environ.update(renv.paddle_env())
    paddle = _paddle()
    import paddle.distributed.fleet as fleet

    fleet.init(fleet.PaddleCloudRoleMaker())
    net = build_net(spec, num_slots, per_slot)
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    # Paddle's default of 1000 shards makes every dump 1000 files; 64 is plenty here.
    strategy.sparse_table_configs = {SPARSE_TABLE: sparse_table_config(spec)}
    fleet.distributed_optimizer(_optimizer(spec), strategy).minimize(net.loss)
    del paddle
    return net


def run_pserver(cfg: TrainConfig, renv: role_env.RoleEnv) -> None:
    """Serve the parameter tables until the process is stopped (launcher / job end)."""
    log(f"pserver {renv.index} at {renv.pod_ip}:{renv.port}; endpoints {renv.pserver_endpoints}")
    _init_fleet(renv, cfg.model, len(cfg.slots), per_slot=cfg.threads > 0)
    import paddle.distributed.fleet as fleet

    fleet.init_server()
    exit_at_once_on_sigterm()
    log("pserver serving")
    fleet.run_server()


def exit_at_once_on_sigterm() -> None:
    """From now on SIGTERM ends this process at once with exit status 15, also when it
    is PID 1 of its PID namespace (a container's `ectl train pserver`).

    `fleet.run_server()` blocks in C++ holding the GIL, so a Python handler never runs;
    Paddle's own handler (glog's) prints "SIGTERM ... received by PID 1" and re-raises
    with the default action, which the kernel ignores for a namespace's PID 1. So a
    deleted, evicted or preempted pserver pod kept serving until the kubelet's SIGKILL
    after the grace period (30 s): Volcano's RestartJob came that late, or never when
    the job completed meanwhile, and every job restart waited that long for it. The C
    handler installed here is libc's `_exit` itself: it needs neither the GIL nor the
    default action. A pserver has nothing to flush (its tables die with it; the
    checkpoint is the durable copy)."""
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.signal.restype = ctypes.c_void_p
    handler = ctypes.cast(libc._exit, ctypes.c_void_p).value
    if libc.signal(int(signal.SIGTERM), handler) == ctypes.c_void_p(-1).value:  # SIG_ERR
        raise OSError(ctypes.get_errno(), "cannot install the pserver's SIGTERM handler")


# --- feeding ----------------------------------------------------------------------------


PAD_FEASIGN = 0
SHOW_VAR, CLICK_VAR = "ectl_show", "ectl_click"
"""Reserved feasign: fills empty slots (sequence_pool needs >= 1 id per sequence); its
embedding is fixed at zero (padding_idx), so an empty slot still pools to zero."""


def pad_empty(ids: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Give every empty sequence one PAD_FEASIGN id; vectorised, order kept."""
    empty = lengths == 0
    if not empty.any():
        return ids, lengths
    new_lengths = np.where(empty, 1, lengths)
    old_off = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=old_off[1:])
    new_off = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(new_lengths, out=new_off[1:])
    out = np.full(int(new_off[-1]), PAD_FEASIGN, dtype=np.uint64)
    owner_start_new = np.repeat(new_off[:-1], lengths)
    owner_start_old = np.repeat(old_off[:-1], lengths)
    out[owner_start_new + (np.arange(ids.size) - owner_start_old)] = ids
    return out, new_lengths


def to_feed(batch, place) -> dict:
    """Slot-major batch → {'feasigns': LoDTensor, 'label': [n, 1]} without per-sample Python."""
    from paddle.base import core

    ids = np.concatenate(batch.ids) if len(batch.ids) > 1 else batch.ids[0]
    lengths = np.concatenate(batch.lengths).astype(np.int64)
    ids, lengths = pad_empty(np.asarray(ids, dtype=np.uint64), lengths)
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tensor = core.LoDTensor()
    tensor.set(np.ascontiguousarray(ids, dtype=np.uint64).view(np.int64).reshape(-1, 1), place)
    tensor.set_lod([offsets.tolist()])
    # Sequences are slot-major: every slot repeats the samples' show/click in order.
    slots = len(batch.lengths)
    show = np.tile(np.asarray(batch.show, dtype=np.float32), slots).reshape(-1, 1)
    click = np.asarray(batch.click, dtype=np.float32)
    return {
        "feasigns": tensor,
        "label": click.reshape(-1, 1),
        SHOW_VAR: show,
        CLICK_VAR: np.tile(click, slots).reshape(-1, 1),
    }


def to_feed_slots(batch, place) -> dict:
    """Slot-wise batch → the per-slot graph's feed (one LoD tensor per slot)."""
    from paddle.base import core

    feed = {}
    for j, (ids, lengths) in enumerate(zip(batch.ids, batch.lengths, strict=True)):
        ids, lengths = pad_empty(np.asarray(ids, dtype=np.uint64), np.asarray(lengths, np.int64))
        offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tensor = core.LoDTensor()
        tensor.set(np.ascontiguousarray(ids).view(np.int64).reshape(-1, 1), place)
        tensor.set_lod([offsets.tolist()])
        feed[f"slot_{j}"] = tensor
    click = np.asarray(batch.click, dtype=np.float32).reshape(-1, 1)
    feed.update(
        {
            "label": click,
            SHOW_VAR: np.asarray(batch.show, np.float32).reshape(-1, 1),
            CLICK_VAR: click,
        }
    )
    return feed


def feed_of(net: Net, batch, place) -> dict:
    return to_feed_slots(batch, place) if net.per_slot else to_feed(batch, place)


# --- data -------------------------------------------------------------------------------


@dataclass
class SyntheticPlan:
    """In-memory data instead of files (smoke tests, benchmarks)."""

    samples: int  # per partition, over all trainers
    partitions: int = 1
    seed: int = 7


@dataclass
class Partition:
    version_id: str
    index: int
    files: list[str] = field(default_factory=list)


def _next_hour(version_id: str, hours: int) -> str:
    import datetime as dt

    t = versions.parse_date_hour(version_id) + dt.timedelta(hours=hours)
    return versions.format_date_hour(t)


def plan_partitions(cfg: TrainConfig, synthetic: SyntheticPlan | None) -> Iterator[Partition]:
    """Partitions in hour order. Files: ready hours in [start, end]; with no end, keep
    following new hours as their donefiles appear (every trainer walks the same order)."""
    if synthetic is not None:
        start = cfg.start_date_hour or DEFAULT_START
        for i in range(synthetic.partitions):
            yield Partition(_next_hour(start, i), i)
        return
    from elasticctr.data import partitions as parts

    if not cfg.data_path:
        raise EctlError("global.data.path is empty: nothing to train on")
    start = cfg.start_date_hour
    if not start:
        ready = parts.list_partitions(cfg.data_path, None, cfg.end_date_hour or None, cfg.hdfs_ugi)
        if not ready:
            raise EctlError(
                f"no ready partition under {cfg.data_path}",
                hint="partitions are {path}/YYYYMMDD/HH/part-* with a donefile",
            )
        start = ready[0].id
    poll = float(os.environ.get(C.ENV_PARTITION_POLL_SECONDS, "60"))
    followed = parts.follow_partitions(
        cfg.data_path,
        start,
        cfg.end_date_hour or None,
        poll_interval=poll,
        hdfs_ugi=cfg.hdfs_ugi,
    )
    for i, part in enumerate(followed):
        yield Partition(part.id, i, parts.data_files(part, cfg.hdfs_ugi))


def partition_batches(
    cfg: TrainConfig,
    part: Partition,
    renv: role_env.RoleEnv,
    synthetic: SyntheticPlan | None,
) -> Iterator:
    batch_size = cfg.model.batch_size
    if synthetic is not None:
        from elasticctr.train.synthetic import Synthetic

        gen = Synthetic(cfg.slots, seed=synthetic.seed)
        share = synthetic.samples // renv.trainers_num
        seed = synthetic.seed * 1_000_003 + part.index * 1009 + renv.index + 1
        yield from gen.batches(share, batch_size, seed)
        return
    from elasticctr.data.parser import iter_batches

    # Whole files per trainer, round-robin (leased byte ranges: the coordinator's job).
    for url in part.files[renv.index :: renv.trainers_num]:
        yield from iter_batches(
            url,
            cfg.slots,
            batch_size,
            sparse_dim=cfg.sparse_dim,
            max_error_rate=cfg.max_error_rate,
            hdfs_ugi=cfg.hdfs_ugi,
        )


# --- trainer ----------------------------------------------------------------------------


@dataclass
class TrainerOptions:
    synthetic: SyntheticPlan | None = None
    staging: Path | None = None
    pserver_wait: float = C.DEFAULT_PSERVER_WAIT_SECONDS
    log_every: int = 50
    results: Path | None = None  # trainer 0 appends one JSON line per exported partition
    checkpoint_dir: Path | None = None  # where trainer 0 keeps the latest checkpoint
    checkpoint_every: int = 1  # partitions between checkpoints ...
    checkpoint_minutes: float | None = None  # ... or minutes since the last one
    resume: bool = False  # load the checkpoint and skip the partitions it covers


CHECKPOINT_PROGRESS = "progress.json"


def read_checkpoint(checkpoint_dir: Path) -> dict | None:
    """The latest complete checkpoint's progress ({"version", "index", ...}) or None."""
    import json

    path = Path(checkpoint_dir) / "ps" / CHECKPOINT_PROGRESS
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise EctlError(f"checkpoint progress {path} is unreadable: {exc}") from None


def write_checkpoint(checkpoint_dir: Path, dump_ps: Path, progress: dict) -> None:
    """Replace the checkpoint with this PS dump + progress; the swap is two renames."""
    import json

    checkpoint_dir = Path(checkpoint_dir)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    fresh, current, old = (checkpoint_dir / n for n in ("ps.new", "ps", "ps.old"))
    for stale in (fresh, old):
        shutil.rmtree(stale, ignore_errors=True)
    shutil.copytree(dump_ps, fresh)
    (fresh / CHECKPOINT_PROGRESS).write_text(json.dumps(progress, indent=2) + "\n")
    if current.exists():
        current.rename(old)
    fresh.rename(current)
    shutil.rmtree(old, ignore_errors=True)


def start_worker(renv: role_env.RoleEnv, pserver_wait: float, note: str = ""):
    """A trainer's start: run the startup program, wait until every pserver listens,
    `fleet.init_worker()`; returns (paddle, fleet, place, executor)."""
    paddle = _paddle()
    import paddle.distributed.fleet as fleet

    place = paddle.CPUPlace()
    exe = paddle.static.Executor(place)
    exe.run(paddle.static.default_startup_program())
    waited = role_env.wait_for_endpoints(renv.pserver_endpoints, pserver_wait)
    log(f"all pservers reachable after {waited:.1f}s")
    t_init = time.monotonic()
    fleet.init_worker()
    log(f"worker initialised in {time.monotonic() - t_init:.1f}s{note}")
    return paddle, fleet, place, exe


def _dense_puller():
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


def _dense_names() -> list[str]:
    """Dense parameter names in the order the pservers' dense table stores them."""
    import paddle.distributed.fleet as fleet
    from paddle.distributed.ps.utils.public import get_the_one_recv_context

    rt = fleet.fleet._runtime_handle
    dense_map = get_the_one_recv_context(rt.context, split_dense_table=rt.is_heter_ps_mode)
    names: list[str] = []
    for table_id in sorted(dense_map):
        names.extend(dense_map[table_id])
    return names


def _save_dense(exe, net: Net, dump_dir: Path, names: list[str], out_dir: Path) -> dict:
    """Dense inference model from the pservers' dump (the same snapshot as the sparse dump).

    Reading the dump rather than pulling into this trainer's scope keeps sparse and dense
    of one version consistent and never touches the parameters the trainer is using.
    """
    paddle = _paddle()
    block = net.infer_program.global_block()
    shapes = {n: tuple(block.var(n).shape) for n in names}
    params = export.read_dense_dump(dump_dir / "ps", names, shapes)
    scope = paddle.static.Scope()
    place = paddle.CPUPlace()
    with paddle.static.scope_guard(scope):
        for name, value in params.items():
            scope.var(name).get_tensor().set(value, place)
        out_dir.mkdir(parents=True, exist_ok=True)
        paddle.static.save_inference_model(
            str(out_dir / "model"), [net.pooled], [net.prob], exe, program=net.infer_program
        )
    return {
        "path": "dense",
        "prefix": "dense/model",
        "input": net.pooled.name,
        "input_shape": [-1, *list(net.pooled.shape[1:])],
        "output": net.prob.name,
    }


def evaluate_version(version_dir: Path, batches: list) -> dict:
    """AUC/logloss of an exported version on batches: numpy lookup + the saved dense model."""
    paddle = _paddle()
    manifest = versions.verify_version(version_dir)
    parts = versions.sparse_parts(manifest, str(version_dir))
    keys = np.concatenate([np.load(version_dir / k) for k, _ in parts])
    values = np.concatenate([np.load(version_dir / v) for _, v in parts])
    exe = paddle.static.Executor(paddle.CPUPlace())
    scope = paddle.static.Scope()
    labels, probs = [], []
    with paddle.static.scope_guard(scope):
        program, feeds, fetches = paddle.static.load_inference_model(
            str(version_dir / manifest["dense"]["prefix"]), exe
        )
        for batch in batches:
            pooled = export.pool(keys, values, batch)
            (prob,) = exe.run(program, feed={feeds[0]: pooled}, fetch_list=fetches)
            labels.append(batch.click)
            probs.append(np.asarray(prob).reshape(-1))
    label = np.concatenate(labels) if labels else np.zeros(0)
    prob = np.concatenate(probs) if probs else np.zeros(0)
    return {
        "auc": metrics.auc(label, prob),
        "logloss": metrics.logloss(label, prob),
        "eval_samples": int(label.size),
    }


def run_trainer(cfg: TrainConfig, renv: role_env.RoleEnv, opts: TrainerOptions) -> dict:
    """Train every planned partition; trainer 0 exports each. Returns the last metrics."""
    log(
        f"trainer {renv.index}/{renv.trainers_num}: model {cfg.model.name}, "
        f"pservers {','.join(renv.pserver_endpoints)}"
    )
    # pserver 0 hosts the rendezvous store the trainers' barriers are set up through.
    role_env.wait_for_endpoints([renv.gloo_endpoint], opts.pserver_wait, what="rendezvous")
    net = _init_fleet(renv, cfg.model, len(cfg.slots), per_slot=cfg.threads > 0)
    paddle, fleet, place, exe = start_worker(renv, opts.pserver_wait)
    dense_names = _dense_names()
    pull_dense = _dense_puller()
    feed = native_feed(cfg, net)
    pull_every = int(os.environ.get(C.ENV_DENSE_PULL_EVERY, DENSE_PULL_EVERY))
    main = paddle.static.default_main_program()
    is_chief = renv.index == 0
    staging = Path(opts.staging or os.environ.get(C.ENV_TRAIN_STAGING) or "/tmp/ectl-staging")
    tracker = _Tracker(cfg, renv) if is_chief else None
    last: dict = {}
    resume_after = _maybe_resume(opts)
    since_checkpoint, checkpoint_at = 0, time.monotonic()
    try:
        for part in plan_partitions(cfg, opts.synthetic):
            if resume_after is not None and part.version_id <= resume_after:
                continue
            heldout, n, losses, t0 = [], 0, [], time.monotonic()
            train_labels, train_probs = [], []
            meter = metrics.ResourceMeter()
            share = part.files[renv.index :: renv.trainers_num]
            native_done = False
            if feed is not None and opts.synthetic is None and native.can_read(share):
                # Native pipeline: held-out = the feature-hash rule (1 in 10) on trainer 0.
                result = feed.run(
                    exe,
                    main,
                    [native.Range(u) for u in share],
                    labels=share,
                    heldout="save" if is_chief else "all",
                    loss_var=net.loss,
                    every=pull_dense,
                    every_seconds=dense_pull_seconds(),
                    max_error_rate=cfg.max_error_rate,
                )
                n, losses, native_done = result.trained, result.losses, True
                train_labels, train_probs = result.labels, result.probs
                # The reader's rows must be in this partition's dump ("exports hold every
                # trained row"): the worker's sparse pushes are queued; flush them (the
                # dense ones went synchronously with each batch of train_from_dataset).
                fleet.fleet._runtime_handle._worker.client_flush()
                log(f"{part.version_id}: native pipeline, {result.ticks} dense pulls")
                heldout = native.parse_heldout(
                    result.heldout_text, cfg.slots, cfg.sparse_dim, cfg.model.batch_size
                )
            batches = () if native_done else partition_batches(cfg, part, renv, opts.synthetic)
            for i, batch in enumerate(batches):
                if is_chief and i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1:
                    heldout.append(batch)
                    continue
                loss, prob = exe.run(
                    main, feed=feed_of(net, batch, place), fetch_list=[net.loss, net.prob]
                )
                n += len(batch)
                if len(losses) % pull_every == 0:
                    pull_dense()
                losses.append(float(np.asarray(loss)))
                train_labels.append(batch.click)
                train_probs.append(np.asarray(prob).reshape(-1))
                if opts.log_every and len(losses) % opts.log_every == 0:
                    log(f"{part.version_id} step {len(losses)} loss {np.mean(losses[-50:]):.4f}")
            # Not flushed: the PS client's queued sparse pushes may miss this dump (they
            # land in the next one). Flushing them alone made the export inconsistent —
            # the dense pushes, queued by the communicator, cannot be flushed — and
            # miscalibrated it (held-out logloss 0.66-0.79 vs 0.60-0.61; docs/training.md).
            elapsed = max(time.monotonic() - t0, 1e-9)
            rate = n / elapsed
            log(f"{part.version_id}: trained {n} samples in {elapsed:.1f}s ({rate:.0f}/s)")
            # Every trainer finished its share: snapshot the tables (pservers write them).
            totals = fleet.util.all_reduce(np.array([n, rate], dtype=np.float64), "sum")
            dump_dir = staging / part.version_id.replace("/", "-")
            if is_chief and dump_dir.exists():
                shutil.rmtree(dump_dir)
            fleet.barrier_worker()
            t_save = time.monotonic()
            fleet.save_persistables(exe, str(dump_dir / "ps"), mode=0)
            log(f"{part.version_id}: tables dumped in {time.monotonic() - t_save:.1f}s")
            if not is_chief:
                continue
            dense_meta = _save_dense(exe, net, dump_dir, dense_names, dump_dir / "dense")
            quarter = max(1, len(losses) // 4)
            train = {
                "train_loss_first": float(np.mean(losses[:quarter])) if losses else float("nan"),
                "train_loss_last": float(np.mean(losses[-quarter:])) if losses else float("nan"),
                "train_auc": metrics.train_auc(train_labels, train_probs),
                "samples": int(totals[0]),
                "samples_per_sec": float(totals[1]),
                "samples_per_sec_per_trainer": float(totals[1] / renv.trainers_num),
                **meter.read(),  # trainer 0's CPU and peak memory over this partition
            }
            last = _export_partition(cfg, part, dump_dir, dense_meta, heldout, train)
            if tracker is not None:
                tracker.log(part, last)
                # After the version is published; never raises (a warning on failure).
                mv = tracker.register(part.version_id, last, dump_dir / "version")
                if mv is not None:
                    last["registered_version"] = str(mv.version)
            if opts.results is not None:
                import json

                with open(opts.results, "a") as fh:
                    fh.write(json.dumps({"version": part.version_id, **last}) + "\n")
            since_checkpoint += 1
            due_minutes = opts.checkpoint_minutes is not None and (
                time.monotonic() - checkpoint_at >= opts.checkpoint_minutes * 60
            )
            if opts.checkpoint_dir and (since_checkpoint >= opts.checkpoint_every or due_minutes):
                write_checkpoint(
                    opts.checkpoint_dir,
                    dump_dir / "ps",
                    {
                        "version": part.version_id,
                        "index": part.index,
                        "model": cfg.model.name,
                        "table_dim": cfg.model.table_dim,
                        "slots": list(cfg.slots),
                    },
                )
                since_checkpoint, checkpoint_at = 0, time.monotonic()
                log(f"{part.version_id}: checkpoint written to {opts.checkpoint_dir}")
            if not os.environ.get(C.ENV_TRAIN_KEEP_STAGING):
                shutil.rmtree(dump_dir, ignore_errors=True)
    finally:
        if tracker is not None:
            tracker.close()
    fleet.barrier_worker()
    fleet.stop_worker()
    log("trainer done")
    return last


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


def _maybe_resume(opts: TrainerOptions) -> str | None:
    """With --resume: load the checkpoint into the pservers (collective); return the last
    partition it covers, or None to start from the beginning."""
    if not opts.resume:
        return None
    if not opts.checkpoint_dir:
        raise EctlError("--resume needs a checkpoint folder (--checkpoint-dir)")
    progress = read_checkpoint(opts.checkpoint_dir)
    if progress is None:
        log(f"no checkpoint in {opts.checkpoint_dir}: starting from the first partition")
        return None
    import paddle.distributed.fleet as fleet

    t0 = time.monotonic()
    fleet.load_model(str(Path(opts.checkpoint_dir) / "ps"), mode=0)
    _dense_puller()()
    log(f"resumed from checkpoint {progress['version']} in {time.monotonic() - t0:.1f}s")
    return str(progress["version"])


def model_store(cfg: TrainConfig) -> modelstore.ModelStore:
    """The job's model store, opened with the fileserver token and HDFS user."""
    return modelstore.open_store(cfg.model_store, hdfs_ugi=cfg.hdfs_ugi)


def _export_partition(
    cfg: TrainConfig, part: Partition, dump_dir: Path, dense_meta: dict, heldout: list, train: dict
) -> dict:
    t0 = time.monotonic()
    keys, values = export.read_sparse_dump(dump_dir / "ps" / "000", cfg.model.table_dim)
    # Keys are the feasigns as trained: already reduced modulo SPARSE_DIM by the parser.
    local = dump_dir / "version"
    meta = {
        **shape.version_facts(cfg),
        "dense": dense_meta,
        "metrics": {k: v for k, v in train.items()},
    }
    manifest = export.build_version(
        local,
        version_id=part.version_id,
        dense_dir=dump_dir / "dense",
        keys=keys,
        values=values,
        meta=meta,
    )
    evaluated = evaluate_version(local, heldout)
    # Metrics of the exported version itself go into the manifest (rebuild: sha changes).
    meta["metrics"].update(evaluated)
    manifest = export.build_version(
        local,
        version_id=part.version_id,
        dense_dir=dump_dir / "dense",
        keys=keys,
        values=values,
        meta=meta,
    )
    target = ""
    if cfg.model_store:
        target = model_store(cfg).publish(local, part.version_id)
    result = {
        **meta["metrics"],
        "sparse_rows": manifest["sparse"]["rows"],
        "manifest_sha256": versions.sha256_file(local / versions.MANIFEST),
        "export_seconds": time.monotonic() - t0,
        "exported_to": target,
    }
    log(
        f"{part.version_id}: held-out auc {evaluated['auc']:.4f} logloss "
        f"{evaluated['logloss']:.4f} on {evaluated['eval_samples']} samples; "
        f"{keys.size} sparse rows -> {target or '(no model store)'}"
    )
    return result


class _Tracker:
    """MLflow run of this training job (trainer 0 only); a no-op without a tracking URI.

    The run starts at the first logged partition, not at start-up. `submit` runs MLflow
    calls on the tracker's own thread, in order, so training never waits for the tracking
    server: with MLflow down (seen on the one-node cluster: its pod OOM-killed) the client
    retries each call for minutes, which stalled every trainer behind trainer 0's export.
    """

    def __init__(self, cfg: TrainConfig, renv: role_env.RoleEnv):
        self.cfg, self.renv = cfg, renv
        self.run = None
        self._queue: queue.Queue | None = None
        self._worker: threading.Thread | None = None

    def submit(self, what: str, fn, *args) -> None:
        """Run fn(*args) on the tracker's thread; a failure is logged as a warning."""
        if not self.cfg.mlflow_uri:
            return
        if self._worker is None:
            self._queue = queue.Queue()
            self._worker = threading.Thread(target=self._drain, name="mlflow", daemon=True)
            self._worker.start()
        self._queue.put((what, fn, args))

    def _drain(self) -> None:
        while (item := self._queue.get()) is not None:
            what, fn, args = item
            try:
                fn(*args)
            except Exception as exc:  # noqa: BLE001 - tracking must not stop training
                log(f"WARNING: MLflow {what} failed: {type(exc).__name__}: {exc}")

    def _start(self) -> None:
        import mlflow

        cfg, renv = self.cfg, self.renv
        if cfg.mlflow_uri.startswith(("http://", "https://")):
            # A server that is still starting (local mode starts it beside training):
            # poll /health every 0.5 s instead of mlflow's exponential retry backoff,
            # which waits up to twice as long as the server took to come up.
            from elasticctr.net import wait_http_ok

            try:
                wait_http_ok(f"{cfg.mlflow_uri.rstrip('/')}/health", timeout=300, what="MLflow")
            except EctlError as exc:
                log(f"{exc}; trying MLflow's own client")
        mlflow.set_tracking_uri(cfg.mlflow_uri)
        experiment = mlflow.set_experiment(os.environ.get(C.ENV_MLFLOW_EXPERIMENT, "elasticctr"))
        if C.MLFLOW_EXPERIMENT_KIND_TAG not in experiment.tags:  # a person's choice stays
            mlflow.set_experiment_tag(C.MLFLOW_EXPERIMENT_KIND_TAG, C.MLFLOW_EXPERIMENT_KIND)
        self.mlflow = mlflow
        self.run = mlflow.start_run(run_name=f"train-{cfg.model.name}")
        params = {f"model.{k}": str(v) for k, v in cfg.model.params.items()}
        params.update(
            {
                "model.name": cfg.model.name,
                "slots": len(cfg.slots),
                "pservers": len(renv.pserver_endpoints),
                "trainers": renv.trainers_num,
                "data.path": cfg.data_path or "(synthetic)",
            }
        )
        mlflow.log_params(params)

    def log(self, part: Partition, result: dict) -> None:
        if not self.cfg.mlflow_uri:
            return
        if self.run is None:
            self._start()
        numeric = {
            k: float(v)
            for k, v in result.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v)
        }
        self.mlflow.log_metrics(numeric, step=part.index)
        self.mlflow.set_tag("last_version", part.version_id)

    def register(self, version_id: str, result: dict, version_dir: Path):
        """Register the published version (`result["exported_to"]`) in the MLflow model
        registry under this run (elasticctr.train.registry); None when there is nothing
        to register or registration failed (logged as a warning, never raised)."""
        if not self.cfg.mlflow_uri or not result.get("exported_to"):
            return None
        from elasticctr.train import registry

        run_id = self.run.info.run_id if self.run is not None else None
        return registry.register_version(
            self.cfg.mlflow_uri,
            version_id,
            result["exported_to"],
            Path(version_dir) / versions.MANIFEST,
            run_id=run_id,
            log=log,
        )

    def close(self, timeout: float | None = None) -> None:
        """End the run after the queued updates; wait at most `timeout` seconds
        ($ELASTICCTR_MLFLOW_FLUSH_SECONDS, 120) for them, then give up with a warning."""
        if self._worker is not None:
            if timeout is None:
                timeout = float(
                    os.environ.get(C.ENV_MLFLOW_FLUSH_SECONDS, C.DEFAULT_MLFLOW_FLUSH_SECONDS)
                )
            self._queue.put(("end of run", self._end, ()))
            self._queue.put(None)
            self._worker.join(timeout)
            if self._worker.is_alive():
                log(
                    f"WARNING: MLflow at {self.cfg.mlflow_uri} did not take "
                    f"{self._queue.qsize()} queued update(s) within {timeout:.0f}s; "
                    "they are dropped (the model versions stay published)"
                )
            return
        self._end()

    def _end(self) -> None:
        if self.run is not None:
            self.mlflow.end_run()
            self.run = None


def main_pserver(cfg: TrainConfig) -> None:
    renv = role_env.resolve(role=C.ROLE_PSERVER)
    run_pserver(cfg, renv)


def main_trainer(cfg: TrainConfig, opts: TrainerOptions) -> dict:
    renv = role_env.resolve(role=C.ROLE_TRAINER)
    return run_trainer(cfg, renv, opts)


if __name__ == "__main__":  # pragma: no cover - use `ectl train ...`
    sys.exit("use `ectl train pserver|trainer`")
