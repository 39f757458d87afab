"""cube-transfer: publish new model versions to all cube shards with a two-phase switch.

    watch    list `{store}/versions/*/*/donefile`; the newest version not yet published
    fetch    copy + verify the sparse files against the export manifest (sha256)
    build    N shard files into the cube root (builder.py)
    phase 1  every shard: POST /admin/load V (verify sha256, mmap, stage)
             any failure -> unload V where it was staged, V is recorded as failed,
             the committed version keeps serving everywhere
    decide   record "committed = V" in {cube_root}/transfer.json (the commit point)
    phase 2  every shard: POST /admin/commit V (atomic swap); a shard that misses it is
             brought to V by `reconcile` on every later poll (load + commit)
    notify   POST {"version": V, ...} to each --notify URL (serving)
    wake     the watcher polls every --interval, and at once when poked (`poke()`, POST
             /v1/poke on the status server: the coordinator's call after each export)
    retain   keep the K newest built versions (and the committed one); delete the rest

`rollback(V)` runs the same two phases for an earlier version still retained; `pin(V)`
switches to any complete version of the store (verified, built when no build is retained)
and keeps it until `unpin()`: the watcher publishes nothing newer meanwhile.
Everything is guarded by a file lock so a rollback command and the watcher do not race.

Every read of the model store's version list is recorded in a `StoreHealth` (time, the
newest version, the error): the watcher's status server (elasticctr.cube.transfer_server)
answers /readyz and /v1/status from it, so a store that cannot be read shows in the pod's
readiness and in `ectl status`, not only in a log line.

One `Transfer` serves one scenario's table (elasticctr.scenarios): the default one reads
the store root and builds into the cube root; scenario S reads `{store}/scenarios/S` and
builds into `{cube_root}/scenarios/S`. `PlatformTransfer` runs one per registered
scenario in one process, each isolated from the others' failures, and drops the tables
of scenarios that are no longer registered.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from elasticctr import scenarios
from elasticctr.cube.builder import build_version, built_versions, remove_version
from elasticctr.cube.client import CubeClient, ShardError
from elasticctr.cube.modelstore import fetch_version, list_versions, verify_version
from elasticctr.cube.protocol import format_shards
from elasticctr.errors import EctlError
from elasticctr.modelstore import open_store, redact_url
from elasticctr.versions import check_version_id

log = logging.getLogger("elasticctr.cube.transfer")
METRICS_SHOWN = 48
"""`versions()` carries the held-out metrics of the store's newest this many versions."""

STATE_FILE = "transfer.json"
LOCK_FILE = ".transfer.lock"


def describe(exc: EctlError) -> str:
    """The message with every listed problem (ValidationError keeps them apart)."""
    problems = getattr(exc, "problems", None) or []
    return "; ".join([str(exc), *problems])


class SwitchFailed(EctlError):
    """Phase 1 failed on some shard; no shard switched."""


class Counts:
    """Event counters of one watcher, keyed by tuples: ("publish", scenario, result) and
    ("error", scenario, kind). The poll thread bumps them, /metrics reads them
    (elasticctr.cube.transfer_server; names in elasticctr.metrics)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._n: dict[tuple[str, ...], int] = {}

    def inc(self, *key: str) -> None:
        with self._lock:
            self._n[key] = self._n.get(key, 0) + 1

    def snapshot(self) -> dict[tuple[str, ...], int]:
        with self._lock:
            return dict(self._n)


def _utc(when: float | None) -> str | None:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when)) if when else None


class StoreHealth:
    """What the latest reads of one model store's version list said. Written by the
    polling thread, read by the status server's threads (hence the lock).

    `ok` is the readiness rule: the latest read succeeded (False before the first one).
    The URL is kept without credentials (`redact_url`), and so is every error text."""

    def __init__(self, url: str):
        self._raw = url
        self.url = redact_url(url)
        self._lock = threading.Lock()
        self.last_poll_at: float | None = None
        self.last_ok_at: float | None = None
        self.last_error: str | None = None
        self.newest_version: str | None = None

    def record_ok(self, found: list[str]) -> None:
        with self._lock:
            self.last_poll_at = self.last_ok_at = time.time()
            self.last_error = None
            self.newest_version = found[-1] if found else None

    def record_error(self, exc: BaseException) -> None:
        text = describe(exc) if isinstance(exc, EctlError) else f"{type(exc).__name__}: {exc}"
        with self._lock:
            self.last_poll_at = time.time()
            self.last_error = redact_url(text, self._raw)

    @property
    def ok(self) -> bool:
        with self._lock:
            return self.last_ok_at is not None and self.last_error is None

    def values(self) -> tuple[bool, float | None, str | None]:
        """(ok, last_ok_at, newest_version) read together, for /metrics."""
        with self._lock:
            ok = self.last_ok_at is not None and self.last_error is None
            return ok, self.last_ok_at, self.newest_version

    def detail(self) -> str | None:
        """Why the store does not count as readable ("<store url>: <error>"), else None.
        Errors of the store layer already start with the URL they failed on."""
        with self._lock:
            if self.last_error is not None:
                err = self.last_error
                return err if err.startswith(self.url) else f"{self.url}: {err}"
            if self.last_ok_at is None:
                return f"{self.url}: not read yet"
            return None

    def snapshot(self) -> dict[str, Any]:
        """The /v1/status fields of this store (ISO-8601 UTC times)."""
        with self._lock:
            return {
                "modelStore": self.url,
                "lastPollAt": _utc(self.last_poll_at),
                "lastOkAt": _utc(self.last_ok_at),
                "lastError": self.last_error,
                "newestVersion": self.newest_version,
            }


class Transfer:
    def __init__(
        self,
        *,
        cube_root: Path,
        shard_urls: list[str],
        store: str | None = None,
        keep: int = 3,
        notify: list[str] | None = None,
        timeout: float = 120.0,
        echo: Callable[[str], None] | None = None,
        table: str = scenarios.DEFAULT,
        budget_bytes: int | None = None,
        cube: CubeClient | None = None,
        counts: Counts | None = None,
    ):
        """`cube_root` and `store` are the platform's; `table` picks the scenario (its own
        folder of both). `cube`: a client shared by several transfers (not closed here);
        `counts`: the platform's counters, when this is one of its scenarios."""
        if keep < 1:
            raise EctlError(f"--keep must be >= 1, got {keep}")
        self.table = table
        self.cube_root = scenarios.subdir(cube_root, table)
        self.cube_root.mkdir(parents=True, exist_ok=True)
        self.store = scenarios.store_url(store, table) if store else None
        self.health = StoreHealth(self.store) if self.store else None
        self.keep = keep
        self.budget_bytes = budget_bytes
        self.notify_urls = list(notify or [])
        self._own_cube = cube is None
        self.cube = cube or CubeClient(shard_urls, timeout=timeout)
        self.num_shards = self.cube.num_shards
        self.shards_error: str | None = None
        """Why the watcher is still waiting for its shards (None once they answered)."""
        self.counts = counts or Counts()
        self.wake = threading.Event()
        self._metrics: dict[str, dict[str, Any]] = {}  # version -> its manifest's metrics
        """Set by `poke`: the watcher polls now instead of at the end of its interval."""
        self.pokes = 0
        prefix = "" if table == scenarios.DEFAULT else f"[{table}] "
        say = echo or (lambda msg: log.info(msg))
        self.echo = lambda msg: say(prefix + msg)

    def close(self) -> None:
        if self._own_cube:
            self.cube.close()

    # --- state --------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        path = self.cube_root / STATE_FILE
        if not path.is_file():
            return {"committed": None, "published": [], "failed": {}, "notified": None}
        try:
            return json.loads(path.read_text())
        except (json.JSONDecodeError, OSError) as exc:
            raise EctlError(f"{path} is unreadable ({exc}); fix or remove it") from exc

    def _save(self, state: dict[str, Any]) -> None:
        tmp = self.cube_root / f".{STATE_FILE}.tmp"
        with open(tmp, "w") as fh:
            json.dump(state, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.cube_root / STATE_FILE)

    @contextmanager
    def _locked(self):
        with open(self.cube_root / LOCK_FILE, "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def check_shards(self) -> None:
        """Every URL must be the shard its position says, of the same shard count; every
        shard needs one replica that answers (a replica that is down is repaired by
        `reconcile` once it is back)."""

        def status(s):
            try:
                return s.status()
            except ShardError as exc:
                return exc

        statuses = self.cube.each(status)
        for j, st in enumerate(statuses):
            i = self.cube.shard_index[j]
            if isinstance(st, ShardError):
                continue
            if st.get("shard") != i or st.get("num_shards") != self.num_shards:
                raise EctlError(
                    f"{self.cube.shards[j].url} is shard {st.get('shard')} of "
                    f"{st.get('num_shards')}, expected shard {i} of {self.num_shards}",
                    hint="list --shard-url in shard order, one per shard (replicas joined by |)",
                )
        for i in range(self.num_shards):
            down = [st for j, st in enumerate(statuses) if self.cube.shard_index[j] == i]
            if all(isinstance(st, ShardError) for st in down):
                raise down[0]

    # --- the two-phase switch -----------------------------------------------------------
    def _switch(self, version: str, state: dict[str, Any]) -> None:
        """Phase 1 loads `version` on every replica of every shard. A replica that refuses
        it (4xx: corrupt, over its budget, ...) fails the switch; one that is down
        (unreachable, 5xx) is left behind as long as another replica of its shard loaded
        it (`reconcile` brings it onto the committed version once it is back); a shard
        with no replica loaded fails the switch. Then the commit point, then phase 2."""
        errors: dict[int, ShardError] = {}

        def load(s):
            try:
                s.load(version, self.table, self.budget_bytes)
                return None
            except ShardError as exc:
                return exc

        for j, err in enumerate(self.cube.each(load)):
            if err:
                errors[j] = err
        refused = {j for j, e in errors.items() if e.status is not None and e.status < 500}
        loaded = [j for j in range(len(self.cube.shards)) if j not in errors]
        empty = [
            i for i in range(self.num_shards) if i not in {self.cube.shard_index[j] for j in loaded}
        ]
        if refused or empty:
            for j in loaded:
                try:
                    self.cube.shards[j].unload(version, self.table)
                except ShardError:
                    pass  # that shard will evict it on its next commit anyway
            detail = "; ".join(
                f"{self.cube.shards[j].label}: {e}" for j, e in sorted(errors.items())
            )
            raise SwitchFailed(f"version {version} not switched, phase 1 failed: {detail}")
        # The commit point: from here on the version is committed, stragglers are repaired.
        state["committed"] = version
        self._save(state)
        lagging = self._commit_all(version, loaded)
        behind = sorted(set(lagging) | set(errors))
        if behind:
            names = [self.cube.shards[j].label for j in behind]
            self.echo(f"committed {version}; {names} will catch up (reconcile)")
        self._notify(version, state)

    def _commit_all(self, version: str, only: list[int] | None = None) -> list[int]:
        """Commit on the replicas `only` (all by default); returns those that did not."""

        def commit(s):
            try:
                s.commit(version, self.table)
                return True
            except ShardError as exc:
                if exc.status == 409:  # restarted between phases: load again, then commit
                    try:
                        s.load(version, self.table, self.budget_bytes)
                        s.commit(version, self.table)
                        return True
                    except ShardError:
                        return False
                return False

        which = list(range(len(self.cube.shards))) if only is None else only
        results = self.cube.each(
            lambda s: commit(s) if self.cube.shards.index(s) in which else True
        )
        return [j for j, ok in enumerate(results) if not ok]

    def reconcile(self) -> list[int]:
        """Bring every reachable replica onto the committed version; returns those fixed
        (their indices in `cube.shards`)."""
        committed = self.state().get("committed")
        if not committed:
            return []
        fixed = []
        for j, s in enumerate(self.cube.shards):
            try:
                if s.table_status(self.table).get("committed") != committed:
                    s.load(committed, self.table, self.budget_bytes)
                    s.commit(committed, self.table)
                    fixed.append(j)
            except ShardError as exc:
                log.warning("reconcile %s: %s", s.label, exc)
        if fixed:
            names = [self.cube.shards[j].label for j in fixed]
            self.echo(f"reconciled {names} onto {committed}")
        return fixed

    def _notify(self, version: str, state: dict[str, Any]) -> None:
        payload = {
            "version": version,
            "scenario": self.table,
            "cube_shards": format_shards([[s.url for s in g] for g in self.cube.replicas]),
        }
        for url in self.notify_urls:
            try:
                httpx.post(url, json=payload, timeout=30).raise_for_status()
            except httpx.HTTPError as exc:
                self.echo(f"notify {url} failed: {exc}")
                continue
        state["notified"] = version
        self._save(state)

    # --- operations ---------------------------------------------------------------------
    def publish(self, version: str, *, unless_pinned: bool = False) -> dict[str, Any] | None:
        """Fetch, verify, build and switch to `version`; record failure and re-raise.
        `unless_pinned` (the watcher): None, nothing done, when a pin came first."""
        if not self.store:
            raise EctlError("publishing needs --model-store")
        check_version_id(version)
        with self._locked():
            state = self.state()
            if unless_pinned and state.get("pinned"):
                return None
            try:
                with tempfile.TemporaryDirectory(dir=self.cube_root, prefix=".fetch-") as cache:
                    mv = fetch_version(self.store, version, Path(cache))
                    t0 = time.perf_counter()
                    manifest = build_version(mv, self.cube_root, self.num_shards)
                    self.echo(
                        f"built {version}: {manifest['total_keys']} keys in "
                        f"{self.num_shards} shards ({time.perf_counter() - t0:.2f}s)"
                    )
                self._switch(version, state)
            except EctlError as exc:
                self.counts.inc("publish", self.table, "rejected")
                self.counts.inc("error", self.table, "version_rejected")
                state["failed"][version] = describe(exc)
                if version not in state["published"]:
                    state["published"].append(version)
                self._save(state)
                raise
            self.counts.inc("publish", self.table, "ok")
            if version not in state["published"]:
                state["published"].append(version)
            state["failed"].pop(version, None)
            state.pop("follow_newest", None)
            self._save(state)
            self._retain(state)
            self.echo(f"committed {version} on {self.num_shards} shards")
            return manifest

    def rollback(self, version: str) -> None:
        """Switch every shard back to an earlier version that is still retained."""
        check_version_id(version)
        with self._locked():
            state = self.state()
            if version not in built_versions(self.cube_root):
                kept = ", ".join(built_versions(self.cube_root)) or "none"
                raise EctlError(f"version {version} is not retained (retained: {kept})")
            self._switch(version, state)
            self.echo(f"rolled back to {version} on {self.num_shards} shards")

    # --- pinning (`ectl model pin|unpin|list`, POST /v1/pin on the status server) -------
    def pin(self, version: str) -> dict[str, Any]:
        """Serve `version` on every shard and publish nothing newer until `unpin`: a
        rollback when it is older than the committed one. The version must be complete in
        the model store; all its files are verified against its manifest (sha256) and it
        is built unless a build is retained, and its slots must be the committed version's
        (serving scores every version with the scenario's one feature layout). Any failure
        raises with the reason and leaves the committed version serving everywhere.
        Returns the new state's `committed`, `pinned` and `previous`."""
        check_version_id(version)
        if not self.store:
            raise EctlError("pinning needs --model-store")
        with self._locked():
            state = self.state()
            stored = self.list_store()
            if version not in stored:
                shown = ", ".join(stored[-6:]) or "none"
                raise EctlError(
                    f"version {version} is not in the model store (newest: {shown})",
                    hint="`ectl model list` shows the versions that can be pinned",
                )
            previous = state.get("committed")
            with tempfile.TemporaryDirectory(dir=self.cube_root, prefix=".fetch-") as cache:
                # Every file, dense included: serving must be able to load what cube serves.
                vdir = open_store(self.store).fetch(version, Path(cache))
                mv = verify_version(vdir, version, only=None)
                if previous and previous != version:
                    self._check_same_slots(mv.manifest, version, previous)
                build_version(mv, self.cube_root, self.num_shards)
            if previous != version:
                self._switch(version, state)
            state["pinned"] = version
            self._save(state)
            self.echo(f"pinned {version} (was {previous}) on {self.num_shards} shards")
            return {"committed": version, "pinned": version, "previous": previous}

    def _check_same_slots(self, manifest: dict[str, Any], version: str, committed: str) -> None:
        want = open_store(self.store).read_manifest(committed).get("slots")
        got = manifest.get("slots")
        if got != want:
            raise EctlError(
                f"version {version} has slots {got}, the serving version {committed} has "
                f"{want}: serving scores every version of a scenario with one slot layout",
                hint="pin a version trained with the scenario's current slots",
            )

    def unpin(self) -> dict[str, Any]:
        """Follow the store's newest version again (published at the next poll, at once
        when the watcher is poked: the status server does)."""
        with self._locked():
            state = self.state()
            was = state.pop("pinned", None)
            if was:
                state["follow_newest"] = True  # even a version published before the pin
            self._save(state)
        if was:
            self.echo(f"unpinned {was}: following the newest version again")
        return {"pinned": None, "was": was, "committed": state.get("committed")}

    def versions(self) -> dict[str, Any]:
        """What `ectl model list` shows: the store's complete versions (newest last), the
        builds retained on the cube volume, the committed and pinned versions and the
        rejected ones with their reasons."""
        state = self.state()
        stored = self.list_store()
        return {
            "scenario": self.table,
            "committed": state.get("committed"),
            "pinned": state.get("pinned"),
            "store": stored,
            "retained": built_versions(self.cube_root),
            "failed": dict(state.get("failed", {})),
            "metrics": self.version_metrics(stored[-METRICS_SHOWN:]),
        }

    def version_metrics(self, versions: list[str]) -> dict[str, dict[str, Any]]:
        """Each version's held-out `metrics` from its manifest (auc, logloss, samples...);
        read once per version (a complete version never changes), {} when unreadable."""
        store = open_store(self.store)
        out = {}
        for v in versions:
            if v not in self._metrics:
                try:
                    metrics = store.read_manifest(v).get("metrics")
                except Exception as exc:  # noqa: BLE001 - shown as absent, logged
                    log.warning("manifest of %s unreadable: %s", v, exc)
                    continue
                self._metrics[v] = metrics if isinstance(metrics, dict) else {}
            out[v] = self._metrics[v]
        return out

    def list_store(self) -> list[str]:
        """The store's complete versions, oldest first; the outcome is recorded in
        `health` (a failure is re-raised)."""
        if not self.store or self.health is None:
            raise EctlError("reading the model store needs --model-store")
        try:
            found = list_versions(self.store)
        except Exception as exc:
            self.health.record_error(exc)
            self.counts.inc("error", self.table, "store_unreadable")
            raise
        self.health.record_ok(found)
        return found

    def probe_store(self) -> None:
        """Read the version list for `health` alone (while the shards are not up yet)."""
        try:
            self.list_store()
        except Exception:  # noqa: BLE001 - recorded in health; the caller goes on
            self.echo(f"model store unreadable: {self.health.last_error}")

    def status(self) -> dict[str, Any]:
        """This table's store health plus what the shards committed (transfer.json)."""
        out = self.health.snapshot() if self.health else {"modelStore": None}
        try:
            out["committed"] = self.state().get("committed")
        except EctlError:
            out["committed"] = None  # unreadable state: the poll reports it
        return out

    def stored_progress(self, scenario: str | None = None) -> dict[str, Any] | None:
        """The training progress the coordinator keeps in this table's store
        (`coordinator.runtime.read_stored_progress`); None when there is none yet. Read on
        request, for `ectl status` once the job and its coordinator are gone. LookupError
        for a scenario other than this table's; EctlError for an unreadable record."""
        from elasticctr.coordinator.runtime import read_stored_progress

        self.scenario_transfer(scenario)  # LookupError for another scenario
        if not self.store:
            raise EctlError("reading the model store needs --model-store")
        return read_stored_progress(self.store)

    def readiness(self) -> tuple[bool, str | None]:
        """(ready, why not): ready once the latest read of the store succeeded."""
        if self.health is None:
            return False, "no model store"
        return self.health.ok, self.health.detail()

    def poll_once(self, *, raise_errors: bool = False) -> str | None:
        """Publish the newest unseen version, if any; repair lagging shards. Returns it.

        A rejected version is recorded as failed (never retried automatically) and
        reported; with `raise_errors` the error is raised too.
        """
        with self._locked():
            self.reconcile()
        state = self.state()
        if state.get("pinned"):
            self.list_store()  # keeps the store's health and newest version current
            return None  # pinned: nothing newer is published until `unpin`
        seen = set(state["published"])
        newest_seen = max(seen) if seen else ""
        stored = self.list_store()
        candidates = [v for v in stored if v not in seen and v > newest_seen]
        if not candidates and state.get("follow_newest"):
            # Unpinned while on an older version: go back to the newest good one even
            # though it was published before the pin.
            good = [v for v in stored if v not in state.get("failed", {})]
            if good and good[-1] != state.get("committed"):
                candidates = [good[-1]]
            else:
                with self._locked():
                    now = self.state()
                    now.pop("follow_newest", None)
                    self._save(now)
        if not candidates:
            return None
        version = candidates[-1]  # jump straight to the newest; older ones are stale
        try:
            if self.publish(version, unless_pinned=True) is None:
                return None  # pinned meanwhile
        except EctlError as exc:
            self.echo(f"version {version} rejected: {describe(exc)}")
            if raise_errors:
                raise
            return None
        return version

    def _retain(self, state: dict[str, Any]) -> None:
        built = built_versions(self.cube_root)
        keep = set(built[-self.keep :]) | {state.get("committed")}
        for v in built:
            if v not in keep:
                remove_version(self.cube_root, v)
                self.echo(f"removed old version {v}")

    def status_doc(self) -> dict[str, Any]:
        """GET /v1/status of the watcher (docs/cube.md "cube-transfer status")."""
        ready, detail = self.readiness()
        return {
            "ready": ready,
            "detail": detail,
            **self.status(),
            "scenario": self.table,
            "shardsError": self.shards_error,
        }

    def tables(self) -> dict[str, Transfer]:
        """Scenario -> its transfer (this one alone), for /metrics."""
        return {self.table: self}

    def scenario_transfer(self, scenario: str | None) -> Transfer:
        """This transfer, when `scenario` is its table (or None); LookupError otherwise."""
        if scenario not in (None, self.table):
            raise LookupError(f"scenario {scenario!r}: this watcher has one table ({self.table})")
        return self

    def poke(self, scenario: str | None = None) -> None:
        """A new version may be in the store (`scenario`'s, or any): poll now."""
        self.pokes += 1
        self.wake.set()

    def run(self, interval: float, stop: Callable[[], bool] = lambda: False) -> None:
        _watch(self, interval, stop)


def _sleep(t: Transfer | PlatformTransfer, interval: float) -> None:
    """Until the next poll: `interval` seconds, or less when poked meanwhile."""
    t.wake.wait(interval)
    t.wake.clear()


def _watch(t: Transfer | PlatformTransfer, interval: float, stop: Callable[[], bool]) -> None:
    """Poll until `stop()`; waits for unreachable shards (pods start in any order), but a
    shard list that does not match the shards is a configuration error. While it waits,
    the store is read too, so readiness and status tell about the store from the start."""
    while not stop():
        try:
            t.check_shards()
            t.shards_error = None
            break
        except ShardError as exc:
            t.shards_error = str(exc)
            t.echo(f"waiting for shards: {exc}")
            t.probe_store()
            _sleep(t, interval)
    while not stop():
        try:
            t.poll_once()
        except (EctlError, OSError) as exc:  # OSError: a local store's folder (a mount)
            t.counts.inc("error", getattr(t, "table", ""), "poll_failed")
            t.echo(f"poll failed: {redact_url(str(exc), t.store or '')}")
        _sleep(t, interval)


class PlatformTransfer:
    """cube-transfer of a platform: the default scenario and every registered one.

    Each poll reads the registry (a failed read changes nothing), starts a `Transfer` for
    each new scenario, drops the tables (on every shard) and builds of scenarios no longer
    registered, then polls every scenario on its own: one scenario's broken version,
    unreadable store prefix or full budget is recorded in `errors` and never stops the
    others.
    """

    def __init__(
        self,
        *,
        cube_root: Path,
        shard_urls: list[str],
        store: str,
        registry: scenarios.Registry,
        keep: int = 3,
        notify: list[str] | None = None,
        timeout: float = 120.0,
        echo: Callable[[str], None] | None = None,
    ):
        self.cube_root = Path(cube_root)
        self.store = store
        self.registry = registry
        self.keep = keep
        self.notify = list(notify or [])
        self.echo = echo or (lambda msg: log.info(msg))
        self.cube = CubeClient(shard_urls, timeout=timeout)
        self.num_shards = self.cube.num_shards
        self.transfers: dict[str, Transfer] = {}
        self.registered: dict[str, scenarios.Scenario] = {}
        self.errors: dict[str, str] = {}
        self.shards_error: str | None = None
        self.counts = Counts()
        self.wake = threading.Event()
        self.pokes = 0
        self._add(scenarios.DEFAULT, None)

    def close(self) -> None:
        self.cube.close()

    def _add(self, name: str, budget: int | None) -> Transfer:
        t = Transfer(
            cube_root=self.cube_root,
            shard_urls=[],
            store=self.store,
            keep=self.keep,
            notify=self.notify,
            echo=self.echo,
            table=name,
            budget_bytes=budget,
            cube=self.cube,
            counts=self.counts,
        )
        self.transfers[name] = t
        return t

    def check_shards(self) -> None:
        self.transfers[scenarios.DEFAULT].check_shards()

    def probe_store(self) -> None:
        self.transfers[scenarios.DEFAULT].probe_store()

    def stored_progress(self, scenario: str | None = None) -> dict[str, Any] | None:
        """`Transfer.stored_progress` of one registered scenario (the store root's by
        default); LookupError for one not registered."""
        return self.scenario_transfer(scenario).stored_progress()

    def readiness(self) -> tuple[bool, str | None]:
        """Ready while the platform's store itself can be read: the default table's
        listing of the store root. A scenario's own trouble (a rejected version, a full
        budget, an unreadable `scenarios/NAME` prefix) and an unreadable scenario
        registry show in /v1/status but leave the transfer ready: the other scenarios
        are still published."""
        return self.transfers[scenarios.DEFAULT].readiness()

    def sync(self) -> bool:
        """Follow the registry; False when it could not be read (nothing changed)."""
        try:
            found = self.registry.list()
        except EctlError as exc:
            self.counts.inc("error", "", "registry_unreadable")
            self.errors["registry"] = describe(exc)
            self.echo(f"scenario registry unreadable, keeping {sorted(self.registered)}: {exc}")
            return False
        self.errors.pop("registry", None)
        for name, sc in found.items():
            if name == scenarios.DEFAULT:
                continue
            t = self.transfers.get(name) or self._add(name, sc.cube_memory_bytes)
            if name not in self.registered:
                self.echo(
                    f"scenario {name} registered (cube budget {sc.cube_memory_mib} MiB/shard)"
                )
            t.budget_bytes = sc.cube_memory_bytes
        for name in [n for n in self.transfers if n != scenarios.DEFAULT and n not in found]:
            self.transfers.pop(name).close()
            self.errors.pop(name, None)
            self.echo(f"scenario {name} removed from the registry: dropping its tables")
        self.registered = {n: sc for n, sc in found.items() if n != scenarios.DEFAULT}
        self.prune()
        return True

    def prune(self) -> list[str]:
        """Drop, on every shard, tables of scenarios not registered, and their builds.
        Repeated every poll: a shard that was down (or restored a dropped table from its
        state dir) is cleaned when it is back."""
        dropped: set[str] = set()
        for s in self.cube.shards:
            try:
                held = set(s.status().get("tables", {}))
            except ShardError as exc:
                log.warning("prune: %s", exc)
                continue
            for name in sorted(held - set(self.registered) - {scenarios.DEFAULT}):
                try:
                    s.drop(name)
                    dropped.add(name)
                except ShardError as exc:
                    log.warning("prune %s: %s", name, exc)
        root = self.cube_root / scenarios.SCENARIOS_DIR
        for path in sorted(root.iterdir()) if root.is_dir() else []:
            if path.is_dir() and path.name not in self.registered:
                shutil.rmtree(path, ignore_errors=True)
                dropped.add(path.name)
        if dropped:
            self.echo(f"dropped tables and builds of removed scenarios: {sorted(dropped)}")
            for name in sorted(dropped):
                self._notify_removed(name)
        return sorted(dropped)

    def _notify_removed(self, name: str) -> None:
        for url in self.notify:
            try:
                httpx.post(url, json={"scenario": name, "removed": True}, timeout=30)
            except httpx.HTTPError as exc:
                self.echo(f"notify {url} of removed scenario {name} failed: {exc}")

    def poll_once(self) -> dict[str, str | None]:
        """One round: registry, then every scenario; returns scenario -> version published."""
        self.sync()
        published: dict[str, str | None] = {}
        for name, t in list(self.transfers.items()):
            try:
                published[name] = t.poll_once(raise_errors=True)
                if published[name]:  # an error stays visible until a version succeeds
                    self.errors.pop(name, None)
            except EctlError as exc:
                self.errors[name] = describe(exc)
                published[name] = None
            except Exception as exc:  # noqa: BLE001 - isolation: one scenario's bug
                self.counts.inc("error", name, "poll_failed")
                log.exception("scenario %s: poll failed", name)
                self.errors[name] = f"{type(exc).__name__}: {exc}"
                published[name] = None
        return published

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"registry": self.registry.describe(), "scenarios": {}}
        for name, t in sorted(self.transfers.items()):
            try:
                st = t.state()
            except EctlError as exc:
                st = {"error": str(exc)}
            st["error"] = self.errors.get(name)
            st["budget_bytes"] = t.budget_bytes
            out["scenarios"][name] = st
        if "registry" in self.errors:
            out["registry_error"] = self.errors["registry"]
        return out

    def status_doc(self) -> dict[str, Any]:
        """GET /v1/status: the store root's fields (the default table) at the top, the
        same per scenario under `scenarios` plus `error`, the scenario's last failure
        (a rejected version, a refused budget, its prefix unreadable; null once a
        version of it is published)."""
        ready, detail = self.readiness()
        per: dict[str, Any] = {}
        for name, t in sorted(dict(self.transfers).items()):  # the poll thread adds some
            per[name] = {
                **t.status(),
                "error": self.errors.get(name),
                "budgetBytes": t.budget_bytes,
            }
        return {
            "ready": ready,
            "detail": detail,
            **self.transfers[scenarios.DEFAULT].status(),
            "shardsError": self.shards_error,
            "registry": self.registry.describe(),
            "registryError": self.errors.get("registry"),
            "scenarios": per,
        }

    def tables(self) -> dict[str, Transfer]:
        """Scenario -> its transfer (a copy: the poll thread adds and drops some)."""
        return dict(self.transfers)

    def scenario_transfer(self, scenario: str | None) -> Transfer:
        """The transfer of a registered scenario (the default one for None); LookupError."""
        t = self.transfers.get(scenario or scenarios.DEFAULT)
        if t is None:
            raise LookupError(f"scenario {scenario!r} is not registered")
        return t

    def poke(self, scenario: str | None = None) -> None:
        """A new version may be in a scenario's store: poll every scenario now (a round
        reads one listing per scenario; pokes come once per exported hour and scenario)."""
        self.pokes += 1
        self.wake.set()

    def run(self, interval: float, stop: Callable[[], bool] = lambda: False) -> None:
        _watch(self, interval, stop)
