"""The Prometheus side of the chart (docs/operations.md): the alerting rules pass `promtool
check rules` and their promtool unit tests (tests/prometheus/rules_test.yaml: the alerts
fire on synthetic series), the rules and the Grafana dashboard name only metrics the parts
declare (elasticctr.metrics), every rule selector names the release so the chart can narrow
it, and the rendered monitors, rule and dashboard pass kubeconform with prometheus-operator's
CRD schemas."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import yaml
from chart_helpers import CHART, REPO, render, run
from tests.conftest import require_tool

from elasticctr import metrics

pytestmark = pytest.mark.chart

RULES = CHART / "files" / "prometheus" / "rules.yaml"
RULE_TESTS = REPO / "tests" / "prometheus" / "rules_test.yaml"
DASHBOARD = CHART / "files" / "grafana" / "elasticctr.json"
ANY_RELEASE = 'release=~".+"'
MONITORING = [
    "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
    "--api-versions", "monitoring.coreos.com/v1/PodMonitor",
    "--api-versions", "monitoring.coreos.com/v1/PrometheusRule",
]  # fmt: skip
ALL_ON = [
    "--set", "global.metrics.serviceMonitor.enabled=true",
    "--set", "global.metrics.prometheusRule.enabled=true",
    "--set", "global.metrics.dashboard.enabled=true",
    "--set", "global.metrics.allowFromNamespaces.kubernetes\\.io/metadata\\.name=monitoring",
    "--set", "trainer.volcano.svcNetworkPolicy=false",
]  # fmt: skip
_METRIC = re.compile(r"\b(elasticctr_[a-z0-9_]+|up)\b")
_SELECTOR = re.compile(r"\b(elasticctr_[a-z0-9_]+|up)\{([^}]*)\}")


@pytest.fixture(scope="module")
def promtool() -> str:
    return require_tool("promtool")


def _rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def _declared(name: str) -> bool:
    """A name the parts expose: a declared family, a histogram's series, or `up`."""
    if name == "up" or name in metrics.ALL:
        return True
    base = re.sub(r"_(bucket|sum|count)$", "", name)
    return base in metrics.ALL and metrics.ALL[base].kind == "histogram"


def test_promtool_checks_the_rules(promtool):
    done = run([promtool, "check", "rules", str(RULES)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in done.stdout


def test_the_alerts_fire_on_synthetic_series(promtool):
    done = run([promtool, "test", "rules", str(RULE_TESTS)], cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_unit_test():
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert {r["alert"] for r in _rules()} == tested


def test_the_unit_tests_have_teeth(promtool, tmp_path):
    """A stale-model threshold of 5 h instead of 3 h makes the unit tests fail."""
    (tmp_path / "charts/elasticctr/files/prometheus").mkdir(parents=True)
    rules = RULES.read_text().replace("> 3 * 3600", "> 5 * 3600")
    assert rules != RULES.read_text()
    (tmp_path / "charts/elasticctr/files/prometheus/rules.yaml").write_text(rules)
    (tmp_path / "tests/prometheus").mkdir(parents=True)
    shutil.copy(RULE_TESTS, tmp_path / "tests/prometheus/rules_test.yaml")
    done = run([promtool, "test", "rules", "rules_test.yaml"], cwd=tmp_path / "tests/prometheus")
    assert done.returncode != 0
    assert "ElasticCTRModelStale" in done.stdout + done.stderr


def test_every_rule_selector_names_the_release():
    """The chart narrows `release=~".+"` to its own release: a selector without it would
    match every release's series, and each release would alert for them all."""
    for rule in _rules():
        expr = rule["expr"]
        selectors = _SELECTOR.findall(expr)
        assert selectors, rule["alert"]
        assert all(ANY_RELEASE in matchers for _, matchers in selectors), rule["alert"]
        bare = [m.group(1) for m in _METRIC.finditer(expr) if expr[m.end() : m.end() + 1] != "{"]
        assert not bare, (rule["alert"], bare)


def test_the_rules_name_declared_metrics_only():
    for rule in _rules():
        for name in _METRIC.findall(rule["expr"]):
            assert _declared(name), (rule["alert"], name)


def test_the_dashboard_names_declared_metrics_only():
    text = DASHBOARD.read_text()
    dash = json.loads(text)
    assert dash["uid"] == "elasticctr-overview"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    queries = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    queries += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    assert queries
    names = {n for q in queries for n in _METRIC.findall(q)}
    assert not {n for n in names if not _declared(n)}
    # The operator's questions each have a panel: freshness, versions, lag, trainers.
    for name in (
        "elasticctr_serving_model_freshness_seconds",
        "elasticctr_serving_version_timestamp_seconds",
        "elasticctr_coordinator_export_lag_seconds",
        "elasticctr_coordinator_trainers_min",
        "elasticctr_serving_predict_seconds_bucket",
        "elasticctr_cube_lookup_seconds_bucket",
        "elasticctr_serving_errors_total",
    ):
        assert name in names, name


def test_the_chart_ships_the_rules_narrowed_to_the_release(helm):
    done = render(helm, *MONITORING, "--set", "global.metrics.prometheusRule.enabled=true",
                  "--show-only", "templates/prometheusrule.yaml")  # fmt: skip
    assert done.returncode == 0, done.stderr
    rule = yaml.safe_load(done.stdout)
    want = yaml.safe_load(RULES.read_text().replace(ANY_RELEASE, 'release="ctr"'))
    assert rule["spec"] == want
    assert ANY_RELEASE not in json.dumps(rule["spec"])


def test_monitors_rule_and_dashboard_pass_kubeconform(helm, kubeconform, kube_schema_locations):
    done = render(helm, *MONITORING, *ALL_ON)
    assert done.returncode == 0, done.stderr
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(done.stdout) if d)
    assert kinds.count("ServiceMonitor") == 3  # fileserver, cube shards, serving
    assert kinds.count("PodMonitor") == 2  # cube-transfer, the job's coordinator
    assert kinds.count("PrometheusRule") == 1
    checked = run(
        [kubeconform, "-strict", "-summary", *kube_schema_locations["1.34"]], input=done.stdout
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Invalid: 0, Errors: 0, Skipped: 0" in checked.stdout, checked.stdout


def test_kubeconform_checks_the_monitors_for_real(helm, kubeconform, kube_schema_locations):
    """The CRD schemas are used: a misspelt ServiceMonitor field is reported."""
    done = render(helm, *MONITORING, *ALL_ON)
    docs = yaml.safe_load_all(done.stdout)
    monitor = next(d for d in docs if d and d["kind"] == "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["intervall"] = "30s"
    checked = run(
        [kubeconform, "-strict", "-summary", *kube_schema_locations["1.34"]],
        input=yaml.safe_dump(monitor),
    )
    assert checked.returncode == 1
    assert "intervall" in checked.stdout


def test_the_monitors_make_a_prometheus_config_promtool_accepts(helm, promtool, tmp_path):
    """scripts/cluster/prometheus.py (what the e2e test runs against a real Prometheus):
    prometheus-operator's scrape jobs for the rendered monitors, with the rule narrowed to
    the release and the stale-model threshold and `for` the values set, pass `promtool
    check config` (the Prometheus that runs them, Debian's 2.42)."""
    import sys

    sys.path.insert(0, str(REPO / "scripts" / "cluster"))
    import prometheus

    stale = '{"hours": 58933.25, "for": "10s"}'
    done = render(
        helm,
        *MONITORING,
        *ALL_ON,
        "--set-json",
        f"global.metrics.prometheusRule.modelStale={stale}",
    )
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    for d in docs:
        d["metadata"].setdefault("namespace", "ml")
    by_kind = {k: [d for d in docs if d["kind"] == k] for k in ("ServiceMonitor", "PodMonitor")}
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    stale = rule["spec"]["groups"][0]["rules"][0]
    assert stale["alert"] == "ElasticCTRModelStale" and stale["for"] == "10s"
    assert stale["expr"].endswith('{release="ctr"}) > 58933.25 * 3600'), stale["expr"]
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    sd = prometheus.FileSD(tmp_path / "kubeconfig", tmp_path / "sd")
    cfg = prometheus.config(
        by_kind["ServiceMonitor"], by_kind["PodMonitor"], [rules], sd, "2s", "1s"
    )
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert set(jobs) == {
        "serviceMonitor/ml/ctr-cube/0", "serviceMonitor/ml/ctr-fileserver/0",
        "serviceMonitor/ml/ctr-serving/0", "podMonitor/ml/ctr-cube-transfer/0",
        "podMonitor/ml/ctr-trainer/0",
    }  # fmt: skip
    assert {role for role, _ in sd.jobs.values()} == {"endpoints", "pod"}
    serving = jobs["serviceMonitor/ml/ctr-serving/0"]
    assert serving["scrape_interval"] == "30s" and serving["metrics_path"] == "/metrics"
    keep = [r for r in serving["relabel_configs"] if r.get("action") == "keep"]
    assert {"action": "keep", "source_labels": ["__meta_kubernetes_endpoint_port_name"],
            "regex": "http"} in keep  # fmt: skip
    assert any(r["regex"] == "(serving);true" for r in keep)
    targets = {r.get("target_label") for r in serving["relabel_configs"]}
    assert {"component", "release", "job", "namespace", "pod", "endpoint"} <= targets
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    checked = run([promtool, "check", "config", str(tmp_path / "prometheus.yml")])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 1 rule files found" in checked.stdout + checked.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in checked.stdout + checked.stderr
