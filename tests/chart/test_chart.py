"""The umbrella chart through the real tools: helm lint --strict, helm template piped to
kubeconform -strict (Kubernetes + Volcano CRD schemas, offline), helm-unittest suites,
negative schema cases, and agreement with elasticctr.values."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from chart_helpers import CHART, KUBE_VERSIONS, REPO, render, run, values_files

from elasticctr import values as chart_values
from elasticctr.values import PLATFORM_PARTS

pytestmark = pytest.mark.chart

FILES = values_files()


@pytest.mark.parametrize("values_file", [None, *FILES], ids=lambda p: p.name if p else "defaults")
def test_helm_lint_strict(helm, values_file):
    args = [helm, "lint", "--strict", "--kube-version", "1.34", str(CHART)]
    if values_file:
        args += ["-f", str(values_file)]
    result = run(args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


@pytest.fixture(scope="session")
def kubeconform_reports(helm, kubeconform, kube_schema_locations, tmp_path_factory):
    """Per Kubernetes version: every values file rendered, then ONE kubeconform run over all
    of them (it compiles each kind's schema once per run; that is where its time goes).
    Returns {version: {values file name: (rendered kinds, kubeconform resource reports)}}."""
    reports = {}
    for version in KUBE_VERSIONS:
        out = tmp_path_factory.mktemp(f"rendered-{version}")
        kinds = {}
        for values_file in FILES:
            rendered = render(helm, "-f", str(values_file), kube_version=version)
            assert rendered.returncode == 0, f"{values_file.name}: {rendered.stderr}"
            target = out / values_file.name
            target.write_text(rendered.stdout)
            kinds[values_file.name] = [d["kind"] for d in yaml.safe_load_all(rendered.stdout) if d]
        result = run(
            [kubeconform, "-strict", "-verbose", "-output", "json"]
            + kube_schema_locations[version]
            + [str(out / name) for name in kinds],
            timeout=600,
        )
        report = json.loads(result.stdout)
        by_file = {name: [] for name in kinds}
        for resource in report["resources"]:
            by_file[Path(resource["filename"]).name].append(resource)
        reports[version] = {name: (kinds[name], by_file[name]) for name in kinds}
    return reports


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values_file", FILES, ids=lambda p: p.name)
def test_template_passes_kubeconform_strict(kubeconform_reports, values_file, kube_version):
    kinds, resources = kubeconform_reports[kube_version][values_file.name]
    problems = [r for r in resources if r["status"] != "statusValid"]
    assert not problems, problems
    assert sorted(r["kind"] for r in resources) == sorted(kinds)
    trains = chart_values.effective_values(chart_values.load_files([values_file]), CHART)
    assert ("Job" in kinds) == trains["trainer"]["enabled"]


def test_kubeconform_rejects_what_the_api_server_would(helm, kubeconform, kube_schema_locations):
    """The schemas are really used: an unknown field in the Volcano Job and a wrong type in a
    Deployment are both reported (a missing schema would be an error too, never a pass)."""
    docs = list(yaml.safe_load_all(render(helm).stdout))
    job = next(d for d in docs if d and d["kind"] == "Job")
    job["spec"]["tasks"][0]["restartPolicyz"] = "Never"
    deployment = next(d for d in docs if d and d["kind"] == "Deployment")
    deployment["spec"]["replicas"] = "two"
    result = run(
        [kubeconform, "-strict", "-summary", *kube_schema_locations["1.34"]],
        input=yaml.safe_dump_all([job, deployment]),
    )
    assert result.returncode == 1
    assert "Invalid: 2" in result.stdout, result.stdout
    assert "restartPolicyz" in result.stdout


def test_helm_unittest_suites(helm):
    suites = sorted((CHART / "tests").glob("*_test.yaml"))
    assert len(suites) >= 5
    result = run([helm, "unittest", str(CHART)])
    assert result.returncode == 0, result.stdout + result.stderr
    match = re.search(r"Tests:\s+(\d+) passed, (\d+) total", result.stdout)
    assert match and match.group(1) == match.group(2), result.stdout
    assert int(match.group(1)) >= 40


# Values the schemas must reject, with a fragment of the message helm prints.
BAD_VALUES = [
    ({"trainer": {"model": {"name": "gbdt"}}}, "value must be one of 'dnn', 'lr', 'wide_deep'"),
    ({"global": {"image": {"tag": "latest"}}}, "at '/global/image/tag': 'not' failed"),
    ({"cube": {"shards": 0}}, "at '/shards': minimum: got 0, want 1"),
    ({"trainer": {"pserver": {"replicas": 0}}}, "at '/pserver/replicas': minimum: got 0, want 1"),
    ({"serving": {"replicss": 2}}, "additional properties 'replicss' not allowed"),
    ({"global": {"data": {"startDateHour": "2020-04-01"}}}, "at '/global/data/startDateHour'"),
    ({"global": {"scenario": {"name": "Coupon_1"}}}, "at '/global/scenario/name'"),
    ({"global": {"data": {"path": "gs://bucket/data"}}}, "at '/global/data/path'"),
    ({"global": {"s3": {"endpoint": "seaweedfs:8333"}}}, "at '/global/s3/endpoint'"),
    ({"global": {"s3": {"pathStyle": "yes"}}}, "at '/global/s3/pathStyle'"),
    ({"mlflow": {"backendStore": {"type": "mysql"}}}, "value must be one of 'sqlite', 'external'"),
    ({"mlflow": {"image": {"tag": "latest"}}}, "at '/image/tag'"),
    ({"global": {"data": {"maxErrorRate": 2}}}, "at '/global/data/maxErrorRate'"),
    ({"global": {"data": {"slots": [1, 1]}}}, "at '/global/data/slots'"),
    ({"serving": {"service": {"type": "External"}}}, "at '/service/type'"),
    ({"trainer": {"trainer": {"resources": {"limits": {"cpu": "lots"}}}}}, "/trainer/resources"),
    ({"trainer": {"staging": {"accessMode": "ReadOnlyMany"}}}, "at '/staging/accessMode'"),
    ({"global": {"data": {"utcOffset": "+8"}}}, "at '/global/data/utcOffset'"),
    ({"global": {"metrics": {"serviceMonitor": {"interval": "30 s"}}}}, "/serviceMonitor/interval"),
    ({"global": {"metrics": {"allowFromNamespaces": {"team": 1}}}}, "/allowFromNamespaces/team"),
    ({"global": {"metrics": {"dashboard": {"lables": {}}}}}, "additional properties 'lables'"),
    ({"global": {"metrics": {"dashboard": {"namespace": "A_b"}}}}, "/dashboard/namespace"),
    ({"cube": {"metrics": {"enabled": "yes"}}}, "at '/metrics/enabled'"),
]


def test_schema_rejects_bad_values(helm, tmp_path):
    """helm collects every schema violation of a render, so one file holding all the bad
    values must make helm template and helm lint print each expected message."""
    combined: dict = {}
    for user, _ in BAD_VALUES:
        combined = chart_values.merge(combined, user)
    values = tmp_path / "bad.yaml"
    values.write_text(yaml.safe_dump(combined))
    rendered = render(helm, "-f", str(values))
    lint = run([helm, "lint", "--strict", "--kube-version", "1.34", str(CHART), "-f", str(values)])
    assert rendered.returncode != 0 and lint.returncode != 0
    for _, message in BAD_VALUES:
        assert message in rendered.stderr, (message, rendered.stderr)
        assert message in lint.stdout + lint.stderr, (message, lint.stdout)


@pytest.mark.parametrize("user,message", BAD_VALUES, ids=[m for _, m in BAD_VALUES])
def test_ectl_validate_rejects_the_same_bad_values(user, message):
    assert chart_values.validate(user, CHART)


SCHEMA_FAILED = "values don't meet the specifications of the schema(s)"


def _pointer_path(chart: str, pointer: str) -> str:
    """Helm's `at '/a/0/b~1c'` of chart `chart` as ectl names the value: `x.a[0].b/c`."""
    path = "" if chart == "elasticctr" else chart
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        path = f"{path}[{part}]" if part.isdigit() else (f"{path}.{part}" if path else part)
    return path or "(root)"


def _helm_schema_paths(stderr: str) -> list[str]:
    """The values a failed schema check of helm names (each once, sorted)."""
    paths, chart = set(), None
    for line in stderr.split(SCHEMA_FAILED, 1)[1].splitlines():
        if re.fullmatch(r"[a-z]+:", line):
            chart = line[:-1]
        elif match := re.match(r"^\s*- at '([^']*)'", line):
            paths.add(_pointer_path(chart, match.group(1)))
    return sorted(paths)


def _helm_problems(helm, user: dict, tmp_path) -> tuple[list[str], list[str]]:
    """What helm reports: (the paths its schema check names, the template's cross-field
    problems). A failed schema check stops helm before the templates: one of the two is
    empty."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(user))
    rendered = render(helm, "-f", str(values))
    if rendered.returncode == 0:
        return [], []
    text = rendered.stderr
    if SCHEMA_FAILED in text:
        return _helm_schema_paths(text), []
    assert "values are invalid:" in text, text
    block = text.split("values are invalid:", 1)[1]
    return [], [line.strip() for line in block.splitlines() if re.match(r"^\s+\S+: ", line)]


def _ectl_problems(user: dict) -> tuple[list[str], list[str]]:
    """ectl validate's problems split like helm's: (the paths of the schema problems,
    sorted; the cross-field problems of elasticctr.validateValues' rules, in order)."""
    problems = chart_values.validate(user, CHART)
    rules = chart_values.cross_field_problems(chart_values.effective_values(user, CHART), CHART)
    schema = sorted({p.split(": ", 1)[0] for p in problems if p not in rules})
    return schema, [p for p in problems if p in rules]


# Each case breaks either only schemas (helm's check stops the render) or only the
# templates' rules, so that every rule is compared with what helm says about it.
AGREEMENT_CASES = [
    {},
    {"trainer": {"trainer": {"replicas": 1, "minReplicas": 3}}},
    {"trainer": {"model": {"name": "lr", "embeddingDim": 4, "crossLayers": 2}}},
    {"fileserver": {"enabled": False}},
    {"global": {"data": {"path": "hdfs:///d", "endDateHour": "20190101/00"}}},
    {"serving": {"autoscaling": {"minReplicas": 4, "maxReplicas": 2}}},
    {"serving": {"ingress": {"enabled": True}}},
    {"mlflow": {"backendStore": {"type": "external"}, "ingress": {"enabled": True}}},
    {"cube": {"enabled": False}},
    {"mlflow": {"enabled": False}},
    {"mlflow": {"enabled": False}, "trainer": {"enabled": False}, "serving": {"enabled": False}},
    {"mlflow": {"enabled": False}, "global": {"mlflow": {"trackingUri": "http://mlflow:5000"}}},
    {"cube": {"shards": 3, "podDisruptionBudget": {"maxUnavailable": 5}}},
    {"cube": {"transfer": {"serviceAccount": {"create": False}}}},
    {"cube": {"transfer": {"scenarios": False, "serviceAccount": {"create": False}}}},
    {
        "fileserver": {"auth": {"token": "0123456789abcdef", "existingSecret": "s"}},
        "trainer": {"fileserverToken": {"existingSecret": "s"}},
    },
    {
        "serving": {
            "autoscaling": {"enabled": False},
            "replicas": 2,
            "podDisruptionBudget": {"minAvailable": 2},
        }
    },
    {"fileserver": {"auth": {"existingSecret": "fs"}}, "trainer": {"model": {"cinLayers": [2]}}},
    {
        "fileserver": {
            "auth": {"existingSecret": "fs", "existingSecretKey": "k", "protectReads": True}
        }
    },
    {
        "fileserver": {"auth": {"protectReads": True}},
        "serving": {"fileserverToken": {"existingSecretKey": "k"}},
    },
    {
        "trainer": {
            "volcano": {
                "priorityClasses": {"create": True, "trainer": "t"},
                "createQueue": {"enabled": True},
            }
        }
    },
    {
        "trainer": {
            "volcano": {
                "priorityClasses": {
                    "create": True,
                    "guaranteed": "g",
                    "trainer": "t",
                    "trainerValue": 10**6,
                }
            }
        }
    },
    {"trainer": {"enabled": False, "volcano": {"priorityClasses": {"create": True}}}},
    {"trainer": {"volcano": {"priorityClasses": {"guaranteed": "same", "trainer": "same"}}}},
    # A scenario release: only its training job, the platform serves it.
    {
        "global": {"scenario": {"name": "coupon", "platform": "ctr"}},
        **{part: {"enabled": False} for part in PLATFORM_PARTS},
    },
    {"global": {"scenario": {"name": "coupon", "platform": "ctr"}}, "trainer": {"enabled": False}},
    {  # no platform: the stores the platform would give must be named for its rules
        "global": {
            "scenario": {"name": "coupon"},
            "data": {"path": "hdfs://nn:8020/d"},
            "modelStore": "hdfs://nn:8020/m",
            "mlflow": {"trackingUri": "http://mlflow:5000"},
        },
        **{part: {"enabled": False} for part in PLATFORM_PARTS},
    },
    {
        "fileserver": {"enabled": False},
        "global": {
            "data": {"path": "s3://ctr/data"},
            "modelStore": "s3://ctr/models",
            "s3": {"endpoint": "http://seaweedfs:8333", "pathStyle": True, "existingSecret": "s3"},
        },
    },
    {"global": {"s3": {"existingSecret": "s3", "accessKeyIdKey": "k", "secretAccessKeyKey": "k"}}},
    # Prometheus as users run it (docs/operations.md): every key (bad ones: BAD_VALUES).
    {
        "global": {
            "data": {"utcOffset": "+08:00"},
            "metrics": {
                "serviceMonitor": {"enabled": True, "interval": "1m", "labels": {"r": "kps"}},
                "allowFromNamespaces": {"kubernetes.io/metadata.name": "monitoring"},
                "allowFromPods": {"app.kubernetes.io/name": "prometheus"},
                "dashboard": {"enabled": True, "namespace": "grafana", "annotations": {"f": "x"}},
                "prometheusRule": {"enabled": True, "labels": {"role": "alert-rules"}},
            },
        },
        **{part: {"metrics": {"enabled": False}} for part in ("cube", "serving", "trainer")},
    },
]


@pytest.mark.parametrize(
    "user", AGREEMENT_CASES, ids=lambda u: yaml.safe_dump(u, default_flow_style=True).strip()
)
def test_helm_and_ectl_validate_report_the_same_problems(helm, user, tmp_path):
    """The same problems: the cross-field rules of the templates line by line; the rules of
    the schemas (and every other schema problem) by the value they name, since helm prints
    its validator's words and ectl the rule's errorMessage."""
    helm_schema, helm_rules = _helm_problems(helm, user, tmp_path)
    ectl_schema, ectl_rules = _ectl_problems(user)
    assert helm_schema == ectl_schema
    if not helm_schema:
        assert helm_rules == ectl_rules
    else:
        assert not ectl_rules, "a case breaking a schema must break no template rule"


@pytest.mark.parametrize("model", sorted(chart_values.model_hyperparameters()))
def test_chart_knows_the_zoo_hyperparameters(helm, model, tmp_path):
    """The chart's copy of the zoo table (templates/_helpers.tpl) matches elasticctr.train:
    set every hyperparameter any model has; both must reject exactly the same keys."""
    every = set().union(*chart_values.model_hyperparameters().values())
    samples = {"hiddenUnits": [4], "cinLayers": [4], "optimizer": "sgd"}
    model_values = {key: samples.get(key, 1) for key in sorted(every)}
    user = {"trainer": {"model": {"name": model, **model_values}}}
    _, helm_says = _helm_problems(helm, user, tmp_path)
    assert helm_says == chart_values.validate(user, CHART)
    rejected = {line.split(":")[0].rsplit(".", 1)[1] for line in helm_says}
    assert rejected == every - chart_values.model_hyperparameters()[model]


def _job(helm, *args: str) -> dict:
    rendered = render(helm, *args)
    assert rendered.returncode == 0, rendered.stderr
    return next(d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "Job")


def test_job_name_changes_with_its_immutable_spec_only(helm):
    """Volcano (v1.12 webhook, validateJobUpdate) accepts in-place updates of the job's
    minAvailable and priorityClassName and of task replicas and minAvailable only; everything
    else must come as a Job with a new name (docs/chart.md, Upgrade strategy)."""
    base = _job(helm)["metadata"]["name"]
    assert re.fullmatch(r"ctr-trainer-[0-9a-f]{8}", base)
    assert _job(helm)["metadata"]["name"] == base  # deterministic
    mutable = [
        ["--set", "trainer.trainer.replicas=6"],
        ["--set", "trainer.trainer.minReplicas=2"],
        ["--set", "trainer.volcano.priorityClassName=high"],
    ]
    for args in mutable:
        assert _job(helm, *args)["metadata"]["name"] == base, args
    immutable = [
        ["--set", "trainer.pserver.replicas=3"],
        ["--set", "trainer.model.name=deepfm"],
        ["--set", "trainer.trainer.resources.limits.memory=8Gi"],
        ["--set", "global.image.tag=0.2.0"],
        ["--set", "global.data.startDateHour=20200501/00"],  # config Secret checksum
        ["--set", "trainer.volcano.queue=other"],
        ["--set", "trainer.volcano.maxRetry=9"],
        ["--set", "trainer.volcano.priorityClasses.trainer=low"],  # the pods' template
    ]
    names = {_job(helm, *args)["metadata"]["name"] for args in immutable}
    assert base not in names and len(names) == len(immutable)


def test_ct_yaml_covers_the_chart():
    ct = yaml.safe_load((REPO / "ct.yaml").read_text())
    assert ct["chart-dirs"] == ["charts"]
    assert (REPO / ct["chart-dirs"][0] / "elasticctr" / "Chart.yaml").is_file()
    assert list((CHART / "ci").glob("*-values.yaml"))


def test_every_schema_property_is_described_and_objects_are_closed():
    """Style rule: draft-07, a description on every property, closed objects with `required`
    (Kubernetes pass-through objects and maps of user-named entries excepted)."""
    import json

    open_ok = {"podSecurityContext", "containerSecurityContext", "affinity", "global"}
    for schema_file in [CHART / "values.schema.json", *CHART.glob("charts/*/values.schema.json")]:
        schema = json.loads(schema_file.read_text())
        assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"

        assert schema["additionalProperties"] is False
        assert schema["required"]
        _walk(schema, "", schema_file.parent, open_ok)


def _walk(node: dict, where: str, chart_dir, open_ok: set[str]) -> None:
    for name, prop in node.get("properties", {}).items():
        path = f"{chart_dir.name}:{where}.{name}"
        assert prop.get("description"), f"{path} has no description"
        if prop.get("type") == "object" and "properties" in prop:
            if name not in open_ok and prop.get("additionalProperties") is not False:
                # The umbrella's subchart sections are checked by each subchart's own schema.
                assert chart_dir == CHART and where == "", f"{path} is open"
                # (the console's switch may stay unset: then serving's decides)
                assert prop.get("required") == ([] if name == "console" else ["enabled"]), path
            elif name not in open_ok:
                assert "required" in prop, f"{path} has no required list"
            _walk(prop, f"{where}.{name}", chart_dir, open_ok)


def _containers(doc: dict) -> list[dict]:
    spec = doc.get("spec") or {}
    if doc["kind"] == "Job" and "tasks" in spec:  # Volcano Job
        return [c for t in spec["tasks"] for c in t["template"]["spec"]["containers"]]
    pod = (spec.get("template") or {}).get("spec") or {}
    return pod.get("containers", [])


def test_every_probe_tolerates_a_busy_node(helm):
    """Kubernetes' default probe timeout (1 s) killed MLflow on the one-node cluster while a
    worker handled an artifact upload: every probe waits 5 s."""
    rendered = render(helm, "-f", str(REPO / "values" / "demo.yaml"))
    assert rendered.returncode == 0, rendered.stderr
    probes = [
        (doc["metadata"]["name"], c["name"], kind, c[kind])
        for doc in yaml.safe_load_all(rendered.stdout)
        if doc
        for c in _containers(doc)
        for kind in ("readinessProbe", "livenessProbe", "startupProbe")
        if kind in c
    ]
    assert len(probes) >= 10, probes
    short = [(n, c, k) for n, c, k, p in probes if p.get("timeoutSeconds", 1) < 5]
    assert not short, short


def test_helm_test_pod_outlives_its_success_for_helm_test_logs(helm):
    """`helm test --logs` reads the test pod's log after it finished: a hook-succeeded
    delete policy removed it first and made helm test fail (found on the one-node cluster)."""
    rendered = render(helm)
    assert rendered.returncode == 0, rendered.stderr
    hooks = [
        d
        for d in yaml.safe_load_all(rendered.stdout)
        if d and (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"
    ]
    assert any(d["kind"] == "Pod" for d in hooks), hooks
    for doc in hooks:
        policy = doc["metadata"]["annotations"].get("helm.sh/hook-delete-policy", "")
        assert "hook-succeeded" not in policy, (doc["kind"], policy)


def _pod_specs(doc: dict) -> list[dict]:
    spec = doc.get("spec") or {}
    if doc["kind"] == "Job" and "tasks" in spec:  # Volcano Job
        return [t["template"]["spec"] for t in spec["tasks"]]
    if doc["kind"] == "Pod":
        return [spec]
    return [spec["template"]["spec"]] if "template" in spec else []


@pytest.mark.parametrize("values_file", FILES, ids=lambda p: p.name)
def test_root_runs_only_to_give_nfs_like_volumes_to_the_pods_user(helm, values_file):
    """docs/chart.md "Security defaults": every container is non-root with all capabilities
    dropped, except the `volume-permissions` init container, root with CHOWN and FOWNER
    only; a values file that puts a shared volume on a named ReadWriteMany class (NFS-like,
    root-owned) turns it on for every pod that writes one ("Shared volumes")."""
    rendered = render(helm, "-f", str(values_file))
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    rwx_classes = [
        d["spec"]["storageClassName"]
        for d in docs
        if d["kind"] == "PersistentVolumeClaim"
        and d["spec"]["accessModes"] == ["ReadWriteMany"]
        and d["spec"].get("storageClassName")
    ]
    writers = {}  # pod spec name -> mounts the init container gives to the pod's user
    for doc in docs:
        for pod in _pod_specs(doc):
            assert pod["securityContext"]["runAsNonRoot"] is True, doc["metadata"]["name"]
            for c in pod.get("containers", []):
                assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}, c["name"]
                assert c["securityContext"].get("runAsUser", 1) != 0, c["name"]
            for c in pod.get("initContainers", []):
                assert c["name"] == "volume-permissions", c["name"]
                assert c["securityContext"]["capabilities"] == {
                    "drop": ["ALL"],
                    "add": ["CHOWN", "FOWNER"],
                }
                assert c["securityContext"]["readOnlyRootFilesystem"] is True
                assert c["securityContext"]["allowPrivilegeEscalation"] is False
                assert [m["mountPath"] for m in c["volumeMounts"]] == c["args"]
                writers[doc["metadata"]["name"]] = c["args"]
    if rwx_classes:
        staging = "/var/lib/elasticctr/staging"
        jobs = [d["metadata"]["name"] for d in docs if d["kind"] == "Job"]
        assert all(writers.get(j) == [staging] for j in jobs), (values_file.name, writers)
        assert writers.get("ctr-cube-transfer") == ["/var/lib/elasticctr/cube-root"], writers
