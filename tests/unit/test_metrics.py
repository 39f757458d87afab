"""Every part's /metrics: names from elasticctr.metrics only, one prefix, base units as
suffixes, counters ending in `_total`; and the operator's numbers (versions as data-hour
timestamps, model freshness, the coordinator's export lag and trainer bounds).

Each part's registry is built in-process and given some traffic, then scraped with
prometheus_client (what the /metrics routes return is `generate_latest` of the same
registry; tests/integration cover the routes themselves)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import threading
from types import SimpleNamespace

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from elasticctr import metrics as M
from elasticctr.coordinator import Coordinator, PartitionSpec
from elasticctr.coordinator.server import CoordinatorServer
from elasticctr.errors import EctlError
from elasticctr.httpd import Request

pytestmark = pytest.mark.fast

V0, V1, V2 = "20200401/00", "20200401/01", "20200401/02"
T0 = dt.datetime(2020, 4, 1, tzinfo=dt.UTC).timestamp()

_NAME = re.compile(r"^elasticctr_[a-z][a-z0-9]*(_[a-z0-9]+)*$")
# Units that are not Prometheus base units, or not spelled as one (a data "hour" is a noun).
_NON_BASE = {
    "ms", "us", "ns", "millis", "milliseconds", "microseconds", "nanoseconds", "second",
    "minute", "minutes", "hours", "days", "kb", "mb", "gb", "kib", "mib", "gib", "kilobytes",
    "megabytes", "byte", "percent", "pct", "per",
}  # fmt: skip
_SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
}


def name_problems(name: str, kind: str) -> list[str]:
    """What is wrong with a declared metric name (empty = nothing)."""
    problems = []
    if not _NAME.match(name):
        problems.append("not elasticctr_ + lower snake case")
    words = name.split("_")
    last = words[-1]
    if kind == "counter" and last != "total":
        problems.append("a counter must end in _total")
    if kind != "counter" and "total" in words:
        problems.append("only counters say total")
    if kind == "counter":
        words = words[:-1]
    if bad := sorted(set(words) & _NON_BASE):
        problems.append(f"non-base unit {bad}: use seconds / bytes")
    for unit in ("seconds", "bytes"):
        if unit in words[:-1]:
            problems.append(f"{unit} must be the last word (before _total)")
    if "timestamp" in words and words[-2:] != ["timestamp", "seconds"]:
        problems.append("a point in time is _timestamp_seconds")
    if "info" in words and (kind != "gauge" or words[-1] != "info"):
        problems.append("_info is a gauge's last word")
    return problems


# --- the parts, in-process ----------------------------------------------------------------


def _coordinator(tmp_path) -> tuple[CoordinatorServer, CollectorRegistry]:
    coord = Coordinator(task_bytes=100, lease_seconds=30)
    for hour in (V0, V1, V2):
        coord.add_partition(PartitionSpec(hour, (("file:///x/part-0", 50),)))
    lease = coord.lease("0")
    coord.complete(lease["lease"], "0", 7)
    export = coord.lease("0")
    assert export["kind"] == "export"
    coord.exported(V0, "0", V0, export["checkpoint"])
    bounds = tmp_path / "trainers.json"
    bounds.write_text(json.dumps({"min": 1, "max": 4}))
    server = CoordinatorServer(
        ("127.0.0.1", 0), coord, scenario="feed", data_tz=dt.UTC, trainers_file=str(bounds)
    )
    return server, server.registry


def _fileserver(tmp_path):
    from elasticctr.fileserver.server import FileServer

    server = FileServer(("127.0.0.1", 0), tmp_path, token="t", max_upload_bytes=1 << 20)
    server.count(files_stored=1, bytes_stored=3, unauthorized=1)
    return server, server.registry


def _cube(tmp_path):
    from elasticctr.cube.builder import build_version
    from elasticctr.cube.modelstore import verify_version, write_version
    from elasticctr.cube.server import CubeApp
    from elasticctr.cube.shard import Tables

    keys = np.arange(1, 101, dtype=np.uint64)
    rows = np.ones((keys.size, 4), dtype=np.float32)
    vdir = write_version(tmp_path / "store", V1, [(keys, rows)], slots=[0])
    build_version(verify_version(vdir, V1), tmp_path / "cube", 1)
    tables = Tables(tmp_path / "cube", tmp_path / "state", 0, 1, keep=2)
    tables.load(None, V1)
    tables.default.commit(V1)
    app = CubeApp(tables)
    app.tz = dt.UTC
    ok = app.route(Request("POST", "/v1/lookup", "", {}, keys[:3].astype("<u8").tobytes()))
    assert ok.status == 200
    missing = app.route(Request("POST", "/v1/lookup", "", {"x-cube-table": "nope"}, b""))
    assert missing.status == 404
    return app, app.registry


def _transfer(tmp_path):
    from elasticctr.cube.modelstore import write_version
    from elasticctr.cube.transfer import Transfer
    from elasticctr.cube.transfer_server import TransferStatusServer

    store = tmp_path / "tstore"
    write_version(store, V2, [(np.arange(1, 5, dtype=np.uint64), np.ones((4, 2), np.float32))])
    t = Transfer(cube_root=tmp_path / "tcube", shard_urls=["http://127.0.0.1:9"], store=str(store))
    t.probe_store()
    t._save({"committed": V1, "published": [V1], "failed": {}, "notified": V1})
    t.counts.inc("publish", "default", "ok")
    t.counts.inc("error", "default", "version_rejected")
    with pytest.raises(EctlError):
        t.check_shards()  # nothing listens on port 9: the shard is down
    server = TransferStatusServer(("127.0.0.1", 0), t)
    server.collector_of_test = t  # closed by the fixture
    return server, server.registry


def _serving(tmp_path):
    from elasticctr.serving.app import ServeConfig, ServingApp

    app = ServingApp(ServeConfig(store=str(tmp_path / "empty"), cache=tmp_path / "cache"))
    app.metrics.tz = dt.UTC

    def call(method: str, path: str, body: bytes = b"") -> int:
        return asyncio.run(app.handle(Request(method, path, "", {}, body))).status

    assert call("POST", "/v1/predict", b"1 0 5:0\n") == 503  # no version yet
    assert call("POST", "/v1/scenarios/nope/predict", b"") == 404
    assert call("GET", "/no/such/route") == 404
    app.versions.current = SimpleNamespace(version=V1)  # what the scrape reads of it
    app.metrics.samples.labels("default").inc(3)
    app.metrics.latency.labels("default").observe(0.002)
    app.metrics.lookup.observe(0.001)
    app.metrics.batch.observe(3)
    app.metrics.switches.labels("default", "ok").inc()
    app.metrics.retries.labels("default").inc()
    app.metrics.version.labels("default", V1).set(1)
    return app, app.metrics.registry


PARTS = {
    "coordinator": _coordinator,
    "fileserver": _fileserver,
    "cube": _cube,
    "cube_transfer": _transfer,
    "serving": _serving,
}


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """part -> (the part's object, its families parsed back from the exposition text)."""
    out, servers = {}, []
    for part, build in PARTS.items():
        obj, registry = build(tmp_path_factory.mktemp(part))
        if hasattr(obj, "server_close"):
            servers.append(obj)
        text = generate_latest(registry).decode()
        out[part] = (obj, list(text_string_to_metric_families(text)))
    yield out
    for server in servers:
        server.server_close()
        if hasattr(server, "collector_of_test"):
            server.collector_of_test.close()


def _value(families, name: str, **labels) -> float:
    for family in families:
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise AssertionError(f"{name}{labels} not exposed")


# --- the rules ----------------------------------------------------------------------------


def test_declared_names_follow_the_rules():
    problems = {s.name: p for s in M.ALL.values() if (p := name_problems(s.name, s.kind))}
    assert not problems


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("ectl_cube_keys_total", "counter"),
        ("elasticctr_cube_keys", "counter"),
        ("elasticctr_x_lookup_ms", "histogram"),
        ("elasticctr_x_hours_behind", "gauge"),
        ("elasticctr_x_samples_per_second", "gauge"),
        ("elasticctr_x_seconds_behind", "gauge"),
        ("elasticctr_x_version_timestamp", "gauge"),
        ("elasticctr_x_requests_total", "gauge"),
        ("elasticctr_x_Keys_total", "counter"),
    ],
)
def test_the_rules_catch_bad_names(name, kind):
    assert name_problems(name, kind)


@pytest.mark.parametrize("part", PARTS)
def test_every_exposed_family_is_declared_and_well_named(scraped, part):
    _, families = scraped[part]
    assert families
    for family in families:
        name = family.name + ("_total" if family.type == "counter" else "")
        spec = M.ALL.get(name)
        assert spec is not None, f"{part} exposes {name}, which elasticctr.metrics lacks"
        assert name.startswith(f"{M.PREFIX}{part}_"), f"{name} is not {part}'s"
        assert family.type == spec.kind, name
        assert not name_problems(name, spec.kind), name
        for sample in family.samples:
            suffix = sample.name[len(family.name) :]
            assert suffix in _SAMPLE_SUFFIXES[spec.kind], sample.name
            assert set(sample.labels) - {"le"} == set(spec.labels), sample


def test_every_declared_name_is_exposed_by_its_part(scraped):
    exposed = {
        f.name + ("_total" if f.type == "counter" else "")
        for _, families in scraped.values()
        for f in families
    }
    assert set(M.ALL) - exposed == set()


def test_the_cube_and_the_transfer_have_their_own_families(scraped):
    """`elasticctr_cube_` is a prefix of `elasticctr_cube_transfer_`: the shard must expose
    none of the transfer's names."""
    _, families = scraped["cube"]
    assert not [f.name for f in families if f.name.startswith("elasticctr_cube_transfer_")]


# --- the operator's numbers -----------------------------------------------------------------


def test_versions_are_data_hour_timestamps_in_the_data_clock(monkeypatch):
    assert M.version_timestamp(V1, dt.UTC) == T0 + 3600
    east = M.parse_utc_offset("+08:00")
    assert M.version_timestamp(V1, east) == T0 + 3600 - 8 * 3600
    assert M.parse_utc_offset("-05:30").utcoffset(None) == dt.timedelta(hours=-5, minutes=-30)
    monkeypatch.setenv("ELASTICCTR_DATA_UTC_OFFSET", "+01:00")
    assert M.version_timestamp(V0) == T0 - 3600
    for bad in ("+8", "08:00", "+15:00", "CET", "+08:60"):
        with pytest.raises(EctlError, match="UTC offset"):
            M.parse_utc_offset(bad)


def test_freshness_is_the_time_since_the_served_hour_ended():
    # Served 20200401/01 (01:00-02:00): at 02:30 the model is 30 minutes old.
    assert M.freshness_seconds(V1, now=T0 + 2.5 * 3600, tz=dt.UTC) == 1800


def test_coordinator_numbers(scraped):
    _, fam = scraped["coordinator"]
    # Hours 00..02 complete, 00 exported: two hours behind.
    assert _value(fam, "elasticctr_coordinator_export_lag_seconds", scenario="feed") == 7200
    newest = _value(fam, "elasticctr_coordinator_newest_data_hour_timestamp_seconds")
    assert newest == T0 + 2 * 3600
    assert _value(fam, "elasticctr_coordinator_exported_version_timestamp_seconds") == T0
    assert _value(fam, "elasticctr_coordinator_trainers") == 1
    assert _value(fam, "elasticctr_coordinator_trainers_min") == 1
    assert _value(fam, "elasticctr_coordinator_trainers_max") == 4
    assert _value(fam, "elasticctr_coordinator_trainer_samples_total", trainer="0") == 7
    assert _value(fam, "elasticctr_coordinator_samples_total") == 7


def test_coordinator_lag_before_any_export_and_without_bounds(tmp_path):
    coord = Coordinator(task_bytes=100)
    server = CoordinatorServer(("127.0.0.1", 0), coord, data_tz=dt.UTC, trainers_file=None)
    try:
        assert "export_lag_seconds{" not in generate_latest(server.registry).decode()
        coord.add_partition(PartitionSpec(V0, (("file:///x/part-0", 50),)))
        coord.add_partition(PartitionSpec(V1, (("file:///x/part-0", 50),)))
        fam = list(text_string_to_metric_families(generate_latest(server.registry).decode()))
        assert _value(fam, "elasticctr_coordinator_export_lag_seconds", scenario="default") == 7200
        names = {s.name for f in fam for s in f.samples}
        assert "elasticctr_coordinator_trainers_max" not in names
        assert "elasticctr_coordinator_exported_version_timestamp_seconds" not in names
    finally:
        server.server_close()


@pytest.mark.parametrize("text", ["", "not json", "[1]", '{"min": "1", "max": true}'])
def test_unusable_trainer_bounds_are_left_out(tmp_path, text):
    from elasticctr.coordinator.server import trainer_bounds

    path = tmp_path / "trainers.json"
    path.write_text(text)
    assert trainer_bounds(str(path)) == (None, None)
    assert trainer_bounds(str(tmp_path / "missing.json")) == (None, None)


def test_cube_numbers(scraped):
    _, fam = scraped["cube"]
    ts = "elasticctr_cube_committed_version_timestamp_seconds"
    assert _value(fam, ts, scenario="default") == T0 + 3600
    assert _value(fam, "elasticctr_cube_errors_total", kind="no_table") == 1
    assert _value(fam, "elasticctr_cube_keys_total") == 3
    assert _value(fam, "elasticctr_cube_version_loaded", scenario="default", version=V1) == 1


def test_transfer_numbers(scraped):
    _, fam = scraped["cube_transfer"]
    committed = "elasticctr_cube_transfer_committed_version_timestamp_seconds"
    assert _value(fam, committed, scenario="default") == M.version_timestamp(V1)
    newest = "elasticctr_cube_transfer_newest_version_timestamp_seconds"
    assert _value(fam, newest, scenario="default") == M.version_timestamp(V2)
    assert _value(fam, "elasticctr_cube_transfer_store_readable", scenario="default") == 1
    assert _value(fam, "elasticctr_cube_transfer_shard_up", shard="0", replica="0") == 0
    publishes = "elasticctr_cube_transfer_publishes_total"
    assert _value(fam, publishes, scenario="default", result="ok") == 1
    errors = "elasticctr_cube_transfer_errors_total"
    assert _value(fam, errors, scenario="default", kind="version_rejected") == 1


def test_serving_numbers(scraped):
    app, fam = scraped["serving"]
    assert _value(fam, "elasticctr_serving_version_timestamp_seconds", scenario="default") == (
        T0 + 3600
    )
    fresh = _value(fam, "elasticctr_serving_model_freshness_seconds", scenario="default")
    assert fresh > 6 * 365 * 86400  # a 2020 hour is years old
    req = "elasticctr_serving_requests_total"
    assert _value(fam, req, route="/v1/predict", code="503", scenario="default") == 1
    # An unknown scenario's name (client input) is never a label value.
    assert _value(fam, req, route="/v1/scenarios/{name}/predict", code="404", scenario="") == 1
    assert _value(fam, req, route="other", code="404", scenario="") == 1
    errors = "elasticctr_serving_errors_total"
    assert _value(fam, errors, scenario="", kind="unknown_scenario") == 1
    assert _value(fam, errors, scenario="", kind="not_found") == 1
    assert _value(fam, errors, scenario="default", kind="not_ready") == 1


def test_scrapes_run_beside_the_parts_threads(scraped):
    """/metrics is read from other threads than the ones that count (the poll thread of
    cube-transfer, the request threads of the coordinator): a scrape never fails."""
    transfer, _ = scraped["cube_transfer"]
    t = transfer.collector_of_test
    stop = threading.Event()

    def bump():
        while not stop.is_set():
            t.counts.inc("error", "default", "poll_failed")

    thread = threading.Thread(target=bump)
    thread.start()
    try:
        for _ in range(50):
            generate_latest(transfer.registry)
    finally:
        stop.set()
        thread.join()


# --- the names where people read them ---------------------------------------------------------

RENAMED = {"elasticctr_coordinator_trainer_samples_per_second"}
"""Old names docs/operations.md names as moved (nothing else may use them)."""
_TOKEN = re.compile(r"\b((?:elasticctr|ectl)_[a-z0-9_]*[a-z0-9])(?![a-z0-9_])")


def _repo():
    from elasticctr.constants import repo_root

    return repo_root()


def _texts() -> dict[str, str]:
    root = _repo()
    files = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    files += sorted((root / "bench").rglob("*.py"))
    files += [p for p in sorted((root / "tests").rglob("*")) if p.suffix in {".py", ".yaml"}]
    files += sorted((root / "charts" / "elasticctr" / "files").rglob("*.*"))
    me = root / "tests" / "unit" / "test_metrics.py"
    return {str(p.relative_to(root)): p.read_text() for p in files if p.is_file() and p != me}


def _declared(name: str) -> bool:
    base = re.sub(r"_(bucket|sum|count)$", "", name)
    return name in M.ALL or (base in M.ALL and M.ALL[base].kind == "histogram")


def test_docs_tests_and_bench_use_declared_names_only():
    """Every metric name written in the docs, tests, bench and the chart's dashboard and
    rules is one the parts expose: no `ectl_cube_*`, no renamed name left behind."""
    wrong = {}
    for where, text in _texts().items():
        for name in _TOKEN.findall(text):
            if name.startswith("ectl_") and not name.startswith(("ectl_cube", "ectl_serving")):
                continue  # ectl_show and other identifiers, not metrics
            if _declared(name) or (name in RENAMED and where == "docs/operations.md"):
                continue
            wrong.setdefault(name, []).append(where)
    assert not wrong


def test_docs_operations_lists_every_metric():
    text = (_repo() / "docs" / "operations.md").read_text()
    parts = ("coordinator", "fileserver", "cube", "cube_transfer", "serving")
    listed = set(re.findall(r"`(elasticctr_[a-z0-9_<>]+)`", text))
    listed |= {n.replace("<part>", p) for n in listed if "<part>" in n for p in parts}
    assert set(M.ALL) - listed == set()
