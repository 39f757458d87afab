"""One cube shard's tables and their versions: load (verify sha256, mmap), commit
(atomic swap), rollback, drop.

A shard process holds one table per scenario of the platform (elasticctr.scenarios):
the default table (a single release's versions, `{cube_root}/versions/...`) and one per
named scenario (`{cube_root}/scenarios/{name}/versions/...`), each versioned, committed
and evicted on its own. No HTTP here (server.py is the transport). A table's committed
version is persisted to its `state.json` (`{state_dir}[/scenarios/{name}]`) on every
commit, so a restarted shard comes back on every table's committed version.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticctr import scenarios
from elasticctr.cube.builder import read_cube_manifest, version_dir
from elasticctr.cube.format import ShardFile
from elasticctr.errors import EctlError
from elasticctr.versions import check_version_id, sha256_file

log = logging.getLogger("elasticctr.cube.shard")

STATE_FILE = "state.json"


class VersionRejected(EctlError):
    """The files of a version failed verification; the serving version is unchanged."""


class VersionNotLoaded(EctlError):
    """A request named a version this shard does not hold (HTTP 409)."""


class NoRoom(VersionRejected):
    """Loading a version would exceed its table's budget or the shard's capacity (HTTP 507)."""


class TableNotFound(EctlError):
    """A request named a table (scenario) this shard does not hold (HTTP 404)."""


@dataclass
class LoadedVersion:
    version: str
    shard: ShardFile
    sha256: str
    loaded_at: float = field(default_factory=time.time)

    @property
    def dim(self) -> int:
        return self.shard.dim

    @property
    def count(self) -> int:
        return self.shard.count

    @property
    def nbytes(self) -> int:
        return self.shard.nbytes


class ShardState:
    """Versions held by one shard process. Lookups read `committed` once per request."""

    def __init__(
        self,
        cube_root: Path,
        state_dir: Path,
        shard: int,
        num_shards: int,
        keep: int,
        table: str = scenarios.DEFAULT,
    ):
        if not (0 <= shard < num_shards):
            raise EctlError(f"shard {shard} is outside 0..{num_shards - 1}")
        if keep < 1:
            raise EctlError(f"--keep must be >= 1, got {keep}")
        self.table = table
        self.cube_root = Path(cube_root)
        self.state_dir = Path(state_dir)
        self.shard = shard
        self.num_shards = num_shards
        self.keep = keep
        self.versions: dict[str, LoadedVersion] = {}
        self.committed: LoadedVersion | None = None
        self.history: list[str] = []  # committed versions, newest first
        self.last_error: str | None = None
        # Set when the committed version of the state dir could not be loaded after a
        # restart (the shard lost what it served): not ready until a version is committed.
        self.restore_error: str | None = None
        self.loads_ok = 0
        self.loads_rejected = 0
        self.commits = 0
        self._lock = threading.Lock()  # admin operations only; lookups never take it

    # --- loading ------------------------------------------------------------------------
    @property
    def held_bytes(self) -> int:
        """Bytes of every version this table holds (the shard files it has mapped)."""
        return sum(lv.nbytes for lv in list(self.versions.values()))

    def load(
        self, version: str, *, budget_bytes: int | None = None, free_bytes: int | None = None
    ) -> LoadedVersion:
        """Load and verify a built version; stage it (not serving until commit).

        `budget_bytes`: what this table may hold in all (its scenario's budget);
        `free_bytes`: what the shard has left over all its tables. A version that does
        not fit either is refused (NoRoom) before anything is mapped.
        """
        check_version_id(version)
        with self._lock:
            if version in self.versions:
                return self.versions[version]
            try:
                lv = self._open(version, budget_bytes, free_bytes)
            except EctlError as exc:
                self.loads_rejected += 1
                self.last_error = f"load {version}: {exc}"
                log.error("rejected version %s: %s", version, exc)
                raise VersionRejected(str(exc)) from exc
            self.versions[version] = lv
            self.loads_ok += 1
            log.info("loaded version %s (%d keys, dim %d)", version, lv.count, lv.dim)
            return lv

    def _room(self, version: str, size: int, budget: int | None, free: int | None) -> None:
        held = self.held_bytes
        if budget is not None and held + size > budget:
            raise NoRoom(
                f"table {self.table!r}: version {version} needs {_mib(size)} on shard "
                f"{self.shard} beside the {_mib(held)} it holds, over its budget of "
                f"{_mib(budget)}; raise the scenario's cube memory budget "
                f"(global.scenario.cubeMemoryMiB) or lower cube.memoryVersions"
            )
        if free is not None and size > free:
            raise NoRoom(
                f"table {self.table!r}: version {version} needs {_mib(size)} on shard "
                f"{self.shard}, which has {_mib(free)} left of its capacity; give cube more "
                f"memory (cube.capacityMiB), more shards, or remove a scenario"
            )

    def _open(
        self, version: str, budget: int | None = None, free: int | None = None
    ) -> LoadedVersion:
        manifest = read_cube_manifest(self.cube_root, version)
        if manifest.get("num_shards") != self.num_shards:
            raise EctlError(
                f"version {version} was built for {manifest.get('num_shards')} shards, "
                f"this server is shard {self.shard} of {self.num_shards}"
            )
        entry = next((e for e in manifest["shards"] if e.get("shard") == self.shard), None)
        if entry is None:
            raise EctlError(f"version {version}: manifest lists no shard {self.shard}")
        path = version_dir(self.cube_root, version) / entry["file"]
        if not path.is_file():
            raise EctlError(f"{path}: missing")
        size = path.stat().st_size
        if size != entry["bytes"]:
            raise EctlError(f"{path}: {size} bytes, manifest says {entry['bytes']} (truncated?)")
        self._room(version, size, budget, free)
        digest = sha256_file(path)
        if digest != entry["sha256"]:
            raise EctlError(f"{path}: sha256 {digest[:12]}… differs from the manifest")
        shard = ShardFile(path)
        h = shard.header
        if (h.shard, h.num_shards, h.count, h.dim) != (
            self.shard, self.num_shards, entry["keys"], manifest["dim"],
        ):  # fmt: skip
            shard.close()
            raise EctlError(f"{path}: header does not match the manifest")
        return LoadedVersion(version, shard, digest)

    # --- switching ----------------------------------------------------------------------
    def commit(self, version: str) -> LoadedVersion:
        """Atomically make a loaded version the serving one and persist that choice."""
        check_version_id(version)
        with self._lock:
            lv = self.versions.get(version)
            if lv is None:
                raise VersionNotLoaded(f"version {version} is not loaded on shard {self.shard}")
            self.history = [version] + [v for v in self.history if v != version]
            self._persist(version)
            self.committed = lv  # the swap: one reference assignment
            self.commits += 1
            self.last_error = None
            self.restore_error = None
            self._evict()
            log.info("committed version %s", version)
            return lv

    def unload(self, version: str) -> None:
        with self._lock:
            if self.committed is not None and self.committed.version == version:
                raise VersionNotLoaded(f"version {version} is the committed one; cannot unload")
            lv = self.versions.pop(version, None)
            if lv is None:
                raise VersionNotLoaded(f"version {version} is not loaded on shard {self.shard}")
            self.history = [v for v in self.history if v != version]

    def _evict(self) -> None:
        keep = set(self.history[: self.keep])
        for v in [v for v in self.versions if v not in keep]:
            # Not closed explicitly: an in-flight request may still hold its arrays.
            del self.versions[v]
        self.history = self.history[: max(self.keep, 1) * 4]

    def _persist(self, committed: str) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        data = {
            "shard": self.shard,
            "num_shards": self.num_shards,
            "committed": committed,
            "history": self.history,
            "updated": time.time(),
        }
        tmp = self.state_dir / f".{STATE_FILE}.tmp"
        with open(tmp, "w") as fh:
            json.dump(data, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.state_dir / STATE_FILE)

    def restore(self) -> None:
        """After a restart: load the committed version (and retained ones, best effort)."""
        path = self.state_dir / STATE_FILE
        if not path.is_file():
            return
        try:
            data = json.loads(path.read_text())
        except (json.JSONDecodeError, OSError) as exc:
            self.last_error = f"{path}: unreadable ({exc}); waiting for a commit"
            log.error(self.last_error)
            return
        if data.get("shard") != self.shard or data.get("num_shards") != self.num_shards:
            self.last_error = (
                f"{path} belongs to shard {data.get('shard')} of {data.get('num_shards')}, "
                f"not {self.shard} of {self.num_shards}; ignoring it"
            )
            log.error(self.last_error)
            return
        committed = data.get("committed")
        self.history = [v for v in data.get("history", []) if isinstance(v, str)]
        try:
            lv = self.load(committed)
        except EctlError as exc:
            self.last_error = f"committed version {committed} cannot be restored: {exc}"
            self.restore_error = self.last_error
            log.error(self.last_error)
            return
        self.committed = lv
        for v in self.history[1 : self.keep]:
            try:
                self.load(v)
            except EctlError:
                pass
        log.info("restored committed version %s", committed)

    # --- reading ------------------------------------------------------------------------
    def pick(self, version: str | None) -> LoadedVersion:
        """The version a lookup answers from: the named one if held, else the committed one."""
        if version:
            lv = self.versions.get(version)
            if lv is None:
                held = ", ".join(sorted(self.versions)) or "none"
                raise VersionNotLoaded(
                    f"version {version} is not held by shard {self.shard} (held: {held})"
                )
            return lv
        lv = self.committed
        if lv is None:
            raise VersionNotLoaded(f"shard {self.shard} has no committed version yet")
        return lv

    def status(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "held_bytes": self.held_bytes,
            "shard": self.shard,
            "num_shards": self.num_shards,
            "committed": self.committed.version if self.committed else None,
            "loaded": sorted(self.versions),
            "history": self.history,
            "keep": self.keep,
            "versions": {
                v: {"keys": lv.count, "dim": lv.dim, "sha256": lv.sha256}
                for v, lv in sorted(self.versions.items())
            },
            "last_error": self.last_error,
        }


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


class Tables:
    """Every table of one shard process: the default one and one per scenario.

    Lookups read `get(name)` once per request (a dict read, never a lock); admin calls
    create a scenario's table on its first load and drop it when the scenario is removed.
    `capacity_bytes` (0 = unbounded) caps what all tables together may hold.
    """

    def __init__(
        self,
        cube_root: Path,
        state_dir: Path,
        shard: int,
        num_shards: int,
        keep: int,
        capacity_bytes: int = 0,
    ):
        self.cube_root = Path(cube_root)
        self.state_dir = Path(state_dir)
        self.shard = shard
        self.num_shards = num_shards
        self.keep = keep
        self.capacity_bytes = capacity_bytes
        self.default = ShardState(cube_root, state_dir, shard, num_shards, keep)
        self.named: dict[str, ShardState] = {}
        self._lock = threading.Lock()

    def get(self, name: str | None) -> ShardState:
        if not name or name == scenarios.DEFAULT:
            return self.default
        state = self.named.get(name)
        if state is None:
            raise TableNotFound(f"shard {self.shard} holds no table {name!r}")
        return state

    def ensure(self, name: str | None) -> ShardState:
        if not name or name == scenarios.DEFAULT:
            return self.default
        with self._lock:
            state = self.named.get(name)
            if state is None:
                scenarios.check_name(name, field_name="table")
                state = ShardState(
                    scenarios.subdir(self.cube_root, name),
                    scenarios.subdir(self.state_dir, name),
                    self.shard,
                    self.num_shards,
                    self.keep,
                    table=name,
                )
                self.named[name] = state
            return state

    def all(self) -> list[ShardState]:
        return [self.default, *sorted(self.named.values(), key=lambda s: s.table)]

    @property
    def held_bytes(self) -> int:
        return sum(s.held_bytes for s in self.all())

    def load(
        self, name: str | None, version: str, budget_bytes: int | None = None
    ) -> LoadedVersion:
        state = self.ensure(name)
        free = self.capacity_bytes - self.held_bytes if self.capacity_bytes else None
        return state.load(version, budget_bytes=budget_bytes, free_bytes=free)

    def drop(self, name: str) -> bool:
        """Forget a scenario's table and its persisted state; False when not held."""
        if not name or name == scenarios.DEFAULT:
            raise EctlError("the default table cannot be dropped")
        with self._lock:
            state = self.named.pop(name, None)
        path = scenarios.subdir(self.state_dir, name) / STATE_FILE
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        if state is not None:
            log.info("dropped table %s (%d versions)", name, len(state.versions))
        return state is not None

    def restore(self) -> None:
        """After a restart: every table's committed version (tables found in the state dir)."""
        self.default.restore()
        root = self.state_dir / scenarios.SCENARIOS_DIR
        for path in sorted(root.glob(f"*/{STATE_FILE}")) if root.is_dir() else []:
            name = path.parent.name
            try:
                self.ensure(name).restore()
            except EctlError as exc:  # a bad folder name: not ours, leave it alone
                log.error("state %s ignored: %s", path, exc)

    def status(self) -> dict[str, Any]:
        """The default table's status at the top level (as before tables), plus every table."""
        doc = self.default.status()
        doc["capacity_bytes"] = self.capacity_bytes
        doc["tables"] = {s.table: s.status() for s in self.all()}
        return doc
