#!/usr/bin/env python3
"""A real Prometheus that scrapes a release the way prometheus-operator would (docs/operations.md).

    prometheus.py --kubeconfig .cluster/kubeconfig -n NS -R RELEASE [--port P] [--dir DIR]

reads the release's ServiceMonitors, PodMonitors and PrometheusRules from the cluster (the
chart renders them where prometheus-operator's CRDs are served), writes a prometheus.yml
whose scrape jobs are what prometheus-operator v0.85 generates for them (pkg/prometheus/
promcfg.go: one job per endpoint, role `endpoints` / `pod` in the monitors' namespaces, the
selector, port, path, interval and target labels as relabel_configs, the monitor's own
relabelings after them; the operator's sharding rules are left out: one Prometheus, one
shard), loads each PrometheusRule's groups as a rule file, and runs the `prometheus` binary
on loopback until Ctrl-C. It scrapes pod addresses directly, so it runs where pod IPs route
(the test cluster's node: bridge ectr-cni0, scripts/cluster/harness.py).

Discovery: Debian's `prometheus` (bookworm's 2.42, what scripts/bootstrap-tools.sh installs)
is built without Kubernetes service discovery (its NEWS.Debian, 1.5.0: "Kubernetes support
has been completely removed"). So by default (`--sd file`) this script is the discoverer:
every `sd_interval` it lists the Endpoints, Services and Pods of the monitored namespaces
through the API server (the kubeconfig's certificates) and writes, per job, the targets
Prometheus' kubernetes SD would produce, with the same `__meta_kubernetes_*` labels, as a
file_sd file; Prometheus then applies the operator's relabel_configs to them unchanged.
(Not emitted: the extra targets the endpoints role adds for container ports no Endpoints
port names, which every ServiceMonitor's port rule drops anyway.) A Prometheus built with
Kubernetes SD (upstream's) takes `--sd kubernetes`: `kubernetes_sd_configs` with the
kubeconfig instead.

`Prometheus` is the same for tests (tests/e2e/test_release.py): a context manager with
`query`, `targets`, `alert_rule` and `refresh` (monitors and rules read again, then
/-/reload) over Prometheus' HTTP API.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

GROUP, VERSION = "monitoring.coreos.com", "v1"
RELEASE_LABEL = "app.kubernetes.io/instance"
# Endpoint fields this translation does not carry over (authentication, TLS, proxies):
# a monitor that sets one is refused rather than scraped differently.
UNSUPPORTED = (
    "tlsConfig", "bearerTokenFile", "bearerTokenSecret", "basicAuth", "authorization",
    "oauth2", "proxyUrl", "proxyConfig",
)  # fmt: skip


class MonitorError(ValueError):
    """A monitor this translation cannot express."""


# --- prometheus-operator's translation ------------------------------------------------------


def sanitize(name: str) -> str:
    """A Kubernetes label name as a Prometheus label name (the operator's sanitizeLabelName)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def relabel(rc: dict) -> dict:
    """One RelabelConfig of a monitor (camelCase) as Prometheus writes it (the operator's
    generateRelabelConfig: only the fields set, the action lower-cased)."""
    out: dict = {}
    for src, dst in (
        ("sourceLabels", "source_labels"), ("separator", "separator"),
        ("targetLabel", "target_label"), ("regex", "regex"), ("modulus", "modulus"),
        ("replacement", "replacement"),
    ):  # fmt: skip
        if rc.get(src) not in (None, "", [], 0):
            out[dst] = rc[src]
    if rc.get("action"):
        out["action"] = rc["action"].lower()
    return out


def selector_relabelings(selector: dict, meta: str) -> list[dict]:
    """A label selector as keep/drop rules on `__meta_kubernetes_<meta>_label(present)_*`."""
    rules = []
    for key in sorted(selector.get("matchLabels") or {}):
        value = selector["matchLabels"][key]
        rules.append({
            "action": "keep",
            "source_labels": [f"__meta_kubernetes_{meta}_label_{sanitize(key)}",
                              f"__meta_kubernetes_{meta}_labelpresent_{sanitize(key)}"],
            "regex": f"({value});true",
        })  # fmt: skip
    for exp in selector.get("matchExpressions") or []:
        label = [f"__meta_kubernetes_{meta}_label_{sanitize(exp['key'])}",
                 f"__meta_kubernetes_{meta}_labelpresent_{sanitize(exp['key'])}"]  # fmt: skip
        present = [f"__meta_kubernetes_{meta}_labelpresent_{sanitize(exp['key'])}"]
        values = "|".join(exp.get("values") or [])
        rules.append({
            "In": {"action": "keep", "source_labels": label, "regex": f"({values});true"},
            "NotIn": {"action": "drop", "source_labels": label, "regex": f"({values});true"},
            "Exists": {"action": "keep", "source_labels": present, "regex": "true"},
            "DoesNotExist": {"action": "drop", "source_labels": present, "regex": "true"},
        }[exp["operator"]])  # fmt: skip
    return rules


def _copy(source: str, target: str) -> dict:
    return {"source_labels": [source], "target_label": target}


RUNNING_ONLY = {
    "action": "drop",
    "source_labels": ["__meta_kubernetes_pod_phase"],
    "regex": "(Failed|Succeeded)",
}


def _endpoint_settings(kind: str, name: str, ep: dict) -> dict:
    """The scrape settings an endpoint sets itself: interval, timeout, path, params, scheme."""
    bad = [k for k in UNSUPPORTED if ep.get(k)]
    if bad:
        raise MonitorError(f"{kind} {name}: {', '.join(bad)} not supported by this translation")
    out: dict = {}
    for src, dst in (
        ("interval", "scrape_interval"), ("scrapeTimeout", "scrape_timeout"),
        ("path", "metrics_path"), ("params", "params"), ("scheme", "scheme"),
        ("followRedirects", "follow_redirects"), ("enableHttp2", "enable_http2"),
    ):  # fmt: skip
        if ep.get(src) not in (None, ""):
            out[dst] = ep[src]
    return out


def namespaces_of(monitor: dict) -> list[str] | None:
    """The namespaces a monitor looks in (its namespaceSelector); None: every namespace."""
    nsel = monitor["spec"].get("namespaceSelector") or {}
    if nsel.get("any"):
        return None
    return nsel.get("matchNames") or [monitor["metadata"]["namespace"]]


def _head(job: str, ep: dict) -> dict:
    out = {"job_name": job, "honor_labels": bool(ep.get("honorLabels", False))}
    if ep.get("honorTimestamps") is not None:
        out["honor_timestamps"] = ep["honorTimestamps"]
    return out


def _tail(cfg: dict, spec: dict, ep: dict) -> dict:
    for src, dst in (
        ("sampleLimit", "sample_limit"), ("targetLimit", "target_limit"),
        ("labelLimit", "label_limit"), ("labelNameLengthLimit", "label_name_length_limit"),
        ("labelValueLengthLimit", "label_value_length_limit"),
    ):  # fmt: skip
        if spec.get(src):
            cfg[dst] = spec[src]
    metric = [relabel(r) for r in ep.get("metricRelabelings") or []]
    if metric:
        cfg["metric_relabel_configs"] = metric
    return cfg


def service_monitor_jobs(monitor: dict, sd) -> list[dict]:
    """The scrape jobs prometheus-operator generates for a ServiceMonitor (one per
    endpoint, `serviceMonitor/<ns>/<name>/<i>`, role endpoints). `sd(job, role, namespaces)`
    gives the job's service discovery (KubernetesSD or FileSD)."""
    spec, meta = monitor["spec"], monitor["metadata"]
    name = f"{meta['namespace']}/{meta['name']}"
    if spec.get("selectorMechanism") not in (None, "RelabelConfig"):
        raise MonitorError(f"ServiceMonitor {name}: selectorMechanism {spec['selectorMechanism']}")
    jobs = []
    for i, ep in enumerate(spec.get("endpoints") or []):
        cfg = _head(f"serviceMonitor/{name}/{i}", ep)
        cfg.update(sd(cfg["job_name"], "endpoints", namespaces_of(monitor)))
        cfg.update(_endpoint_settings("ServiceMonitor", name, ep))
        rules = [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
        rules += selector_relabelings(spec.get("selector") or {}, "service")
        if ep.get("port"):
            rules.append({"action": "keep",
                          "source_labels": ["__meta_kubernetes_endpoint_port_name"],
                          "regex": ep["port"]})  # fmt: skip
        elif ep.get("targetPort") not in (None, ""):
            by = "name" if isinstance(ep["targetPort"], str) else "number"
            rules.append({"action": "keep",
                          "source_labels": [f"__meta_kubernetes_pod_container_port_{by}"],
                          "regex": str(ep["targetPort"])})  # fmt: skip
        kind_name = ["__meta_kubernetes_endpoint_address_target_kind",
                     "__meta_kubernetes_endpoint_address_target_name"]  # fmt: skip
        rules += [
            {"source_labels": kind_name, "separator": ";", "regex": "Node;(.*)",
             "replacement": "${1}", "target_label": "node"},
            {"source_labels": kind_name, "separator": ";", "regex": "Pod;(.*)",
             "replacement": "${1}", "target_label": "pod"},
            _copy("__meta_kubernetes_namespace", "namespace"),
            _copy("__meta_kubernetes_service_name", "service"),
            _copy("__meta_kubernetes_pod_name", "pod"),
            _copy("__meta_kubernetes_pod_container_name", "container"),
        ]  # fmt: skip
        if ep.get("filterRunning", True):
            rules.append(RUNNING_ONLY)
        rules += _label_copies("service", spec.get("targetLabels"))
        rules += _label_copies("pod", spec.get("podTargetLabels"))
        rules.append({"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job",
                      "replacement": "${1}"})  # fmt: skip
        jobs.append(_finish(cfg, rules, spec, ep, "service"))
    return jobs


def _label_copies(meta_kind: str, labels: list[str] | None) -> list[dict]:
    """targetLabels / podTargetLabels: each label of the service or pod copied when set."""
    return [
        {
            "source_labels": [f"__meta_kubernetes_{meta_kind}_label_{sanitize(label)}"],
            "target_label": sanitize(label), "regex": "(.+)", "replacement": "${1}",
        }
        for label in labels or []
    ]  # fmt: skip


def _finish(cfg: dict, rules: list[dict], spec: dict, ep: dict, meta_kind: str) -> dict:
    """The rules both monitor kinds end with (jobLabel, the endpoint label, the endpoint's
    own relabelings), then the job's tail."""
    if spec.get("jobLabel"):
        rules.append({
            "source_labels": [f"__meta_kubernetes_{meta_kind}_label_{sanitize(spec['jobLabel'])}"],
            "target_label": "job", "regex": "(.+)", "replacement": "${1}",
        })  # fmt: skip
    port = ep.get("port") or (str(ep["targetPort"]) if ep.get("targetPort") else "")
    if port:
        rules.append({"target_label": "endpoint", "replacement": port})
    rules += [relabel(r) for r in ep.get("relabelings") or []]
    cfg["relabel_configs"] = rules
    return _tail(cfg, spec, ep)


def pod_monitor_jobs(monitor: dict, sd) -> list[dict]:
    """The scrape jobs prometheus-operator generates for a PodMonitor (one per
    podMetricsEndpoint, `podMonitor/<ns>/<name>/<i>`, role pod)."""
    spec, meta = monitor["spec"], monitor["metadata"]
    name = f"{meta['namespace']}/{meta['name']}"
    if spec.get("selectorMechanism") not in (None, "RelabelConfig"):
        raise MonitorError(f"PodMonitor {name}: selectorMechanism {spec['selectorMechanism']}")
    jobs = []
    for i, ep in enumerate(spec.get("podMetricsEndpoints") or []):
        cfg = _head(f"podMonitor/{name}/{i}", ep)
        cfg.update(sd(cfg["job_name"], "pod", namespaces_of(monitor)))
        cfg.update(_endpoint_settings("PodMonitor", name, ep))
        rules = [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
        if ep.get("filterRunning", True):
            rules.append(RUNNING_ONLY)
        rules += selector_relabelings(spec.get("selector") or {}, "pod")
        if ep.get("port"):
            rules.append({"action": "keep",
                          "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                          "regex": ep["port"]})  # fmt: skip
        elif ep.get("portNumber"):
            rules.append({"action": "keep",
                          "source_labels": ["__meta_kubernetes_pod_container_port_number"],
                          "regex": str(ep["portNumber"])})  # fmt: skip
        elif ep.get("targetPort") not in (None, ""):
            by = "name" if isinstance(ep["targetPort"], str) else "number"
            rules.append({"action": "keep",
                          "source_labels": [f"__meta_kubernetes_pod_container_port_{by}"],
                          "regex": str(ep["targetPort"])})  # fmt: skip
        rules += [
            _copy("__meta_kubernetes_namespace", "namespace"),
            _copy("__meta_kubernetes_pod_container_name", "container"),
            _copy("__meta_kubernetes_pod_name", "pod"),
        ]  # fmt: skip
        rules += _label_copies("pod", spec.get("podTargetLabels"))
        rules.append({"target_label": "job", "replacement": name})
        jobs.append(_finish(cfg, rules, spec, ep, "pod"))
    return jobs


def config(
    service_monitors: list[dict],
    pod_monitors: list[dict],
    rule_files: list[Path],
    sd,
    scrape_interval: str = "15s",
    evaluation_interval: str = "15s",
) -> dict:
    """prometheus.yml for these monitors and rule files (`sd`: KubernetesSD or FileSD)."""
    jobs = [j for m in service_monitors for j in service_monitor_jobs(m, sd)]
    jobs += [j for m in pod_monitors for j in pod_monitor_jobs(m, sd)]
    return {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": jobs,
    }


# --- service discovery -----------------------------------------------------------------------


@dataclass
class KubernetesSD:
    """Prometheus' own Kubernetes SD through the kubeconfig (a Prometheus built with it)."""

    kubeconfig: Path

    def __call__(self, job: str, role: str, namespaces: list[str] | None) -> dict:
        sd: dict = {"role": role, "kubeconfig_file": str(self.kubeconfig)}
        if namespaces is not None:
            sd["namespaces"] = {"names": namespaces}
        return {"kubernetes_sd_configs": [sd]}


def _object_labels(kind: str, meta: dict) -> dict[str, str]:
    out = {}
    for what, values in (("label", meta.get("labels")), ("annotation", meta.get("annotations"))):
        for key, value in (values or {}).items():
            out[f"__meta_kubernetes_{kind}_{what}_{sanitize(key)}"] = value
            out[f"__meta_kubernetes_{kind}_{what}present_{sanitize(key)}"] = "true"
    return out


def _ready(pod: dict) -> str:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status", "unknown").lower()
    return "unknown"


def pod_labels(pod: dict) -> dict[str, str]:
    """The pod's meta labels (Prometheus' kubernetes SD, discovery/kubernetes/pod.go)."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    out = {
        "__meta_kubernetes_namespace": meta["namespace"],
        "__meta_kubernetes_pod_name": meta["name"],
        "__meta_kubernetes_pod_ip": status.get("podIP", ""),
        "__meta_kubernetes_pod_ready": _ready(pod),
        "__meta_kubernetes_pod_phase": status.get("phase", ""),
        "__meta_kubernetes_pod_node_name": spec.get("nodeName", ""),
        "__meta_kubernetes_pod_host_ip": status.get("hostIP", ""),
        "__meta_kubernetes_pod_uid": meta.get("uid", ""),
        **_object_labels("pod", meta),
    }
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            out["__meta_kubernetes_pod_controller_kind"] = ref["kind"]
            out["__meta_kubernetes_pod_controller_name"] = ref["name"]
    return out


def container_labels(container: dict, port: dict | None, init: bool = False) -> dict[str, str]:
    out = {
        "__meta_kubernetes_pod_container_name": container["name"],
        "__meta_kubernetes_pod_container_image": container.get("image", ""),
        "__meta_kubernetes_pod_container_init": str(init).lower(),
    }
    if port is not None:
        out["__meta_kubernetes_pod_container_port_name"] = port.get("name", "")
        out["__meta_kubernetes_pod_container_port_number"] = str(port["containerPort"])
        out["__meta_kubernetes_pod_container_port_protocol"] = port.get("protocol", "TCP")
    return out


def pod_targets(pod: dict) -> list[dict]:
    """Role pod: one target per container port (a container without ports: one without a
    port), at the pod's IP; a pod without an IP has none."""
    ip = (pod.get("status") or {}).get("podIP")
    if not ip:
        return []
    base = pod_labels(pod)
    groups = []
    spec = pod.get("spec") or {}
    for init, containers in ((False, spec.get("containers")), (True, spec.get("initContainers"))):
        for c in containers or []:
            for port in c.get("ports") or [None]:
                address = ip if port is None else f"{ip}:{port['containerPort']}"
                labels = {**base, **container_labels(c, port, init)}
                groups.append({"targets": [address], "labels": labels})
    return groups


def endpoints_targets(ep: dict, services: dict, pods: dict) -> list[dict]:
    """Role endpoints: one target per address and port of an Endpoints object, ready or not,
    with the Endpoints', its Service's and (a Pod address) its pod's and container's labels
    (discovery/kubernetes/endpoints.go)."""
    meta = ep["metadata"]
    ns = meta["namespace"]
    base = {
        "__meta_kubernetes_namespace": ns,
        "__meta_kubernetes_endpoints_name": meta["name"],
        **_object_labels("endpoints", meta),
    }
    svc = services.get((ns, meta["name"]))
    if svc is not None:
        base["__meta_kubernetes_service_name"] = svc["metadata"]["name"]
        base.update(_object_labels("service", svc["metadata"]))
    groups = []
    for subset in ep.get("subsets") or []:
        for ready, addresses in (("true", subset.get("addresses")),
                                 ("false", subset.get("notReadyAddresses"))):  # fmt: skip
            for addr in addresses or []:
                for port in subset.get("ports") or []:
                    labels = {
                        **base,
                        "__meta_kubernetes_endpoint_port_name": port.get("name", ""),
                        "__meta_kubernetes_endpoint_port_protocol": port.get("protocol", "TCP"),
                        "__meta_kubernetes_endpoint_ready": ready,
                    }
                    if addr.get("hostname"):
                        labels["__meta_kubernetes_endpoint_hostname"] = addr["hostname"]
                    if addr.get("nodeName"):
                        labels["__meta_kubernetes_endpoint_node_name"] = addr["nodeName"]
                    ref = addr.get("targetRef") or {}
                    if ref:
                        labels["__meta_kubernetes_endpoint_address_target_kind"] = ref["kind"]
                        labels["__meta_kubernetes_endpoint_address_target_name"] = ref["name"]
                    pod = pods.get((ns, ref.get("name"))) if ref.get("kind") == "Pod" else None
                    if pod is not None:
                        labels.update(pod_labels(pod))
                        for c in (pod.get("spec") or {}).get("containers") or []:
                            match = [p for p in c.get("ports") or []
                                     if p["containerPort"] == port["port"]]  # fmt: skip
                            if match:
                                labels.update(container_labels(c, match[0]))
                                break
                    groups.append({"targets": [f"{addr['ip']}:{port['port']}"], "labels": labels})
    return groups


@dataclass
class FileSD:
    """Kubernetes discovery done here (module docstring): each job reads a file_sd file that
    `write()` fills with the targets Prometheus' kubernetes SD would give it."""

    kubeconfig: Path
    directory: Path
    refresh_interval: str = "5s"  # Prometheus' re-read besides its file watch
    jobs: dict = field(default_factory=dict)  # file -> (role, namespaces)

    def __call__(self, job: str, role: str, namespaces: list[str] | None) -> dict:
        path = self.directory / f"{sanitize(job)}.json"
        self.jobs[path] = (role, namespaces)
        return {
            "file_sd_configs": [{"files": [str(path)], "refresh_interval": self.refresh_interval}]
        }

    def write(self) -> int:
        """List the objects, write every job's targets (atomically, only when they changed);
        returns how many targets were written."""
        import json

        from kubernetes import client, config

        api = config.new_client_from_config(config_file=str(self.kubeconfig))
        core = client.CoreV1Api(api)
        cache: dict = {}

        def listed(kind: str, ns: str | None) -> list[dict]:
            if (kind, ns) not in cache:
                call = getattr(core, f"list_namespaced_{kind}" if ns else
                               f"list_{kind}_for_all_namespaces")  # fmt: skip
                resp = call(ns, _preload_content=False) if ns else call(_preload_content=False)
                cache[kind, ns] = json.loads(resp.data)["items"]
            return cache[kind, ns]

        total = 0
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for path, (role, namespaces) in self.jobs.items():
                groups: list[dict] = []
                for ns in namespaces if namespaces is not None else [None]:
                    pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p
                            for p in listed("pod", ns)}  # fmt: skip
                    if role == "pod":
                        for pod in pods.values():
                            groups += pod_targets(pod)
                        continue
                    services = {(s["metadata"]["namespace"], s["metadata"]["name"]): s
                                for s in listed("service", ns)}  # fmt: skip
                    for ep in listed("endpoints", ns):
                        groups += endpoints_targets(ep, services, pods)
                total += len(groups)
                text = json.dumps(groups, indent=1, sort_keys=True)
                if not path.exists() or path.read_text() != text:
                    tmp = path.with_suffix(".tmp")
                    tmp.write_text(text)
                    tmp.replace(path)
        finally:
            api.close()
        return total


# --- reading the release's objects -----------------------------------------------------------


def read_objects(kubeconfig: Path, namespace: str, release: str) -> dict[str, list[dict]]:
    """The release's ServiceMonitors, PodMonitors and PrometheusRules (by its instance label),
    as the API server serves them. A cluster without the CRDs has none."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        custom = client.CustomObjectsApi(api)
        found: dict[str, list[dict]] = {}
        for plural in ("servicemonitors", "podmonitors", "prometheusrules"):
            try:
                items = custom.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, label_selector=f"{RELEASE_LABEL}={release}"
                )["items"]
            except ApiException as exc:
                if exc.status != 404:
                    raise
                items = []
            found[plural] = sorted(items, key=lambda o: o["metadata"]["name"])
        return found
    finally:
        api.close()


# --- the prometheus process ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Prometheus:
    """`prometheus` scraping the release `release` in `namespace` (module docstring).
    `with Prometheus(...) as prom:` starts it and waits until it is ready; leaving stops it.
    `sd`: "file" (discovery here, every `sd_interval` seconds) or "kubernetes"."""

    kubeconfig: Path
    namespace: str
    release: str
    dir: Path | None = None  # config, rules, TSDB and log; None: a temporary folder
    port: int = 0  # 0: a free one
    scrape_interval: str = "15s"  # for endpoints without their own interval
    evaluation_interval: str = "15s"
    sd: str = "file"
    sd_interval: float = 2.0
    binary: str = field(default_factory=lambda: shutil.which("prometheus") or "prometheus")
    objects: dict = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    discovered: int = 0  # targets the last discovery wrote (sd "file")
    _file_sd: FileSD | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _tmp: tempfile.TemporaryDirectory | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config_file(self) -> Path:
        return self.dir / "prometheus.yml"

    @property
    def log(self) -> Path:
        return self.dir / "prometheus.log"

    def write_config(self) -> dict:
        """Read the monitors and rules from the cluster again and write the files."""
        self.objects = read_objects(self.kubeconfig, self.namespace, self.release)
        rules_dir = self.dir / "rules"
        shutil.rmtree(rules_dir, ignore_errors=True)
        rules_dir.mkdir(parents=True)
        files = []
        for rule in self.objects["prometheusrules"]:
            meta = rule["metadata"]
            path = rules_dir / f"{meta['namespace']}-{meta['name']}.yaml"
            path.write_text(yaml.safe_dump({"groups": rule["spec"].get("groups") or []}))
            files.append(path)
        kubeconfig = self.kubeconfig.resolve()
        if self.sd == "kubernetes":
            sd = KubernetesSD(kubeconfig)
        else:
            sd = FileSD(kubeconfig, self.dir / "sd")
        cfg = config(
            self.objects["servicemonitors"], self.objects["podmonitors"], files, sd,
            self.scrape_interval, self.evaluation_interval,
        )  # fmt: skip
        if isinstance(sd, FileSD):
            self.discovered = sd.write()
            self._file_sd = sd
        self.config_file.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return cfg

    def _discover(self) -> None:
        """Sd "file": keep the targets current until stop()."""
        while not self._stop.wait(self.sd_interval):
            try:
                if self._file_sd is not None:
                    self.discovered = self._file_sd.write()
            except Exception as exc:  # noqa: BLE001 - an API server hiccup: next round
                with self.log.open("a") as out:
                    out.write(f"prometheus.py: discovery failed: {type(exc).__name__}: {exc}\n")

    def start(self, timeout: float = 60) -> Prometheus:
        if self.dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="elasticctr-prometheus-")
            self.dir = Path(self._tmp.name)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.write_config()
        # (file SD only: a promtool without Kubernetes SD, Debian's, refuses the other)
        check = subprocess.run(
            ["promtool", "check", "config", str(self.config_file)], capture_output=True, text=True
        ) if self.sd == "file" and shutil.which("promtool") else None  # fmt: skip
        if check is not None and check.returncode != 0:
            raise MonitorError(f"promtool check config failed:\n{check.stdout}{check.stderr}")
        argv = [
            self.binary,
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={self.dir / 'data'}",
            "--storage.tsdb.retention.time=1d",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",  # POST /-/reload after refresh()
            "--log.level=info",
        ]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=self.dir,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}:\n{self.tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"prometheus not ready in {timeout:.0f} s:\n{self.tail()}")
            time.sleep(0.2)
        if self.sd == "file":
            self._stop.clear()
            self._thread = threading.Thread(target=self._discover, daemon=True)
            self._thread.start()
        return self

    def _ready(self) -> bool:
        import httpx

        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 10) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def refresh(self) -> dict:
        """Read the monitors and rules again (after an upgrade) and reload Prometheus."""
        import httpx

        cfg = self.write_config()
        httpx.post(f"{self.url}/-/reload", timeout=30).raise_for_status()
        return cfg

    # --- the HTTP API
    def api(self, path: str, **params) -> dict | list:
        import httpx

        resp = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=30)
        body = resp.json()
        if resp.status_code != 200 or body.get("status") != "success":
            raise RuntimeError(f"GET /api/v1/{path} {params}: {resp.status_code} {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """An instant query: [{"metric": {...}, "value": [ts, "v"]}, ...]."""
        return self.api("query", query=expr)["result"]

    def targets(self) -> list[dict]:
        """The active targets (labels, health, lastError, scrapePool)."""
        return self.api("targets", state="active")["activeTargets"]

    def alert_rule(self, name: str) -> dict | None:
        """The loaded alerting rule `name` with its state (inactive, pending, firing), its
        query and its alerts, from /api/v1/rules."""
        for group in self.api("rules", type="alert")["groups"]:
            for rule in group["rules"]:
                if rule["name"] == name:
                    return rule
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", type=Path, default=os.environ.get("KUBECONFIG"),
                        required=not os.environ.get("KUBECONFIG"))  # fmt: skip
    parser.add_argument("-n", "--namespace", required=True)
    parser.add_argument("-R", "--release", required=True)
    parser.add_argument("--port", type=int, default=9090, help="on 127.0.0.1; 0: a free one")
    parser.add_argument("--dir", type=Path, help="config, rules and TSDB (default: a tmp dir)")
    parser.add_argument("--scrape-interval", default="15s",
                        help="for monitors that set none")  # fmt: skip
    parser.add_argument("--evaluation-interval", default="15s")
    parser.add_argument("--sd", choices=("file", "kubernetes"), default="file",
                        help="file: discovery by this script (Debian's prometheus has no "
                        "Kubernetes SD); kubernetes: the binary's own")  # fmt: skip
    parser.add_argument("--print-config", action="store_true",
                        help="print prometheus.yml and exit")  # fmt: skip
    args = parser.parse_args(argv)
    prom = Prometheus(
        args.kubeconfig, args.namespace, args.release, dir=args.dir, port=args.port,
        scrape_interval=args.scrape_interval, evaluation_interval=args.evaluation_interval,
        sd=args.sd,
    )  # fmt: skip
    if args.print_config:
        with tempfile.TemporaryDirectory() as tmp:
            prom.dir = Path(tmp)
            prom.write_config()
            sys.stdout.write(prom.config_file.read_text())
        return 0
    with prom:
        o = prom.objects
        print(
            f"prometheus {prom.url} (config {prom.config_file}): "
            f"{len(o['servicemonitors'])} ServiceMonitors, {len(o['podmonitors'])} PodMonitors, "
            f"{len(o['prometheusrules'])} PrometheusRules of release {args.release} in "
            f"{args.namespace}; Ctrl-C stops it",
            flush=True,
        )
        try:
            while prom.proc.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
