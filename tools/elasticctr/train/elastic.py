"""Elastic trainer: leases data tasks from the coordinator instead of static file splits.

No trainer-to-trainer collective is used (Paddle's gloo is switched off for elastic
trainers: Fleet's barriers then return at once), so a trainer that dies, leaves or
joins late never blocks the others. What the collectives did is done otherwise:

- which trainer pushes the initial dense parameters: Paddle's trainer 0. Elastic
  trainer 0 is Paddle's trainer 0 only while the coordinator reports nothing trained
  yet; any other (or restarted) trainer pulls the parameters instead of overwriting them.
- the table dump before an export: the coordinator gives the export to one trainer
  (the chief) once every task of the partition is done; it alone asks the pservers to
  dump (`save_all_model`, which Fleet's `save_persistables` would gate on Paddle
  trainer 0), then exports the hour (`export.export_partition`).
- the held-out set: a sample is held out when a hash of its features says so
  (`heldout_mask`), so it does not depend on which trainer trained which task; trainers
  skip those rows and the exporter re-reads them from the partition's files.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from elasticctr import constants as C
from elasticctr import versions
from elasticctr.coordinator.client import CoordinatorClient
from elasticctr.coordinator.core import CHECKPOINT_STATE
from elasticctr.data import storage
from elasticctr.errors import EctlError
from elasticctr.train import env as role_env
from elasticctr.train import export, feeds, metrics, native, program
from elasticctr.train.config import TrainConfig
from elasticctr.train.tracking import Tracker

MAX_READ_ATTEMPTS = 3
"""A task whose range cannot be read (file truncated or removed, store unreachable) is
given back to the coordinator this many times (attempts, whoever made them); the trainer
holding it then fails with the read error instead of giving it back again."""
HOLDOUT_MOD = 10
"""One sample in HOLDOUT_MOD (by feature hash) is held out for evaluation."""
EVAL_MAX_SAMPLES = 200_000
"""The exporter evaluates at most this many held-out samples per partition."""

log = program.log


# --- held-out rule ------------------------------------------------------------------------


def _mix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def heldout_mask(batch) -> np.ndarray:
    """True for the samples every trainer skips and the exporter evaluates on.

    A function of the sample's features only (feasigns per slot), so the held-out set
    is the same however the data is split into tasks and whoever trains them.
    """
    n = len(batch)
    h = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j, (ids, lengths) in enumerate(zip(batch.ids, batch.lengths, strict=True)):
            mixed = _mix(np.asarray(ids, dtype=np.uint64) + np.uint64(2 * j + 1))
            owner = np.repeat(np.arange(n), np.asarray(lengths, dtype=np.int64))
            sums = np.zeros(n, dtype=np.uint64)
            np.add.at(sums, owner, mixed)
            h = _mix(h ^ sums ^ np.uint64(j + 1))
    return h % np.uint64(HOLDOUT_MOD) == 0


def take(batch, mask: np.ndarray):
    """The samples of `batch` where `mask` is true, same layout."""
    from elasticctr.data.parser import SlotBatch

    ids, lengths = [], []
    for slot_ids, slot_len in zip(batch.ids, batch.lengths, strict=True):
        owner = np.repeat(np.arange(len(batch)), np.asarray(slot_len, dtype=np.int64))
        ids.append(slot_ids[mask[owner]])
        lengths.append(slot_len[mask])
    return SlotBatch(batch.slots, ids, lengths, batch.show[mask], batch.click[mask])


def _read(cfg: TrainConfig, url: str, start: int = 0, end: int | None = None):
    from elasticctr.data.parser import iter_batches

    return iter_batches(
        url,
        cfg.slots,
        cfg.model.batch_size,
        sparse_dim=cfg.sparse_dim,
        max_error_rate=cfg.max_error_rate,
        hdfs_ugi=cfg.hdfs_ugi,
        start=start,
        end=end,
    )


def heldout_batches(cfg: TrainConfig, partition: str) -> list:
    """The held-out samples of one partition, re-read from its files (in file order)."""
    from elasticctr.data import partitions as parts

    found = [p for p in parts.list_partitions(cfg.data_path, partition, partition, cfg.hdfs_ugi)]
    if not found:
        raise EctlError(f"partition {partition} not found under {cfg.data_path}")
    urls = parts.data_files(found[0], cfg.hdfs_ugi)
    if cfg.threads > 0 and native.can_read(urls):
        # The compiled reader picks the held-out lines (10%; stored files streamed to it);
        # Python parses only those.
        text = native.heldout_lines(
            [native.Range(u) for u in urls], cfg.slots, cfg.sparse_dim, cfg.hdfs_ugi
        )
        batches = native.parse_heldout(text, cfg.slots, cfg.sparse_dim, cfg.model.batch_size)
        out, total = [], 0
        for batch in batches:
            out.append(batch.slice(0, EVAL_MAX_SAMPLES - total))
            total += len(out[-1])
            if total >= EVAL_MAX_SAMPLES:
                break
        return out
    out, total = [], 0
    for url in urls:
        for batch in _read(cfg, url):
            held = take(batch, heldout_mask(batch))
            if len(held):
                out.append(held)
                total += len(held)
            if total >= EVAL_MAX_SAMPLES:
                return out
    return out


# --- Paddle without collectives -------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _ElasticEnv:
    """The role env as Paddle sees it in elastic mode: no gloo, own Paddle trainer id."""

    base: role_env.RoleEnv
    paddle_id: int

    def paddle_env(self) -> dict[str, str]:
        env = self.base.paddle_env()
        env[C.ENV_WITH_GLOO] = "0"
        env[C.ENV_TRAINER_ID] = str(self.paddle_id)
        env[C.ENV_TRAINERS_NUM] = str(max(self.base.trainers_num, self.paddle_id + 1))
        return env


def _fresh_job(progress: dict) -> bool:
    if progress.get("load_pending"):
        return False
    return not progress.get("tasks_done") and not any(
        p.get("exported") for p in progress.get("partitions", [])
    )


class _Heartbeat:
    """Heartbeats the current lease from a thread; `lost` is set when it is refused.

    With a `native.Lease` file (native pipeline) every accepted heartbeat renews the
    file and a refused one removes it: the readers then stop mid-range."""

    def __init__(self, client: CoordinatorClient):
        self.client = client
        self.lease: str | None = None
        self.fence: native.Lease | None = None
        self.every = 1.0
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def track(
        self,
        lease: str | None,
        lease_seconds: float | None = None,
        fence: native.Lease | None = None,
    ) -> None:
        with self._lock:
            if self.fence is not None:
                self.fence.lose()
            self.lease, self.fence = lease, fence
            if lease_seconds:
                self.every = max(0.2, lease_seconds / 4)
            self.lost.clear()
            if fence is not None:
                fence.renew()  # the lease was granted just now

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            with self._lock:
                lease = self.lease
            if lease is None:
                continue
            try:
                ok = self.client.heartbeat(lease)
            except EctlError as exc:
                log(f"heartbeat failed: {exc}")
                ok = False
            with self._lock:
                if self.lease != lease:
                    continue  # the answer is about a task done meanwhile
                if ok and self.fence is not None:
                    self.fence.renew()
                elif not ok:
                    self.lost.set()
                    if self.fence is not None:
                        self.fence.lose()

    def close(self) -> None:
        self._stop.set()


_KEEPALIVE = """
import sys, time
from elasticctr.coordinator.client import CoordinatorClient
url, trainer, what, every = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
client = CoordinatorClient(url, trainer, retry_seconds=every)
while True:
    try:
        client.heartbeat(what)
    except Exception as exc:  # the coordinator restarting: keep trying
        print(f"keep-alive: {exc}", file=sys.stderr, flush=True)
    time.sleep(every)
"""


class _keep_alive:
    """Heartbeats from a child process while the chief exports.

    A lease-less heartbeat keeps this trainer the live chief; without it an export
    longer than `lease_seconds` is handed to a second trainer too (seen: two exporters
    dumping into one folder). A thread cannot do it: Paddle's table-save call holds the
    GIL for its whole duration (seconds), so the heartbeat thread does not run.
    """

    def __init__(self, url: str, trainer: str, partition: str, every: float):
        self.argv = [sys.executable, "-c", _KEEPALIVE, url, trainer, f"export:{partition}"]
        self.argv.append(str(every))

    def __enter__(self):
        import subprocess

        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait()


@dataclasses.dataclass
class ElasticOptions:
    coordinator: str
    staging: Path | None = None
    pserver_wait: float = C.DEFAULT_PSERVER_WAIT_SECONDS
    results: Path | None = None
    checkpoint_dir: Path | None = None
    log_every: int = 50


def run(cfg: TrainConfig, renv: role_env.RoleEnv, opts: ElasticOptions) -> dict:
    """Lease tasks until the coordinator says `finished`; export when asked (chief)."""
    name = str(renv.index)
    client = CoordinatorClient(opts.coordinator, name)
    progress = client.progress()
    paddle_id = 0 if renv.index == 0 and _fresh_job(progress) else renv.index + 1
    log(
        f"elastic trainer {name} (paddle id {paddle_id}): coordinator {opts.coordinator}, "
        f"pservers {','.join(renv.pserver_endpoints)}"
    )
    stopping = threading.Event()

    def on_term(signum, _frame) -> None:
        # Preemption notice: give the leases back at once, then leave.
        stopping.set()
        try:
            requeued = client.leave()
            log(f"SIGTERM: left the job, {requeued} task(s) re-queued")
        finally:
            os._exit(C.EXIT_STOPPED)

    net = program.init_fleet(
        _ElasticEnv(renv, paddle_id), cfg.model, len(cfg.slots), per_slot=cfg.threads > 0
    )
    signal.signal(signal.SIGTERM, on_term)  # after importing paddle, which installs its own
    paddle, fleet, place, exe = program.start_worker(renv, opts.pserver_wait, " (no collectives)")
    runtime = fleet.fleet._runtime_handle
    dense_names = program.dense_names()
    pull_dense = program.dense_puller()
    feed = program.native_feed(cfg, net)
    if cfg.data_path:
        storage.connect(cfg.data_path, cfg.hdfs_ugi)  # the store client, before any lease
    # After a job restart one trainer loads the checkpoint first; until then the dense
    # table is empty, so the wait for it moves to the first task.
    dense_ready = bool(progress.get("load_pending"))
    if not dense_ready:
        _wait_dense_initialised(paddle, pull_dense, dense_names, opts.pserver_wait)
        dense_ready = True
    pull_every = int(os.environ.get(C.ENV_DENSE_PULL_EVERY, program.DENSE_PULL_EVERY))
    main = paddle.static.default_main_program()
    staging = Path(opts.staging or os.environ.get(C.ENV_TRAIN_STAGING) or "/tmp/ectl-staging")
    beat = _Heartbeat(client)
    tracker = None  # MLflow, from this trainer's first export on
    meter = metrics.ResourceMeter()
    stats: dict[str, dict] = {}  # per partition, this trainer's share
    last: dict = {}
    steps = 0
    try:
        while not stopping.is_set():
            answer = client.lease()
            kind = answer["kind"]
            if kind == "finished":
                break
            if kind == "wait":
                time.sleep(float(answer.get("seconds", 1.0)))
                continue
            if kind == "export":
                with _keep_alive(opts.coordinator, name, answer["partition"], beat.every):
                    last = _export(
                        cfg, exe, net, runtime, dense_names, answer, staging, stats, opts, meter
                    )
                client.exported(answer["partition"], answer["partition"], answer["checkpoint"])
                tracker = tracker or Tracker(cfg, renv)
                dump_dir = staging / answer["partition"].replace("/", "-")
                _track(tracker, client, answer["partition"], last, dump_dir / "version")
                if not os.environ.get(C.ENV_TRAIN_KEEP_STAGING):
                    shutil.rmtree(dump_dir, ignore_errors=True)
                continue
            if kind == "load":
                with _keep_alive(opts.coordinator, name, "load", beat.every):
                    _load_checkpoint(cfg, runtime, opts.checkpoint_dir, answer["version"])
                client.loaded(answer["version"])
                continue
            if kind != "task":
                raise EctlError(f"coordinator answered an unknown kind {kind!r}")
            if not dense_ready:
                _wait_dense_initialised(paddle, pull_dense, dense_names, opts.pserver_wait)
                dense_ready = True
            task, lease = answer["task"], answer["lease"]
            lease_seconds = float(answer.get("lease_seconds", C.DEFAULT_COORDINATOR_LEASE_SECONDS))
            native_task = feed is not None and native.can_read([task["url"]])
            fence = native.Lease(feed.workdir / "lease", lease_seconds) if native_task else None
            beat.track(lease, lease_seconds, fence)
            log(
                f"leased task {task['id']} bytes [{task['start']}, {task['end']}) "
                f"({'native' if native_task else 'Python'} reader)"
            )
            t0, n, abandoned, read_error = time.monotonic(), 0, False, None
            mine = _share(stats, task["partition"])
            batches = _read(cfg, task["url"], int(task["start"]), int(task["end"]))
            if native_task:
                # Native pipeline: the range in `threads` pieces, held-out samples skipped
                # by the reader (same hash rule). A lost lease (the heartbeat refused, or
                # none accepted for a lease period) stops the readers mid-range through
                # the lease file; the task is then abandoned (not completed).
                # A stored file's range is streamed to the readers; a read that fails
                # (ReadError) gives the task back below, nothing of it counted.
                rng = native.Range(
                    task["url"], int(task["start"]), int(task["end"]), int(task.get("size", -1))
                )
                try:
                    result = feed.run(
                        exe,
                        main,
                        [rng],
                        labels=[task["url"]],
                        heldout="skip",
                        loss_var=net.loss,
                        every=pull_dense,
                        every_seconds=program.dense_pull_seconds(),
                        max_error_rate=cfg.max_error_rate,
                        lease=fence,
                    )
                except native.ReadError as exc:
                    result, read_error = exc.result, exc
                n, batches = result.trained, ()
                steps += max(1, n // cfg.model.batch_size)
                mine["losses"].extend(result.losses)
                for label, prob in zip(result.labels, result.probs, strict=True):
                    mine["recent"].add(label, prob)
                abandoned = beat.lost.is_set() or result.stopped
                if result.stopped:
                    log(f"task {task['id']}: lease lost, the reader stopped mid-range")
            for batch in batches:
                if beat.lost.is_set():
                    abandoned = True
                    break
                batch = take(batch, ~heldout_mask(batch))
                if not len(batch):
                    continue
                loss, prob = exe.run(
                    main, feed=feeds.feed_of(net, batch, place), fetch_list=[net.loss, net.prob]
                )
                mine["recent"].add(batch.click, prob)
                if steps % pull_every == 0:
                    pull_dense()
                steps += 1
                n += len(batch)
                mine["losses"].append(float(np.asarray(loss)))
                if opts.log_every and steps % opts.log_every == 0:
                    log(f"step {steps} loss {np.mean(mine['losses'][-50:]):.4f}")
            beat.track(None)
            elapsed = time.monotonic() - t0
            if abandoned:
                log(f"task {task['id']}: lease lost after {n} samples; abandoned")
                continue
            if read_error is not None:
                _give_back(client, task, lease, read_error, n)
                continue
            # A task is done only once its updates are on the pservers: the PS client
            # queues sparse pushes, and a checkpoint taken after this `complete` must
            # hold them (the flush costs >= 0.1 s: Paddle polls every 100 ms).
            runtime._worker.client_flush()
            reply = client.complete(lease, n)
            mine["samples"] += n
            mine["secs"] += elapsed
            log(
                f"task {task['id']} (attempt {task.get('attempts')}): {n} samples in "
                f"{elapsed:.1f}s; accepted {reply.get('accepted')}"
            )
    finally:
        beat.close()
        if tracker is not None:
            tracker.close()
        if feed is not None:
            feed.close()  # its lease files and pipe folders under /tmp
    fleet.stop_worker()
    log("elastic trainer done")
    return last


def _give_back(client: CoordinatorClient, task: dict, lease: str, error, trained: int) -> None:
    """A task whose range could not be read: given back to the coordinator (retried by
    whoever asks next; its samples not counted), or, after MAX_READ_ATTEMPTS attempts,
    this trainer fails with the error (it restarts, or the job stops, with the reason)."""
    attempts = int(task.get("attempts") or 1)
    reason = f"task {task['id']} (attempt {attempts}): {error}"
    if attempts >= MAX_READ_ATTEMPTS:
        raise EctlError(
            f"{reason}; its range failed {attempts} times",
            hint="check that the file is complete and the store reachable",
        )
    log(f"{reason}; {trained} samples read before it failed are not counted, task given back")
    try:
        client.fail(lease, reason)
    except EctlError as exc:  # the lease then expires: retried all the same
        log(f"could not give task {task['id']} back: {exc}")
    time.sleep(attempts)  # not at once: the next lease may be this task again


KEEP_PARTITION_STATS = 4
"""A trainer keeps its share's statistics of this many most recent partitions (the
coordinator's window leases at most 2 at once; older ones are exported)."""


def _share(stats: dict, partition: str) -> dict:
    """This trainer's statistics of `partition` (losses, recent predictions, samples,
    seconds): what the chief's export reports as train_* metrics."""
    if partition not in stats:
        stats[partition] = {
            "losses": [], "recent": metrics.RecentBatches(), "samples": 0, "secs": 0.0,
        }  # fmt: skip
        for old in sorted(stats)[:-KEEP_PARTITION_STATS]:
            if old != partition:
                del stats[old]
    return stats[partition]


def _track(tracker, client: CoordinatorClient, partition: str, result: dict, version_dir) -> None:
    """MLflow: the version's metrics plus the coordinator's progress, then register the
    version (tracking.Tracker; a no-op without a tracking URI, never raises on
    registration). Step = the number of hours exported so far."""
    if not tracker.cfg.mlflow_uri:
        return
    try:
        progress = client.progress()
    except Exception as exc:  # noqa: BLE001 - progress is extra; the export is done
        log(f"{partition}: coordinator progress unavailable for MLflow: {exc}")
        progress = {"partitions": [], "trainers": {}}
    step = sum(1 for p in progress["partitions"] if p.get("exported"))
    logged = dict(result)
    if progress["trainers"]:
        logged.update(
            job_tasks_done=progress.get("tasks_done", 0),
            job_tasks_retried=progress.get("tasks_retried", 0),
            job_trainers=len(progress["trainers"]),
            job_samples_per_sec=sum(t["samples_per_s"] for t in progress["trainers"].values()),
        )
    # The staging copy of the version goes away after this call: keep the manifest the
    # registration reads (tags, sha256) in memory until the tracker's thread gets to it.
    manifest = Path(version_dir) / versions.MANIFEST
    manifest_bytes = manifest.read_bytes() if manifest.exists() else None
    tracker.submit(
        f"logging of {partition}", _log_and_register, tracker, partition, step, logged,
        result, manifest_bytes,
    )  # fmt: skip


def _log_and_register(tracker, partition, step, logged, result, manifest_bytes) -> None:
    """On the tracker's thread: the metrics, then the registration (never raises)."""
    tracker.log(partition, max(step - 1, 0), logged)
    if manifest_bytes is None:
        return
    with tempfile.TemporaryDirectory(prefix="ectl-register-") as tmp:
        (Path(tmp) / versions.MANIFEST).write_bytes(manifest_bytes)
        mv = tracker.register(partition, result, Path(tmp))
    if mv is not None:
        log(f"{partition}: registered as model version {mv.version}")


# --- checkpoints ---------------------------------------------------------------------


CHECKPOINT_PROGRESS = "progress.json"


def read_checkpoint(checkpoint_dir: Path) -> dict | None:
    """The latest complete checkpoint's progress ({"version", "model", ...}) or None."""
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


def _check_checkpoint_matches(cfg: TrainConfig, progress: dict, where: Path) -> None:
    """A checkpoint of another model layout cannot be loaded (values changed between the
    jobs): say what differs instead of letting the pservers read foreign tables."""
    wanted = {"model": cfg.model.name, "table_dim": cfg.model.table_dim, "slots": list(cfg.slots)}
    differs = [
        f"{key}: checkpoint {progress.get(key)!r}, values {value!r}"
        for key, value in wanted.items()
        if key in progress and progress[key] != value
    ]
    if differs:
        raise EctlError(
            f"the checkpoint in {where} was trained with another model layout ("
            + "; ".join(differs)
            + ")",
            hint="restore the previous values, or move the checkpoint folder away to start over",
        )


def _load_checkpoint(cfg: TrainConfig, runtime, checkpoint_dir: Path | None, version: str) -> None:
    """Load the checkpoint into the (restarted, empty) pservers: this trainer alone, no
    barrier (Fleet's `load_model` would wait at one and act on Paddle trainer 0 only)."""
    if checkpoint_dir is None:
        raise EctlError(
            f"the job restarts from checkpoint {version}, but this trainer has no checkpoint "
            f"folder (--checkpoint-dir or {C.ENV_TRAIN_CHECKPOINT})"
        )
    progress = read_checkpoint(checkpoint_dir)
    if progress is None or progress.get("version") != version:
        found = progress.get("version") if progress else "none"
        raise EctlError(
            f"the coordinator restarts from checkpoint {version}, but {checkpoint_dir} holds "
            f"{found}: every trainer must see the same checkpoint folder"
        )
    _check_checkpoint_matches(cfg, progress, checkpoint_dir)
    t0 = time.monotonic()
    runtime._worker.load_model(str(Path(checkpoint_dir) / "ps"), 0)
    log(f"loaded checkpoint {version} into the pservers in {time.monotonic() - t0:.1f}s")


def _dump_complete(ps_dir: Path) -> bool:
    sparse = list((ps_dir / "000").glob("part-*"))
    return len(sparse) >= program.SPARSE_SHARDS and bool(list((ps_dir / "001").glob("part-*")))


def _dump_tables(runtime, ps_dir: Path, timeout: float = 180.0) -> None:
    """Have the pservers dump every table into `ps_dir` (this trainer alone: Fleet's
    `save_persistables` would wait at a barrier and only act on Paddle trainer 0).

    Our pservers write plain text (`pserver.plain_table_dumps`), so the dump is written
    when the call returns (Paddle's gzip dumps were piped to gzip processes that could
    outlive it: the trainer used to wait for quiet files). What is left is to see every
    part on the staging volume shared with the pservers.
    """
    shutil.rmtree(ps_dir, ignore_errors=True)
    runtime._worker.save_all_model(str(ps_dir), 0)
    deadline = time.monotonic() + timeout
    while not _dump_complete(ps_dir):
        if time.monotonic() > deadline:
            raise EctlError(f"the pservers' dump in {ps_dir} is incomplete after {timeout:.0f}s")
        time.sleep(0.25)


def _export(cfg, exe, net, runtime, dense_names, answer, staging, stats, opts, meter) -> dict:
    """The chief's export of one fully trained partition (the coordinator's `export`)."""
    partition = answer["partition"]
    t0 = time.monotonic()
    dump_dir = staging / partition.replace("/", "-")
    shutil.rmtree(dump_dir, ignore_errors=True)
    runtime._worker.client_flush()
    _dump_tables(runtime, dump_dir / "ps")
    phases = {"dump": time.monotonic() - t0}
    log(f"{partition}: tables dumped in {phases['dump']:.1f}s")
    mark = time.monotonic()
    dense_meta = export.save_dense(exe, net, dump_dir, dense_names, dump_dir / "dense")
    heldout = heldout_batches(cfg, partition)
    phases["dense+heldout"] = time.monotonic() - mark
    mine = _share(stats, partition)
    losses = mine["losses"]
    quarter = max(1, len(losses) // 4)
    train = {
        "train_loss_first": float(np.mean(losses[:quarter])) if losses else float("nan"),
        "train_loss_last": float(np.mean(losses[-quarter:])) if losses else float("nan"),
        # the chief's share: the last quarter of its batches of this partition
        "train_auc": mine["recent"].auc(),
        "samples_chief": int(mine["samples"]),
        "samples_per_sec_per_trainer": mine["samples"] / mine["secs"] if mine["secs"] else 0.0,
        **meter.read(),  # this trainer's CPU and peak memory since its last export
    }
    meter.reset()
    if cfg.model_store and export.model_store(cfg).has_version(partition):
        # Exported before the job restarted from an older checkpoint: a published version
        # is immutable (cube and serving may hold it), so the retrained one is not.
        log(f"{partition}: already published before the job restart; keeping that version")
        result = {"republished": False, **train}
    else:
        result = export.export_partition(
            cfg, partition, dump_dir, dense_meta, heldout, train, answer.get("timeline")
        )
        phases["version"] = result["export_seconds"]
    if opts.results is not None:
        import json

        with open(opts.results, "a") as fh:
            fh.write(json.dumps({"version": partition, **result}) + "\n")
    mark = time.monotonic()
    if answer.get("checkpoint") and opts.checkpoint_dir:
        # The coordinator's progress at the dump travels inside the checkpoint's ps/.
        (dump_dir / "ps" / CHECKPOINT_STATE).write_text(answer["state"])
        write_checkpoint(
            opts.checkpoint_dir,
            dump_dir / "ps",
            {
                "version": partition,
                "model": cfg.model.name,
                "table_dim": cfg.model.table_dim,
                "slots": list(cfg.slots),
            },
        )
        log(f"{partition}: checkpoint written to {opts.checkpoint_dir}")
        phases["checkpoint"] = time.monotonic() - mark
    log(
        f"{partition}: export took {time.monotonic() - t0:.1f}s ("
        + ", ".join(f"{k} {v:.1f}s" for k, v in phases.items())
        + ")"
    )
    return result


def _wait_dense_initialised(paddle, pull_dense, names: list[str], timeout: float) -> None:
    """Pull the dense parameters until Paddle trainer 0 has pushed its initial values.

    Without the start-up barrier a trainer can be faster than the one that initialises
    the pservers' dense table (still all zeros then); training from zeros and having
    the initial values overwrite the result later cost ~0.1 AUC on the test data.
    A model whose initial dense values are all zero (`lr`: one bias) has nothing to wait
    for: zeros are what trainer 0 pushes.
    """
    scope = paddle.static.global_scope()
    if not any(np.any(np.asarray(scope.find_var(n).get_tensor())) for n in names):
        return
    deadline = time.monotonic() + timeout
    while True:
        pull_dense()
        if any(np.any(np.asarray(scope.find_var(n).get_tensor())) for n in names):
            return
        if time.monotonic() > deadline:
            raise EctlError(f"the dense parameters were not initialised within {timeout:.0f}s")
        time.sleep(0.5)


def main(cfg: TrainConfig, opts: ElasticOptions) -> dict:
    renv = role_env.resolve(role=C.ROLE_TRAINER)
    return run(cfg, renv, opts)


if __name__ == "__main__":  # pragma: no cover - use `ectl train trainer --coordinator`
    sys.exit("use `ectl train trainer --coordinator URL`")
