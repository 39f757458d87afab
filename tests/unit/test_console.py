"""The console's own logic without a platform: tokens and teams, the audit log, the
traffic figures from serving's histogram (the browser test is in
tests/integration/test_quickstart.py, the cluster one in tests/e2e/test_platform.py)."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from elasticctr.console.server import Audit, Principal, Users
from elasticctr.console.traffic import Traffic, histogram_buckets, quantile
from elasticctr.errors import EctlError

pytestmark = pytest.mark.fast


def test_tokens_and_teams(tmp_path):
    users = tmp_path / "users.yaml"
    users.write_text(
        "- {user: ana, token: t-ana, teams: [growth]}\n- {user: bo, token: t-bo, teams: ['*']}\n"
    )
    u = Users.from_file("t-admin", users)
    assert u.find("Bearer t-ana") == Principal("ana", ("growth",))
    assert u.find("Bearer t-admin").sees("anything")
    assert u.find("Bearer t-bo").sees("content")
    assert not u.find("Bearer t-ana").sees("content")
    for header in (None, "", "t-ana", "Basic t-ana", "Bearer t-an", "Bearer t-ana "):
        assert u.find(header) is None, header


@pytest.mark.parametrize(
    "text, words",
    [
        ("{user: a}", "expected a list"),
        ("- {user: a, teams: [x]}", "entry 0"),
        ("- {user: a, token: t, teams: x}", "teams (a list"),
        ("- [a, b]", "entry 0"),
        ("- {user: a, token: t, teams: [x]\n", "users file"),  # not YAML
    ],
)
def test_a_bad_users_file_is_one_clear_error(tmp_path, text, words):
    path = tmp_path / "users.yaml"
    path.write_text(text)
    with pytest.raises(EctlError, match="users file") as err:
        Users.from_file(None, path)
    assert words in err.value.message


def test_no_token_at_all_is_refused():
    with pytest.raises(EctlError, match="needs a token"):
        Users(None)


def test_the_audit_log_keeps_every_change_and_survives_a_torn_line(tmp_path):
    audit = Audit(tmp_path / "sub" / "audit.jsonl")
    audit.record("ana", "rollback", "coupon", {"version": "20200401/00"}, "done")
    with open(audit.path, "a") as fh:
        fh.write('{"at": "2026-')  # a crash mid-write
    audit.record("bo", "unpin", "coupon", {}, "refused: not pinned")
    entries = audit.read()  # the torn line is skipped; the record after it is whole
    assert [(e["user"], e["action"], e["outcome"]) for e in entries] == [
        ("ana", "rollback", "done"), ("bo", "unpin", "refused: not pinned")
    ]  # fmt: skip
    lines = audit.path.read_text().splitlines()
    assert json.loads(lines[0])["detail"] == {"version": "20200401/00"}


def _metrics(observations: dict[str, list[float]]) -> str:
    reg = CollectorRegistry()
    h = Histogram("elasticctr_serving_predict_seconds", "x", ["scenario"], registry=reg,
                  buckets=(0.001, 0.002, 0.005, 0.01, 0.05))  # fmt: skip
    for name, values in observations.items():
        for v in values:
            h.labels(name).observe(v)
    return generate_latest(reg).decode()


def test_traffic_is_a_rate_between_two_reads_summed_over_replicas():
    t = Traffic()
    assert t.update([_metrics({"feed": [0.001] * 10})], now=100.0) == {}  # the first read
    a = _metrics({"feed": [0.0015] * 110 + [0.04] * 10, "coupon": [0.003] * 5})
    b = _metrics({"feed": [0.0015] * 100})
    out = t.update([a, b], now=110.0)
    assert out["feed"]["qps"] == pytest.approx((120 + 100 - 10) / 10)
    assert 10 < out["feed"]["p99_ms"] <= 50  # the slow tenth of one replica's
    assert out["coupon"]["qps"] == pytest.approx(0.5)
    assert 2 < out["coupon"]["p99_ms"] <= 5


def test_quantile_interpolates_within_the_bucket_as_promql_does():
    cum = {0.1: 50.0, 0.2: 100.0, float("inf"): 100.0}
    assert quantile(cum, 0.5) == pytest.approx(0.1)
    assert quantile(cum, 0.75) == pytest.approx(0.15)
    assert quantile({0.1: 0.0, float("inf"): 10.0}, 0.99) == pytest.approx(0.1)
    assert histogram_buckets([_metrics({"x": [0.003]})])["x"][0.005] == 1.0
