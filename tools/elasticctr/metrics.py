"""Prometheus metrics of every part: each name, type, help text and label set, in one place.

Every part builds its families from the `Spec`s below (never from a string literal), so
a name exists once and docs/operations.md can list them all. The rules, from Prometheus'
own naming practice and checked by tests/unit/test_metrics.py against what each part's
registry really exposes:

- `elasticctr_<part>_<what>`, lower snake case, one prefix for every part;
- base units spelled out as the last word: `_seconds`, `_bytes`; a point in time is
  `_timestamp_seconds` (Unix time); a counter ends in `_total`; nothing else does;
- labels never carry unbounded client input: routes are the templates, scenarios are the
  platform's registered ones, error kinds are the codes of the error bodies.

Model versions are data hours (`YYYYMMDD/HH`, elasticctr.versions): `version_timestamp`
turns one into the Unix time the hour starts, read in the clock of the data, a fixed UTC
offset (`ELASTICCTR_DATA_UTC_OFFSET`, `global.data.utcOffset`; UTC by default).

Model freshness, the age of what serving answers with, is defined as
``now - (start of the served version's data hour + 1 h)``: the time since the newest data
the model has seen ended. It is computed from the version id alone, so serving, cube,
cube-transfer and PromQL (`time() - elasticctr_serving_version_timestamp_seconds - 3600`)
all agree, across restarts, replays and every kind of store; the alternative (time since
the hour's donefile appeared) needs a timestamp no store keeps reliably (an http fileserver
has none, S3 has the upload's, a restarted coordinator re-discovers old hours). The part
of freshness that is the data arriving late is upstream's; the part that is training
falling behind is `elasticctr_coordinator_export_lag_seconds`.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from elasticctr.constants import ENV_DATA_UTC_OFFSET
from elasticctr.errors import EctlError

PREFIX = "elasticctr_"
HOUR_SECONDS = 3600

_OFFSET = re.compile(r"^(UTC|Z|[+-](?:0\d|1[0-4]):[0-5]\d)$")
"""`global.data.utcOffset`'s pattern (values.schema.json says the same)."""


@dataclass(frozen=True)
class Spec:
    """One metric: `kind` is counter, gauge or histogram; `name` what users query (a
    counter's with `_total`)."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()

    def family(self, value: float | None = None, **kw):
        """A prometheus_client metric family for a collector's collect()."""
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        cls = {
            "counter": CounterMetricFamily,
            "gauge": GaugeMetricFamily,
            "histogram": HistogramMetricFamily,
        }[self.kind]
        if self.kind == "histogram":
            return cls(self.name, self.help, labels=self.labels or None, **kw)
        if self.labels:
            return cls(self.name, self.help, labels=list(self.labels))
        return cls(self.name, self.help, value=value or 0)

    def metric(self, registry, **kw):
        """A prometheus_client Counter, Gauge or Histogram registered in `registry`."""
        from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

        # No `<name>_created` series: in the text format each is a gauge family of its own,
        # named against the rules above, and nothing here reads it (process-wide, idempotent).
        disable_created_metrics()

        cls = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}[self.kind]
        return cls(self.name, self.help, list(self.labels), registry=registry, **kw)


ALL: dict[str, Spec] = {}


def _spec(name: str, kind: str, help: str, labels: Sequence[str] = ()) -> Spec:  # noqa: A002
    if name in ALL:
        raise AssertionError(f"metric {name} declared twice")
    spec = ALL[name] = Spec(name, kind, help, tuple(labels))
    return spec


def _c(name, help, labels=()):  # noqa: A002
    return _spec(name, "counter", help, labels)


def _g(name, help, labels=()):  # noqa: A002
    return _spec(name, "gauge", help, labels)


def _h(name, help, labels=()):  # noqa: A002
    return _spec(name, "histogram", help, labels)


# --- the HTTP layer every service shares (elasticctr.httpd) ------------------------------


@dataclass(frozen=True)
class HttpSpecs:
    connections: Spec
    refused: Spec
    timeouts: Spec
    protocol_errors: Spec


def _http(part: str) -> HttpSpecs:
    p = f"{PREFIX}{part}_http"
    return HttpSpecs(
        _g(f"{p}_connections", "Open connections."),
        _c(f"{p}_connections_refused_total", "Connections refused over the connection cap."),
        _c(f"{p}_timeouts_total", "Connections closed by a timeout.", ["kind"]),
        _c(
            f"{p}_protocol_errors_total",
            "Requests refused before routing (framing, size, syntax).",
        ),
    )


# --- coordinator (elasticctr.coordinator.server) -----------------------------------------
# One coordinator per scenario's job: every family but the HTTP layer's carries `scenario`.

_S = ("scenario",)
COORDINATOR_TASKS = _g(
    "elasticctr_coordinator_tasks",
    "Data tasks by state (done, leased, pending).",
    [*_S, "state"],
)
COORDINATOR_TASKS_RETRIED = _c(
    "elasticctr_coordinator_tasks_retried_total",
    "Tasks done on a second or later attempt (a lease expired or was given back).",
    _S,
)
COORDINATOR_TASKS_FAILED = _c(
    "elasticctr_coordinator_tasks_failed_total",
    "Tasks a trainer gave back with a reason (a read failed, the trainer is stopping).",
    _S,
)
COORDINATOR_SAMPLES = _c(
    "elasticctr_coordinator_samples_total", "Samples trained (done tasks).", _S
)
COORDINATOR_TRAINERS = _g(
    "elasticctr_coordinator_trainers",
    "Trainers running: those that called in within one lease period.",
    _S,
)
COORDINATOR_TRAINERS_MIN = _g(
    "elasticctr_coordinator_trainers_min",
    "Fewest trainers the job runs with (trainer.trainer.minReplicas); absent when unknown.",
    _S,
)
COORDINATOR_TRAINERS_MAX = _g(
    "elasticctr_coordinator_trainers_max",
    "Trainers the job asks for (trainer.trainer.replicas); absent when unknown.",
    _S,
)
COORDINATOR_TRAINER_SAMPLES = _c(
    "elasticctr_coordinator_trainer_samples_total",
    "Samples trained by each running trainer (the first 256 trainer ids).",
    [*_S, "trainer"],
)
COORDINATOR_PARTITIONS_EXPORTED = _g(
    "elasticctr_coordinator_partitions_exported", "Data hours exported as model versions.", _S
)
COORDINATOR_NEWEST_DATA_HOUR = _g(
    "elasticctr_coordinator_newest_data_hour_timestamp_seconds",
    "Start of the newest complete data hour found (its donefile exists), Unix time.",
    _S,
)
COORDINATOR_EXPORTED_VERSION = _g(
    "elasticctr_coordinator_exported_version_timestamp_seconds",
    "Start of the data hour of the newest exported model version, Unix time.",
    _S,
)
COORDINATOR_EXPORT_LAG = _g(
    "elasticctr_coordinator_export_lag_seconds",
    "Newest complete data hour minus the newest exported one (3600 per hour behind; with "
    "nothing exported yet, every hour found counts).",
    _S,
)
COORDINATOR_START = _g(
    "elasticctr_coordinator_start_timestamp_seconds",
    "When this coordinator started, Unix time: every job (re)start starts a new one.",
    _S,
)
COORDINATOR_HTTP = _http("coordinator")

# --- fileserver (elasticctr.fileserver.server) -------------------------------------------

FILESERVER_COUNTERS: dict[str, Spec] = {
    key: _c(f"elasticctr_fileserver_{name}_total", doc)
    for key, name, doc in [
        ("files_served", "served_files", "File bodies sent (GET, whole or ranged)."),
        ("bytes_served", "served_bytes", "Bytes of file bodies sent."),
        ("files_stored", "stored_files", "Files written (each an atomic rename)."),
        ("bytes_stored", "stored_bytes", "Bytes of files written."),
        ("deletes", "deletes", "Paths deleted."),
        ("unauthorized", "unauthorized", "Requests refused for a missing or wrong bearer token."),
    ]
}
"""The fileserver's counters by the key its handlers count with."""
FILESERVER_HTTP = _http("fileserver")

# --- cube shards (elasticctr.cube.server) ------------------------------------------------

CUBE_REQUESTS = _c(
    "elasticctr_cube_requests_total", "HTTP requests by route and status code.", ["route", "code"]
)
CUBE_ERRORS = _c(
    "elasticctr_cube_errors_total",
    "Error answers by kind (the error body's code: no_table, no_model, bad_keys, ...).",
    ["kind"],
)
CUBE_KEYS = _c("elasticctr_cube_keys_total", "Keys looked up.")
CUBE_MISSING_KEYS = _c(
    "elasticctr_cube_missing_keys_total", "Keys not found (answered with zero rows)."
)
CUBE_LOOKUP_SECONDS = _h("elasticctr_cube_lookup_seconds", "Server time of one lookup request.")
CUBE_VERSION_LOADED = _g(
    "elasticctr_cube_version_loaded",
    "Versions this shard holds per scenario's table (committed=true: the one served).",
    ["scenario", "version", "committed"],
)
CUBE_COMMITTED_VERSION = _g(
    "elasticctr_cube_committed_version_timestamp_seconds",
    "Start of the data hour of the version this shard serves per scenario, Unix time.",
    ["scenario"],
)
CUBE_VERSION_KEYS = _g(
    "elasticctr_cube_version_keys",
    "Keys in this shard of the committed version per scenario.",
    ["scenario"],
)
CUBE_TABLE_BYTES = _g(
    "elasticctr_cube_table_bytes",
    "Bytes of every version a scenario's table holds on this shard.",
    ["scenario"],
)
CUBE_CAPACITY_BYTES = _g(
    "elasticctr_cube_capacity_bytes", "What all tables together may hold (0 = unbounded)."
)
CUBE_READY = _g(
    "elasticctr_cube_ready", "1 when the default table has a version committed and serving."
)
CUBE_LOADS = _c(
    "elasticctr_cube_loads_total", "Version loads by result (ok, rejected).", ["result"]
)
CUBE_COMMITS = _c("elasticctr_cube_commits_total", "Version commits (switches).")
CUBE_HTTP = _http("cube")

# --- cube-transfer (elasticctr.cube.transfer, its status server) -------------------------

TRANSFER_COMMITTED_VERSION = _g(
    "elasticctr_cube_transfer_committed_version_timestamp_seconds",
    "Start of the data hour of the version committed on every shard, Unix time.",
    ["scenario"],
)
TRANSFER_NEWEST_VERSION = _g(
    "elasticctr_cube_transfer_newest_version_timestamp_seconds",
    "Start of the data hour of the newest complete version in the model store, Unix time.",
    ["scenario"],
)
TRANSFER_STORE_READABLE = _g(
    "elasticctr_cube_transfer_store_readable",
    "1 while the latest read of the scenario's model store succeeded.",
    ["scenario"],
)
TRANSFER_STORE_READ = _g(
    "elasticctr_cube_transfer_store_read_timestamp_seconds",
    "When the scenario's model store was last read successfully, Unix time.",
    ["scenario"],
)
TRANSFER_PUBLISHES = _c(
    "elasticctr_cube_transfer_publishes_total",
    "Versions published to every shard by result (ok, rejected).",
    ["scenario", "result"],
)
TRANSFER_ERRORS = _c(
    "elasticctr_cube_transfer_errors_total",
    "Failures by kind: store_unreadable, version_rejected, poll_failed, registry_unreadable.",
    ["scenario", "kind"],
)
TRANSFER_POKES = _c(
    "elasticctr_cube_transfer_pokes_total",
    "Early polls asked for (POST /v1/poke: a coordinator exported a version).",
)
TRANSFER_SHARD_UP = _g(
    "elasticctr_cube_transfer_shard_up",
    "1 when the shard replica answered cube-transfer's latest call, 0 when it could not be "
    "reached.",
    ["shard", "replica"],
)
TRANSFER_SCENARIOS = _g(
    "elasticctr_cube_transfer_scenarios", "Scenarios published (the default one included)."
)
TRANSFER_HTTP = _http("cube_transfer")

# --- serving (elasticctr.serving.app) ----------------------------------------------------

SERVING_REQUESTS = _c(
    "elasticctr_serving_requests_total",
    "HTTP requests by route, status code and scenario (empty for routes without one).",
    ["route", "code", "scenario"],
)
SERVING_ERRORS = _c(
    "elasticctr_serving_errors_total",
    "Error answers by scenario and kind (the error body's code: no_model, overloaded, ...).",
    ["scenario", "kind"],
)
SERVING_SAMPLES = _c("elasticctr_serving_samples_total", "Samples predicted.", ["scenario"])
SERVING_PREDICT_SECONDS = _h(
    "elasticctr_serving_predict_seconds",
    "Predict request latency, decode to response (answered requests).",
    ["scenario"],
)
SERVING_LOOKUP_SECONDS = _h(
    "elasticctr_serving_lookup_seconds",
    "Embedding lookup of one batch as serving sees it (every cube shard, or the local table).",
)
SERVING_BATCH_SAMPLES = _h("elasticctr_serving_batch_samples", "Samples per dynamic batch.")
SERVING_QUEUE_SAMPLES = _g("elasticctr_serving_queue_samples", "Samples waiting for a batch.")
SERVING_SWITCHES = _c(
    "elasticctr_serving_version_switches_total",
    "Version switches by scenario and result (ok, failed).",
    ["scenario", "result"],
)
SERVING_RETRIES = _c(
    "elasticctr_serving_version_retries_total",
    "Requests run again because cube dropped their version mid-way.",
    ["scenario"],
)
SERVING_VERSION_INFO = _g(
    "elasticctr_serving_version_info",
    "The version being served (value 1) per scenario.",
    ["scenario", "version"],
)
SERVING_VERSION = _g(
    "elasticctr_serving_version_timestamp_seconds",
    "Start of the data hour of the version served per scenario, Unix time.",
    ["scenario"],
)
SERVING_FRESHNESS = _g(
    "elasticctr_serving_model_freshness_seconds",
    "Age of the model served per scenario: now minus the end of its version's data hour "
    "(lower is fresher; docs/operations.md).",
    ["scenario"],
)
SERVING_HANDOFF = _h(
    "elasticctr_serving_handoff_seconds",
    "From a point of a version's life (since: data_found, trained, exported; the training "
    "job's clock) to this replica serving it; versions exported while it ran.",
    ["scenario", "since"],
)
HANDOFF_SINCE = {"data_found": "data_found_at", "trained": "trained_at", "exported": "exported_at"}
"""SERVING_HANDOFF's `since` label -> the manifest timeline entry it is measured from."""
SERVING_HTTP = _http("serving")


# --- helpers ------------------------------------------------------------------------------


def http_families(specs: HttpSpecs, stats) -> Iterable:
    """The HTTP layer's stats (elasticctr.httpd.HttpStats) as families."""
    yield specs.connections.family(stats.open)
    yield specs.refused.family(stats.refused)
    timeouts = specs.timeouts.family()
    timeouts.add_metric(["header"], stats.header_timeouts)
    timeouts.add_metric(["idle"], stats.idle_timeouts)
    yield timeouts
    yield specs.protocol_errors.family(stats.protocol_errors)


def parse_utc_offset(text: str | None) -> dt.timezone:
    """`+08:00` / `-05:30` / `UTC` / empty -> a fixed timezone; EctlError otherwise."""
    text = (text or "UTC").strip()
    if not _OFFSET.match(text):
        raise EctlError(
            f"UTC offset {text!r} is not UTC or +HH:MM / -HH:MM",
            hint=f"set {ENV_DATA_UTC_OFFSET} / global.data.utcOffset like +08:00",
        )
    if text in ("UTC", "Z"):
        return dt.UTC
    sign = -1 if text[0] == "-" else 1
    return dt.timezone(sign * dt.timedelta(hours=int(text[1:3]), minutes=int(text[4:6])))


def data_timezone() -> dt.timezone:
    """The clock of the data hours (`ELASTICCTR_DATA_UTC_OFFSET`)."""
    return parse_utc_offset(os.environ.get(ENV_DATA_UTC_OFFSET))


def version_timestamp(version: str, tz: dt.timezone | None = None) -> float:
    """`YYYYMMDD/HH` -> the Unix time its data hour starts (in the data's clock)."""
    from elasticctr.versions import parse_date_hour

    start = parse_date_hour(version).replace(tzinfo=tz or data_timezone())
    return start.timestamp()


def freshness_seconds(version: str, now: float | None = None, tz: dt.timezone | None = None):
    """Model freshness of `version`: now minus the end of its data hour (module docstring)."""
    now = time.time() if now is None else now
    return now - version_timestamp(version, tz) - HOUR_SECONDS
