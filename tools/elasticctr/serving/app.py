"""The prediction service: routes, dynamic batcher, version switching, metrics.

Request path: decode (with the parser of the version current at arrival) → queue →
the batcher takes every queued request of that same version object (up to
`max_batch_samples`) → one cube lookup of the batch's unique keys, pinned to that version
on all shards in parallel → pool + dense forward (`Scorer`) → each request gets its
slice of the probabilities and the version that produced them.

Version switch: `POST /admin/version` (cube-transfer's notify) or the poller (cube's
committed version, or the newest version in the store with local embeddings) loads the
dense model of V, verified by sha256, and only then replaces `current` in one
assignment. A batch holds its version object from decode to response, so a request is
served entirely by one version; if cube no longer holds it, the request is decoded and
run again on the new version (once), never mixed.

Scenarios (docs/platform.md): one `VersionManager` per scenario of the platform, each
with its own store prefix, cube table, MLflow names and current version, found by
`ScenarioSet.discover` (the tables cube holds, or the store's scenario folders without
cube). `/v1/predict` is the default scenario's; `/v1/scenarios/{name}/predict` another's.
One scenario's broken version or missing table never changes another's answers.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest

from elasticctr import metrics as M
from elasticctr import scenarios
from elasticctr.constants import (
    SERVING_MAX_BATCH_SAMPLES,
    SERVING_MAX_QUEUE_SAMPLES,
    SERVING_MAX_WAIT_MS,
)
from elasticctr.data.parser import LineParser, SlotBatch
from elasticctr.errors import EctlError, ValidationError
from elasticctr.httpd import INTERNAL_MESSAGE, HttpStats, Request, Response, bearer_ok
from elasticctr.serving import store
from elasticctr.serving.embeddings import (
    CubeEmbeddings,
    CubeUnavailable,
    LocalEmbeddings,
    TableEmbeddings,
    VersionUnavailable,
    committed_of,
    tables_of,
)
from elasticctr.serving.model import (
    DENSE_DIR,
    DenseModel,
    LocalTable,
    Scorer,
    VersionInfo,
    read_manifest,
    sparse_parts,
)
from elasticctr.serving.samples import (
    CT_LINES,
    Limits,
    RequestError,
    decode,
    parse_checked,
    prepare,
)

log = logging.getLogger("elasticctr.serving")

NO_MODEL_YET = "no model version yet (training has not published one, or cube has not committed it)"


@dataclass
class ServeConfig:
    store: str
    cube: list[str] = field(default_factory=list)  # empty = local embeddings
    cache: Path = Path(".elasticctr/serving-cache")
    version: str | None = None  # start on this version (else cube's committed / newest)
    token: str | None = None
    max_batch_samples: int = SERVING_MAX_BATCH_SAMPLES
    max_wait_ms: float = SERVING_MAX_WAIT_MS
    max_queue_samples: int = SERVING_MAX_QUEUE_SAMPLES
    max_inflight_batches: int = 1
    poll_interval: float = 2.0
    cube_timeout: float = 5.0
    mlflow_tracking_uri: str | None = None  # log each version served as a pyfunc model
    mlflow_model_name: str | None = None  # ... and register it under this name
    limits: Limits = field(default_factory=Limits)
    scenarios: bool = False  # serve every scenario of the platform, not only the default
    # Drain on SIGTERM (docs/serving.md "Drain"): not ready at once, keep answering new
    # connections for `drain_seconds`, then stop listening and let requests in progress
    # finish for up to `drain_timeout` seconds.
    drain_seconds: float = 0.0
    drain_timeout: float = 20.0


class ServingVersion:
    """Everything of one version a request needs; immutable once published."""

    def __init__(self, info: VersionInfo, scorer: Scorer, embeddings, loaded_at: float):
        self.info = info
        self.version = info.version
        self.scorer = scorer
        self.parser = LineParser(info.slots, info.sparse_dim)
        self.embeddings = embeddings
        self.loaded_at = loaded_at

    async def predict(self, batch: SlotBatch, lookup_seconds=None) -> np.ndarray:
        keys, inverse = Scorer.keys_of(batch)
        t0 = time.perf_counter()
        rows = await self.embeddings.lookup(keys, self.version, self.info.dim)
        if lookup_seconds is not None:
            lookup_seconds.observe(time.perf_counter() - t0)
        return self.scorer.score(batch, inverse, rows)


class Metrics:
    """Serving's families (names: elasticctr.metrics). The per-scenario version gauges
    are read at scrape time from the scenarios' current versions (`_ScrapeCollector`)."""

    def __init__(self):
        self.registry = r = CollectorRegistry()
        self.requests = M.SERVING_REQUESTS.metric(r)
        self.errors = M.SERVING_ERRORS.metric(r)
        self.samples = M.SERVING_SAMPLES.metric(r)
        self.latency = M.SERVING_PREDICT_SECONDS.metric(
            r, buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1, 5)
        )
        self.lookup = M.SERVING_LOOKUP_SECONDS.metric(
            r, buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1, 5)
        )
        self.batch = M.SERVING_BATCH_SAMPLES.metric(
            r, buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
        )
        self.queue = M.SERVING_QUEUE_SAMPLES.metric(r)
        self.switches = M.SERVING_SWITCHES.metric(r)
        self.version = M.SERVING_VERSION_INFO.metric(r)
        self.retries = M.SERVING_RETRIES.metric(r)
        self.handoff = M.SERVING_HANDOFF.metric(
            r, buckets=(1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1800, 3600)
        )
        self.started_at = time.time()
        self.http_stats = HttpStats()  # replaced by the server's when serving
        self.scenarios: ScenarioSet | None = None  # set by ServingApp
        self.tz = M.data_timezone()
        r.register(_ScrapeCollector(self))


class _ScrapeCollector:
    """Each scenario's served version and model freshness, read at scrape time, and the
    HTTP layer's stats."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def collect(self):
        m = self.metrics
        when = M.SERVING_VERSION.family()
        fresh = M.SERVING_FRESHNESS.family()
        now = time.time()
        managers = m.scenarios.managers if m.scenarios is not None else {}
        for name, mgr in sorted(dict(managers).items()):
            sv = mgr.current
            if sv is None:
                continue
            when.add_metric([name], M.version_timestamp(sv.version, m.tz))
            fresh.add_metric([name], M.freshness_seconds(sv.version, now, m.tz))
        yield when
        yield fresh
        yield from M.http_families(M.SERVING_HTTP, m.http_stats)


class _Item:
    __slots__ = ("sv", "data", "n", "future")

    def __init__(self, sv: ServingVersion, data: bytes, n: int, future: asyncio.Future):
        self.sv, self.data, self.n, self.future = sv, data, n, future


class Batcher:
    """Gathers concurrent requests into batches of one version; runs a few at a time."""

    def __init__(self, cfg: ServeConfig, metrics: Metrics):
        self.cfg = cfg
        self.metrics = metrics
        self.queue: list[_Item] = []
        self.queued = 0
        self.wakeup = asyncio.Event()
        self.slots = asyncio.Semaphore(cfg.max_inflight_batches)
        self.inflight = 0
        self.task: asyncio.Task | None = None

    def start(self):
        self.task = asyncio.get_running_loop().create_task(self._loop())

    async def submit(self, sv: ServingVersion, data: bytes, n: int) -> np.ndarray:
        """Probabilities for `n` samples given as ElasticCTR lines, scored by `sv`."""
        if self.queued + n > self.cfg.max_queue_samples:
            raise RequestError(
                503, "overloaded", f"{self.queued} samples already queued; retry shortly"
            )
        fut = asyncio.get_running_loop().create_future()
        item = _Item(sv, data, n, fut)
        if not self.queue and self.inflight == 0 and self.cfg.max_wait_ms == 0:
            # Idle (nothing queued, no batch running): run this request as its own batch
            # right here, saving two event-loop hops (wake the batcher, start a task).
            # Under load something is always in flight, so requests queue and batch.
            # (With a batch window the batcher decides, one loop turn later: requests that
            # arrived together are queued by then and wait for the window together.)
            await self.slots.acquire()
            await self._run([item])
            return fut.result()
        self.queue.append(item)
        self.queued += n
        self.wakeup.set()
        return await fut

    async def _loop(self):
        while True:
            await self.wakeup.wait()
            self.wakeup.clear()
            while self.queue:
                await self.slots.acquire()
                # A lone request (nothing else queued, no batch running) is not held for
                # the window: nothing could join it but a request arriving within it.
                lone = len(self.queue) == 1 and self.inflight == 0
                wait = self.cfg.max_wait_ms > 0 and self.queued < self.cfg.max_batch_samples
                if wait and not lone:
                    await asyncio.sleep(self.cfg.max_wait_ms / 1000)
                items = self._take()
                asyncio.get_running_loop().create_task(self._run(items))

    def _take(self) -> list[_Item]:
        first = self.queue[0]
        items, total = [], 0
        while self.queue:
            item = self.queue[0]
            n = item.n
            if item.sv is not first.sv or (items and total + n > self.cfg.max_batch_samples):
                break
            items.append(self.queue.pop(0))
            total += n
        self.queued -= total
        return items

    async def _run(self, items: list[_Item]):
        self.inflight += 1
        try:
            sv = items[0].sv
            limits = self.cfg.limits
            total = sum(it.n for it in items)
            merged = parse_checked(b"".join(it.data for it in items), sv.parser, limits, total)
            if merged is None:  # some request is bad: parse each alone for its own error
                good, batches = [], []
                for it in items:
                    try:
                        batches.append(decode(it.data, CT_LINES, sv.parser, limits).batch)
                        good.append(it)
                    except RequestError as exc:
                        it.future.set_exception(exc)
                if not good:
                    return
                items, merged = good, SlotBatch.concat(batches)
            self.metrics.batch.observe(len(merged))
            try:
                probs = await sv.predict(merged, self.metrics.lookup)
            except Exception as exc:  # every waiter gets the failure, the loop keeps going
                for it in items:
                    if not it.future.done():
                        it.future.set_exception(exc)
                return
            start = 0
            for it in items:
                n = it.n
                if not it.future.done():
                    it.future.set_result(probs[start : start + n])
                start += n
        finally:
            self.inflight -= 1
            self.slots.release()


class VersionManager:
    """Holds one scenario's current version; loads and verifies a new one before flipping."""

    def __init__(
        self,
        cfg: ServeConfig,
        metrics: Metrics,
        scenario: str = scenarios.DEFAULT,
        cube: CubeEmbeddings | None = None,
    ):
        self.cfg = cfg
        self.metrics = metrics
        self.scenario = scenario
        self.store = scenarios.store_url(cfg.store, scenario)
        self.cache = scenarios.subdir(cfg.cache, scenario)
        self.current: ServingVersion | None = None
        if cfg.cube:
            cube = cube or CubeEmbeddings(cfg.cube, cfg.cube_timeout)
            self.cube: TableEmbeddings | None = TableEmbeddings(cube, scenario)
        else:
            self.cube = None
        self.lock = asyncio.Lock()
        self.last_error: str | None = None
        self.failed: dict[str, float] = {}  # version -> when it failed (poller backoff)
        self.followed: str | None = None  # the last committed version the poller acted on
        # The last poll learned that no model version exists yet (cube has committed none,
        # or the store holds none): ready with nothing to serve (readyz, docs/serving.md).
        self.no_version_yet = False
        # MLflow registry alias `serving` (elasticctr.mlflowreg): the version it points at,
        # and when to try again after a failure or a version training has not registered yet.
        self.alias: str | None = None
        self._alias_task: asyncio.Task | None = None
        self._alias_retry_at = 0.0
        self._alias_pool: ThreadPoolExecutor | None = None
        # One MLflow client at a time from this process (alias move, pyfunc-logging child):
        # two first clients of a new SQLite tracking store both create its tables and one
        # fails ("table _alembic_tmp_... already exists").
        self._mlflow_lock = asyncio.Lock()

    def sync_alias(self) -> None:
        """Start moving the registry alias to the current version when it points elsewhere
        (one call at a time, in its own thread: MLflow's client retries for minutes)."""
        if not self.cfg.mlflow_tracking_uri or self.current is None:
            return
        if self.current.version == self.alias or time.monotonic() < self._alias_retry_at:
            return
        if self._alias_task is not None and not self._alias_task.done():
            return
        self._alias_task = asyncio.get_running_loop().create_task(
            self._set_alias(self.current.version)
        )

    async def _set_alias(self, version: str) -> None:
        from elasticctr import mlflowreg

        if self._alias_pool is None:
            self._alias_pool = ThreadPoolExecutor(1, thread_name_prefix="mlflow-alias")
        loop = asyncio.get_running_loop()
        name = scenarios.registered_model_name(self.scenario, mlflowreg.registered_model_name())
        try:
            async with self._mlflow_lock:
                number = await loop.run_in_executor(
                    self._alias_pool, lambda: mlflowreg.set_serving_alias(
                        self.cfg.mlflow_tracking_uri, version, name=name,
                    ),
                )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the registry is extra; serving goes on
            log.warning("MLflow alias not moved to %s: %s", version, exc)
            self._alias_retry_at = time.monotonic() + 30
            return
        if number is None:  # training registers a version after publishing it
            self._alias_retry_at = time.monotonic() + 5
            return
        self.alias = version
        log.info(
            "MLflow: alias %r of %s -> registered version %s (%s)",
            mlflowreg.SERVING_ALIAS, name, number, version,
        )  # fmt: skip

    def _load(self, version: str) -> ServingVersion:
        """Blocking: fetch + verify + build the predictor (runs in a worker thread)."""
        dense_only = self.cube is not None
        vdir = store.fetch(self.store, version, self.cache, dense_only=dense_only)
        info = VersionInfo.from_manifest(read_manifest(vdir), version)
        dense = DenseModel(vdir / DENSE_DIR, len(info.slots), info.dim)
        if self.cube is not None:
            embeddings = self.cube
        else:
            parts = sparse_parts(vdir, read_manifest(vdir))
            embeddings = LocalEmbeddings(LocalTable.from_parts(parts, info.dim))
        sv = ServingVersion(info, Scorer(info, dense), embeddings, time.time())
        if self.cube is not None:
            self._probe(sv)
        return sv

    def _probe(self, sv: ServingVersion) -> None:
        """Before flipping: cube must hold the version with the manifest's dim."""
        loop = asyncio.new_event_loop()
        probe = CubeEmbeddings(self.cfg.cube, self.cfg.cube_timeout)
        try:
            loop.run_until_complete(
                probe.lookup(np.zeros(1, np.uint64), sv.version, sv.info.dim, self.scenario)
            )
        finally:
            probe.close()
            loop.close()

    async def switch(self, version: str) -> tuple[str | None, bool]:
        """Make `version` current; returns (previous, changed). Raises on failure."""
        store.check_version_id(version)
        async with self.lock:
            prev = self.current.version if self.current else None
            if prev == version:
                return prev, False
            try:
                sv = await asyncio.get_running_loop().run_in_executor(None, self._load, version)
            except (EctlError, OSError) as exc:
                self.metrics.switches.labels(self.scenario, "failed").inc()
                self.failed[version] = time.monotonic()
                self.last_error = f"version {version}: {exc}"
                log.error("%snot switching to %s: %s", self._tag, version, exc)
                raise
            self.current = sv  # the flip: one assignment, seen by the next decode
            self.failed.pop(version, None)
            self.last_error = None
            self.metrics.switches.labels(self.scenario, "ok").inc()
            if prev:
                self.metrics.version.remove(self.scenario, prev)
            self.metrics.version.labels(self.scenario, version).set(1)
            handoff = self._observe_handoff(sv)
            log.info("%sserving version %s (was %s)%s", self._tag, version, prev, handoff)
            if self.cfg.mlflow_tracking_uri:
                asyncio.get_running_loop().create_task(self._log_mlflow(version))
                self.sync_alias()
            return prev, True

    def _observe_handoff(self, sv: ServingVersion) -> str:
        """Hand-off times of a version exported while this process ran (a restart that
        loads an old version measures nothing); returns them for the log line."""
        timeline, now = sv.info.timeline, time.time()
        if timeline.get("exported_at", 0.0) < self.metrics.started_at:
            return ""
        said = []
        for since, key in M.HANDOFF_SINCE.items():
            if key in timeline and now >= timeline[key]:
                self.metrics.handoff.labels(self.scenario, since).observe(now - timeline[key])
                said.append(f"{since} {now - timeline[key]:.1f}s ago")
        return f"; {', '.join(said)}" if said else ""

    async def _log_mlflow(self, version: str) -> None:
        """Log the version as an MLflow pyfunc in a low-priority child process (once)."""
        import sys

        args = [sys.executable, "-m", "elasticctr.serving.pyfunc", self.store, version,
                "--tracking-uri", self.cfg.mlflow_tracking_uri, "--skip-existing",
                "--cache", str(self.cache / "mlflow")]  # fmt: skip
        if self.cfg.mlflow_model_name:
            name = scenarios.registered_model_name(self.scenario, self.cfg.mlflow_model_name)
            args += ["--register", name]
        # Low priority through nice(1), not preexec_fn: a preexec_fn runs the at-fork hooks
        # in the child, and fsspec's hook drops its cached filesystems there; dropping an
        # HDFS client (hdfs-native's runtime, whose threads the child does not have) hangs
        # the child before exec, and the event loop with it (seen on an hdfs:// store).
        nice = shutil.which("nice")
        if nice:
            args = [nice, "-n", "10", *args]
        try:
            async with self._mlflow_lock:
                proc = await asyncio.create_subprocess_exec(
                    *args,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                )
                out, _ = await proc.communicate()
        except OSError as exc:
            log.error("MLflow logging of %s failed to start: %s", version, exc)
            return
        if proc.returncode:
            tail = out.decode(errors="replace").strip().splitlines()[-3:]
            log.error("MLflow logging of %s failed: %s", version, " | ".join(tail))
        else:
            log.info("version %s in MLflow: %s", version, out.decode().strip().splitlines()[-1])

    async def wanted(self) -> str | None:
        """The version serving should be on: cube's committed one, else the store's newest."""
        if self.cube is not None:
            return await self.cube.committed()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, store.latest_version, self.store)

    @property
    def _tag(self) -> str:
        return "" if self.scenario == scenarios.DEFAULT else f"[{self.scenario}] "

    async def poll_once(self, want: str | None | Exception = ...) -> None:  # type: ignore[assignment]
        """Follow the wanted version; `want` = what `wanted()` would answer, when the
        caller already knows it (one cube status round for every scenario)."""
        self.sync_alias()
        try:
            if want is ...:
                want = await self.wanted()
            elif isinstance(want, Exception):
                raise want
        except (EctlError, OSError) as exc:
            self.last_error = f"cannot learn the committed version: {exc}"
            self.no_version_yet = False
            return
        self.no_version_yet = not want
        if not want:
            return
        if self.current and want == self.current.version:
            self.followed = want
            return
        if self.current and want == self.followed:
            return  # a pinned start (--version) follows only later commits
        failed_at = self.failed.get(want)
        if failed_at is not None and time.monotonic() - failed_at < 30:
            return  # do not reload a broken version every poll
        try:
            await self.switch(want)
            self.followed = want
        except (EctlError, OSError):
            pass

    def forget(self) -> None:
        """The scenario is gone: drop its version (and its metric series)."""
        if self.current is not None:
            self.metrics.version.remove(self.scenario, self.current.version)
        self.current = None


class ScenarioSet:
    """Every scenario serving answers for: the default one, plus (with cfg.scenarios) each
    scenario cube holds a table of (or, without cube, each folder of the store's
    `scenarios/`). One cube status round per poll tells every scenario its version."""

    def __init__(self, cfg: ServeConfig, metrics: Metrics):
        self.cfg = cfg
        self.metrics = metrics
        self.cube = CubeEmbeddings(cfg.cube, cfg.cube_timeout) if cfg.cube else None
        self.default = VersionManager(cfg, metrics, scenarios.DEFAULT, self.cube)
        self.managers: dict[str, VersionManager] = {scenarios.DEFAULT: self.default}
        self.discover_error: str | None = None

    def get(self, name: str) -> VersionManager | None:
        return self.managers.get(name)

    def add(self, name: str) -> VersionManager:
        mgr = self.managers.get(name)
        if mgr is None:
            mgr = self.managers[name] = VersionManager(self.cfg, self.metrics, name, self.cube)
            log.info("scenario %s found", name)
        return mgr

    def remove(self, name: str) -> bool:
        if name == scenarios.DEFAULT:
            return False
        mgr = self.managers.pop(name, None)
        if mgr is not None:
            mgr.forget()
            log.info("scenario %s removed", name)
        return mgr is not None

    async def poll_once(self) -> None:
        statuses: list[dict] | Exception | None = None
        if self.cube is not None:
            try:
                statuses = await self.cube.statuses()
            except CubeUnavailable as exc:
                statuses = exc
        if self.cfg.scenarios:
            await self._discover(statuses)
        polls = []
        for name, mgr in list(self.managers.items()):
            if isinstance(statuses, list):
                try:
                    want: str | None | Exception = committed_of(statuses, name)
                except CubeUnavailable as exc:  # this table is switching: wait for it
                    want = exc
                polls.append(mgr.poll_once(want))
            elif isinstance(statuses, Exception):
                polls.append(mgr.poll_once(statuses))
            else:
                polls.append(mgr.poll_once())
        await asyncio.gather(*polls)

    async def _discover(self, statuses) -> None:
        try:
            if isinstance(statuses, Exception):
                raise statuses
            if statuses is not None:
                found = tables_of(statuses)
            else:
                loop = asyncio.get_running_loop()
                found = set(await loop.run_in_executor(None, store.scenario_names, self.cfg.store))
        except (EctlError, OSError) as exc:
            self.discover_error = f"cannot list scenarios: {exc}"
            return  # keep what we have
        self.discover_error = None
        found.discard(scenarios.DEFAULT)
        for name in sorted(found - set(self.managers)):
            self.add(name)
        for name in sorted(set(self.managers) - found - {scenarios.DEFAULT}):
            self.remove(name)

    async def poll_forever(self) -> None:
        while True:
            await self.poll_once()
            await asyncio.sleep(self.cfg.poll_interval)


_SCENARIO_PREFIX = "/v1/scenarios/"
_SCENARIO_ROUTES = {("POST", "predict"), ("GET", "version")}
_DEFAULT_SCENARIO_ROUTES = {"/v1/predict", "/v1/version"}


class ServingApp:
    def __init__(self, cfg: ServeConfig):
        self.cfg = cfg
        self.metrics = Metrics()
        self.scenarios = ScenarioSet(cfg, self.metrics)
        self.metrics.scenarios = self.scenarios
        self.versions = self.scenarios.default
        self.batcher = Batcher(cfg, self.metrics)
        self.tasks: list[asyncio.Task] = []
        self.draining = False  # SIGTERM received: /readyz answers 503 `draining`
        self.routes = {
            ("POST", "/v1/predict"): self.predict,
            ("GET", "/v1/version"): self.version,
            ("GET", "/v1/scenarios"): self.list_scenarios,
            ("POST", "/admin/version"): self.admin_version,
            ("GET", "/healthz"): self.healthz,
            ("GET", "/readyz"): self.readyz,
            ("GET", "/metrics"): self.prometheus,
            ("GET", "/openapi.json"): self.openapi,
        }
        self.paths = {p for _, p in self.routes}
        self.protected = {"/v1/predict", "/v1/version", "/v1/scenarios", "/admin/version"}

    async def start(self) -> None:
        self.batcher.start()
        loop = asyncio.get_running_loop()
        try:
            if self.cfg.version:
                try:
                    self.versions.followed = await self.versions.wanted()
                except (EctlError, OSError):
                    pass
                await self.versions.switch(self.cfg.version)
            else:
                await self.scenarios.poll_once()
        finally:
            if self.cfg.poll_interval > 0:
                self.tasks.append(loop.create_task(self.scenarios.poll_forever()))

    async def handle(self, req: Request) -> Response:
        handler, route, known, protected, scenario = self._resolve(req)
        if handler is None:
            if known:
                resp = Response.error(405, "method_not_allowed", f"{req.method} {req.path}")
            else:
                resp = Response.error(404, "not_found", f"no route {req.path}")
        elif protected and not self._authorized(req):
            resp = Response.error(
                401, "unauthorized", "send 'Authorization: Bearer <token>' (serving.auth)"
            )
            resp.headers["WWW-Authenticate"] = "Bearer"
        else:
            try:
                resp = await handler(req)
            except RequestError as exc:
                resp = Response.json(exc.status, exc.body())
                resp.error_code = exc.code
            except Exception:  # a bug: answered (and counted) here, serving goes on
                log.exception("handler failed for %s %s", req.method, req.path)
                resp = Response.error(500, "internal", INTERNAL_MESSAGE)
        self.metrics.requests.labels(route, str(resp.status), scenario).inc()
        if resp.error_code:
            self.metrics.errors.labels(scenario, resp.error_code).inc()
        return resp

    def _resolve(self, req: Request):
        """(handler or None, metrics route label, path known, protected, scenario label)
        of a request. `/v1/scenarios/{name}/predict|version` is labelled with the route
        `{name}` and the scenario only when the platform has it (names are client input;
        metrics stay bounded); `/v1/predict` and `/v1/version` are the default scenario's."""
        if req.path.startswith(_SCENARIO_PREFIX):
            name, _, action = req.path[len(_SCENARIO_PREFIX) :].partition("/")
            known = action in {a for _, a in _SCENARIO_ROUTES}
            route = f"{_SCENARIO_PREFIX}{{name}}/{action}" if known else "other"
            scenario = name if known and self.scenarios.get(name) is not None else ""
            if (req.method, action) not in _SCENARIO_ROUTES:
                return None, route, known, True, scenario
            return (
                functools.partial(self._scenario_route, name=name, action=action),
                route,
                True,
                True,
                scenario,
            )
        known = req.path in self.paths
        handler = self.routes.get((req.method, req.path))
        scenario = scenarios.DEFAULT if req.path in _DEFAULT_SCENARIO_ROUTES else ""
        route = req.path if known else "other"
        return handler, route, known, req.path in self.protected, scenario

    async def _scenario_route(self, req: Request, *, name: str, action: str) -> Response:
        mgr = self.scenarios.get(name)
        if mgr is None:
            known = ", ".join(sorted(self.scenarios.managers))
            raise RequestError(
                404, "unknown_scenario",
                f"no scenario {name[:64]!r} on this platform (serving: {known})",
            )  # fmt: skip
        handler = self.predict if action == "predict" else self.version
        return await handler(req, mgr)

    def _authorized(self, req: Request) -> bool:
        if not self.cfg.token:
            return True
        return bearer_ok(req.headers.get("authorization"), self.cfg.token)

    # --- routes ---------------------------------------------------------------------------
    async def predict(self, req: Request, mgr: VersionManager | None = None) -> Response:
        t0 = time.perf_counter()
        mgr = mgr or self.versions
        pinned = _query_param(req.query, "version")
        for attempt in (0, 1):
            sv = mgr.current
            if sv is None:
                raise self._no_version(mgr)
            if pinned and pinned != sv.version:
                raise RequestError(
                    409, "version_mismatch", f"serving {sv.version}, the request asked {pinned}"
                )
            data, n = prepare(req.body, req.headers.get("content-type"), sv.parser, self.cfg.limits)
            try:
                probs = await self.batcher.submit(sv, data, n)
                break
            except VersionUnavailable as exc:
                if attempt:
                    raise RequestError(503, "version_unavailable", str(exc)) from exc
                self.metrics.retries.labels(mgr.scenario).inc()
                await mgr.poll_once()  # cube moved on: follow it, then run again
            except CubeUnavailable as exc:
                raise RequestError(503, "cube_unavailable", str(exc)) from exc
        self.metrics.samples.labels(mgr.scenario).inc(len(probs))
        self.metrics.latency.labels(mgr.scenario).observe(time.perf_counter() - t0)
        body = b'{"version":"%s","probabilities":%s}' % (
            sv.version.encode(),
            json.dumps(probs.tolist()).encode(),
        )
        return Response(200, body)

    def _not_ready_reason(self, mgr: VersionManager | None = None) -> str:
        why = (mgr or self.versions).last_error or "no model version loaded yet"
        return f"not ready: {why}"

    def _no_version(self, mgr: VersionManager | None = None) -> RequestError:
        mgr = mgr or self.versions
        if mgr.no_version_yet:
            return RequestError(503, "no_model", NO_MODEL_YET)
        return RequestError(503, "not_ready", self._not_ready_reason(mgr))

    async def version(self, req: Request, mgr: VersionManager | None = None) -> Response:
        mgr = mgr or self.versions
        sv = mgr.current
        if sv is None:
            raise self._no_version(mgr)
        return Response.json(
            200,
            {
                "scenario": mgr.scenario,
                "version": sv.version,
                "model": sv.info.model,
                "slots": list(sv.info.slots),
                "embedding_dim": sv.info.dim,
                "sparse_dim": sv.info.sparse_dim,
                "heldout_auc": sv.info.heldout_auc,
                "embeddings": sv.embeddings.kind,
                "loaded_at": sv.loaded_at,
            },
        )

    async def list_scenarios(self, req: Request) -> Response:
        out = {}
        for name, mgr in sorted(self.scenarios.managers.items()):
            sv = mgr.current
            out[name] = {
                "version": sv.version if sv else None,
                "model": sv.info.model if sv else None,
                "heldout_auc": sv.info.heldout_auc if sv else None,
                "loaded_at": sv.loaded_at if sv else None,
                "error": mgr.last_error,
            }
        return Response.json(
            200, {"scenarios": out, "discover_error": self.scenarios.discover_error}
        )

    async def admin_version(self, req: Request) -> Response:
        try:
            doc = json.loads(req.body)
        except ValueError as exc:
            raise RequestError(400, "bad_json", f"the body is not valid JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise RequestError(400, "bad_json", 'expected {"version": "YYYYMMDD/HH"}')
        name = doc.get("scenario", scenarios.DEFAULT)
        try:
            scenarios.check_name(name)
        except EctlError as exc:
            raise RequestError(400, "bad_scenario", str(exc)) from exc
        if doc.get("removed") is True:
            return Response.json(200, {"scenario": name, "removed": self.scenarios.remove(name)})
        if not isinstance(doc.get("version"), str):
            raise RequestError(400, "bad_json", 'expected {"version": "YYYYMMDD/HH"}')
        if name != scenarios.DEFAULT and not self.cfg.scenarios:
            raise RequestError(
                404, "unknown_scenario", f"scenario {name!r}: this serving has no --scenarios"
            )
        try:
            prev, changed = await self.scenarios.add(name).switch(doc["version"])
        except ValidationError as exc:
            raise RequestError(422, "bad_version", str(exc), exc.problems) from exc
        except EctlError as exc:
            raise RequestError(422, "bad_version", str(exc)) from exc
        return Response.json(200, {"version": doc["version"], "previous": prev, "changed": changed})

    async def healthz(self, req: Request) -> Response:
        return Response.json(200, {"status": "ok"})

    async def readyz(self, req: Request) -> Response:
        """Ready = able to serve what there is: a loaded version, or no model version at all
        yet (then /v1/predict answers 503 `no_model`; an install waiting for readiness must
        not wait for training). Not ready while a version exists but is not loaded, nor
        once draining (SIGTERM)."""
        if self.draining:
            return Response.error(503, "draining", "shutting down: finishing requests in progress")
        sv = self.versions.current
        if sv is None and self.versions.no_version_yet:
            return Response.json(200, {"status": "ready", "version": None, "detail": NO_MODEL_YET})
        if sv is None:
            return Response.error(503, "not_ready", self._not_ready_reason())
        return Response.json(200, {"status": "ready", "version": sv.version})

    async def prometheus(self, req: Request) -> Response:
        self.metrics.queue.set(self.batcher.queued)
        return Response(200, generate_latest(self.metrics.registry), "text/plain; version=0.0.4")

    async def openapi(self, req: Request) -> Response:
        from elasticctr.serving.openapi import SPEC

        return Response.json(200, SPEC)


def _query_param(query: str, name: str) -> str | None:
    if not query:
        return None
    from urllib.parse import parse_qs

    return parse_qs(query).get(name, [None])[0]


async def run(
    cfg: ServeConfig, host: str, port: int, ready=None, stop: asyncio.Event | None = None
) -> None:
    """Serve until `stop` is set (the first SIGTERM/SIGINT in `ectl serve`), then drain:
    not ready at once, new connections still answered for `cfg.drain_seconds` (while the
    endpoints drop this replica), then no new connections and the requests in progress
    finish (at most `cfg.drain_timeout` seconds). Cancelled = stop at once."""
    from elasticctr.httpd import Limits as HttpLimits
    from elasticctr.httpd import serve_async

    app = ServingApp(cfg)
    limits = HttpLimits.from_env(max_body_bytes=cfg.limits.max_body_bytes)
    server = await serve_async(app.handle, host, port, limits)
    app.metrics.http_stats = server.stats
    if ready is not None:
        ready(server.sockets[0].getsockname()[1])
    try:
        try:
            await app.start()
        except EctlError as exc:
            log.error("starting without a version (the poller keeps trying): %s", exc)
        await (stop or asyncio.Event()).wait()
        app.draining = True
        server.start_draining()
        t0 = time.monotonic()
        log.info(
            "draining: not ready; answering new connections for %.1fs, then finishing "
            "requests in progress (at most %.1fs)", cfg.drain_seconds, cfg.drain_timeout,
        )  # fmt: skip
        await asyncio.sleep(cfg.drain_seconds)
        left = await server.drain(cfg.drain_timeout)
        log.info(
            "drained in %.2fs (%d connections cut at the timeout)", time.monotonic() - t0, left
        )
    finally:
        server.close()
        for t in app.tasks:
            t.cancel()
