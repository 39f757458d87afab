"""Conventions of well-liked charts (issue 27), through the real helm: the chart as a
subchart of a user's umbrella with the parent's own globals; the pod settings every
workload has (annotations, labels, env, envFrom, volumes, topology spread, service account,
image digest), found from the render so that no workload is left out; their schemas alike
in every chart; wrong values refused by helm and by ectl validate, naming the field."""

from __future__ import annotations

import json
import re
import shutil
import sys

import pytest
import yaml
from chart_helpers import CHART, KUBE_VERSIONS, REPO, run

from elasticctr import values as chart_values

pytestmark = pytest.mark.chart


@pytest.fixture(scope="module")
def parent_chart(tmp_path_factory):
    """A user's umbrella with this chart unpacked as its dependency and globals of its own
    (bitnami-style keys this chart does not know)."""
    parent = tmp_path_factory.mktemp("parent") / "platform"
    shutil.copytree(CHART, parent / "charts" / "elasticctr")
    chart = {
        "apiVersion": "v2",
        "name": "platform",
        "version": "1.0.0",
        "dependencies": [{"name": "elasticctr", "version": "0.1.0"}],
    }
    (parent / "Chart.yaml").write_text(yaml.safe_dump(chart))
    parent_values = {"global": {"storageClass": "fast", "imagePullSecrets": ["regcred"]}}
    (parent / "values.yaml").write_text(yaml.safe_dump(parent_values))
    return parent


def _template(helm, chart, *args):
    args = args if "--kube-version" in args else (*args, "--kube-version", "1.34")
    return run([helm, "template", "ctr", str(chart), "--namespace", "ml", *args])


def test_chart_renders_as_a_subchart_with_the_parents_globals(helm, parent_chart):
    rendered = _template(helm, parent_chart)
    assert rendered.returncode == 0, rendered.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(rendered.stdout) if d}
    assert {"Job", "StatefulSet", "Deployment", "Pod"} <= kinds
    lint = run([helm, "lint", "--strict", "--kube-version", "1.34", str(parent_chart)])
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_typos_in_our_own_globals_still_fail_as_a_subchart(helm, parent_chart):
    rendered = _template(
        helm,
        parent_chart,
        "--set",
        "global.image.tagg=1",
        "--set",
        "global.data.slotz={1}",
    )
    assert rendered.returncode != 0
    assert "at '/global/image': additional properties 'tagg' not allowed" in rendered.stderr
    assert "at '/global/data': additional properties 'slotz' not allowed" in rendered.stderr


# Every workload's own values key (the umbrella's test pod: `tests`).
PARTS = ("trainer", "fileserver", "mlflow", "cube", "serving", "console", "tests")
DIGEST = "sha256:" + "ab" * 32


def _every_setting(part: str) -> dict:
    values = {
        "podAnnotations": {"team.io/owner": "ads"},
        "podLabels": {"team": "ads"},
        "extraEnv": [
            {"name": "TZ", "value": "UTC"},
            {"name": "PROXY_TOKEN", "valueFrom": {"secretKeyRef": {"name": "proxy", "key": "t"}}},
        ],
        "extraEnvFrom": [{"secretRef": {"name": "proxy-env"}}],
        "extraVolumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca"}}],
        "extraVolumeMounts": [{"name": "corp-ca", "mountPath": "/etc/corp-ca", "readOnly": True}],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
            }
        ],
        "serviceAccount": {"name": f"sa-{part}"},
    }
    if part != "tests":
        values["image"] = {"digest": DIGEST}
    if part == "cube":
        values["transfer"] = {"serviceAccount": {"name": "sa-cube-transfer"}}
    return values


EVERY_SETTING = {part: _every_setting(part) for part in PARTS}


def _pods(doc: dict) -> list[tuple[str, dict]]:
    """(name, pod template) of every pod a document runs."""
    spec = doc.get("spec") or {}
    name = doc["metadata"]["name"]
    if doc["kind"] == "Job" and "tasks" in spec:  # Volcano Job
        return [(f"{name}/{t['name']}", t["template"]) for t in spec["tasks"]]
    if doc["kind"] == "Pod":
        return [(name, {"metadata": doc["metadata"], "spec": spec})]
    return [(name, spec["template"])] if "template" in spec else []


@pytest.fixture(scope="module")
def every_setting_render(helm, tmp_path_factory):
    values = tmp_path_factory.mktemp("conventions") / "every-setting.yaml"
    values.write_text(yaml.safe_dump(EVERY_SETTING))
    rendered = _template(helm, CHART, "-f", str(values))
    assert rendered.returncode == 0, rendered.stderr
    return values, [d for d in yaml.safe_load_all(rendered.stdout) if d]


def test_every_workload_takes_every_pod_setting(every_setting_render):
    """Found from the render, so a workload added later cannot be forgotten: every pod of
    every Deployment, StatefulSet, Volcano Job task and hook carries each setting."""
    _, docs = every_setting_render
    pods = [p for d in docs for p in _pods(d)]
    names = {name.split("/")[0] for name, _ in pods}
    assert len(pods) == 10, names  # 3 job tasks, 5 Deployments, 1 StatefulSet, the test pod
    accounts = {}
    for name, pod in pods:
        meta, spec = pod["metadata"], pod["spec"]
        assert meta["annotations"]["team.io/owner"] == "ads", name
        assert meta["labels"]["team"] == "ads", name
        main = spec["containers"][0]
        env = {e["name"]: e for e in main["env"]}
        assert env["TZ"] == {"name": "TZ", "value": "UTC"}, name
        assert "valueFrom" in env["PROXY_TOKEN"], name
        assert main["envFrom"] == [{"secretRef": {"name": "proxy-env"}}], name
        assert {"name": "corp-ca", "configMap": {"name": "corp-ca"}} in spec["volumes"], name
        mounts = [m for m in main["volumeMounts"] if m["name"] == "corp-ca"]
        assert mounts == [{"name": "corp-ca", "mountPath": "/etc/corp-ca", "readOnly": True}], name
        (spread,) = spec["topologySpreadConstraints"]
        selector = spread["labelSelector"]["matchLabels"]
        assert selector.items() <= meta["labels"].items(), name  # the workload's own pods
        assert {"app.kubernetes.io/name", "app.kubernetes.io/instance"} <= set(selector), name
        assert main["image"].endswith(f"@{DIGEST}"), name
        accounts[name] = spec["serviceAccountName"]
    assert set(accounts.values()) == {
        "sa-trainer",
        "sa-fileserver",
        "sa-mlflow",
        "sa-cube",
        "sa-cube-transfer",
        "sa-serving",
        "sa-console",
        "sa-tests",
    }, accounts
    created = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    assert created == set(accounts.values()) - {"sa-tests"}  # the chart creates no test account


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_every_pod_setting_passes_kubeconform_strict(
    every_setting_render, kubeconform, kube_schema_locations, kube_version, helm, tmp_path
):
    values, _ = every_setting_render
    rendered = _template(helm, CHART, "-f", str(values), "--kube-version", kube_version)
    assert rendered.returncode == 0, rendered.stderr
    out = tmp_path / "rendered.yaml"
    out.write_text(rendered.stdout)
    result = run(
        [kubeconform, "-strict", "-summary", *kube_schema_locations[kube_version], str(out)]
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_chart_describes_the_pod_settings_alike():
    """Helm checks each subchart against its own schema, so each one carries these keys:
    the same shape everywhere (descriptions name the part's own pods)."""

    def shape(node):
        if isinstance(node, dict):
            return {k: shape(v) for k, v in node.items() if k != "description"}
        if isinstance(node, list):
            return [shape(v) for v in node]
        return node

    keys = (
        "podAnnotations",
        "podLabels",
        "extraEnv",
        "extraEnvFrom",
        "extraVolumes",
        "extraVolumeMounts",
        "topologySpreadConstraints",
    )
    umbrella = json.loads((CHART / "values.schema.json").read_text())
    found = {"tests": umbrella["properties"]["tests"]}
    for schema_file in sorted(CHART.glob("charts/*/values.schema.json")):
        found[schema_file.parent.name] = json.loads(schema_file.read_text())
    assert set(found) == set(PARTS)
    reference = found["serving"]["properties"]
    for part, schema in found.items():
        props = schema["properties"]
        assert {*keys, "serviceAccount"} <= set(schema["required"]), part
        for key in keys:
            assert shape(props[key]) == shape(reference[key]), (part, key)
        account = props["serviceAccount"]["properties"]["name"]
        assert shape(account) == shape(reference["serviceAccount"]["properties"]["name"]), part
        if part != "tests":
            digest = props["image"]["properties"]["digest"]
            assert shape(digest) == shape(reference["image"]["properties"]["digest"]), part
            assert "digest" in props["image"]["required"], part


# One wrong value of each new key: (values, what helm prints, the problem ectl validate
# reports first). Each names the field.
BAD = [
    ({"trainer": {"extraEnv": {"GLOG_v": "1"}}}, "at '/extraEnv': got object, want array",
     "trainer.extraEnv: a list of Kubernetes EnvVar objects now"),
    ({"serving": {"extraEnv": [{"name": "A", "value": 1}]}},
     "at '/extraEnv/0/value': got number, want string",
     "serving.extraEnv[0].value: 1 is not of type 'string'"),
    ({"mlflow": {"extraEnv": [{"name": "A", "value": "1", "valueFrom": {}}]}},
     "at '/extraEnv/0': 'not' failed", "mlflow.extraEnv[0]: set one of value or valueFrom"),
    ({"fileserver": {"extraEnvFrom": [{"secretReff": {"name": "x"}}]}},
     "at '/extraEnvFrom/0': additional properties 'secretReff' not allowed",
     "fileserver.extraEnvFrom[0].secretReff: unknown key"),
    ({"mlflow": {"extraVolumes": [{"configMap": {"name": "x"}}]}},
     "at '/extraVolumes/0': missing property 'name'", "mlflow.extraVolumes[0].name: required"),
    ({"cube": {"extraVolumeMounts": [{"name": "ca"}]}},
     "at '/extraVolumeMounts/0': missing property 'mountPath'",
     "cube.extraVolumeMounts[0].mountPath: required"),
    ({"serving": {"topologySpreadConstraints": [
        {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]}},
     "at '/topologySpreadConstraints/0/maxSkew': minimum: got 0, want 1",
     "serving.topologySpreadConstraints[0].maxSkew: 0 is less than the minimum of 1"),
    ({"cube": {"podAnnotations": {"a": 1}}}, "at '/podAnnotations/a': got number, want string",
     "cube.podAnnotations.a: 1 is not of type 'string'"),
    ({"fileserver": {"podLabels": {"team": "a b"}}}, "at '/podLabels/team': 'a b' does not match",
     "fileserver.podLabels.team: 'a b' does not match"),
    ({"trainer": {"podLabels": {"app.kubernetes.io/component": "x"}}},
     "at '/podLabels/app.kubernetes.io~1component': 'not' failed",
     "trainer.podLabels.app.kubernetes.io/component: not allowed (A label the chart sets"),
    ({"serving": {"serviceAccount": {"name": "Bad_Name"}}}, "at '/serviceAccount/name'",
     "serving.serviceAccount.name: 'Bad_Name' does not match"),
    ({"cube": {"transfer": {"serviceAccount": {"create": "yes"}}}},
     "at '/transfer/serviceAccount/create': got string, want boolean",
     "cube.transfer.serviceAccount.create: 'yes' is not of type 'boolean'"),
    ({"mlflow": {"image": {"digest": "sha256:abc"}}}, "at '/image/digest': 'sha256:abc'",
     "mlflow.image.digest: 'sha256:abc' does not match"),
    ({"tests": {"extraEnv": "A=1"}}, "at '/tests/extraEnv': got string, want array",
     "tests.extraEnv: 'A=1' is not of type 'array'"),
]  # fmt: skip


@pytest.mark.parametrize("user,helm_says,ectl_says", BAD, ids=[b[2].split(":")[0] for b in BAD])
def test_a_wrong_pod_setting_is_refused_naming_the_field(
    helm, tmp_path, user, helm_says, ectl_says
):
    values = tmp_path / "bad.yaml"
    values.write_text(yaml.safe_dump(user))
    rendered = _template(helm, CHART, "-f", str(values))
    assert rendered.returncode != 0
    assert helm_says in rendered.stderr, rendered.stderr
    problems = chart_values.validate(user, CHART)
    assert problems and problems[0].startswith(ectl_says), problems


def test_publish_records_a_values_file_that_pins_every_image_by_digest(helm, tmp_path):
    """publish.sh's digests record -> `meta.py digest-values` (what publish.sh writes as
    elasticctr-<version>.digests-values.yaml) -> every pod pulls its image by digest."""
    meta = REPO / "scripts" / "images" / "meta.py"
    images = ("train", "serving", "cube", "fileserver", "mlflow", "console")
    digests = {i: "sha256:" + f"{n:x}" * 64 for n, i in enumerate(images, start=1)}
    record = {
        "registry": "127.0.0.1:5000",
        "chart": {"reference": "oci://127.0.0.1:5000/charts/elasticctr:0.1.0", "digest": "x"},
        "images": {
            f"127.0.0.1:5000/elasticctr/elasticctr-{i}:0.1.0": d for i, d in digests.items()
        },
    }
    (tmp_path / "digests.json").write_text(json.dumps(record))
    made = run([sys.executable, str(meta), "digest-values", str(tmp_path / "digests.json")])
    assert made.returncode == 0, made.stderr
    values = tmp_path / "digests-values.yaml"
    values.write_text(made.stdout)
    assert chart_values.validate_files([values], CHART) == []
    rendered = _template(helm, CHART, "-f", str(values))
    assert rendered.returncode == 0, rendered.stderr
    pulled = {
        (name, c["image"])
        for d in yaml.safe_load_all(rendered.stdout)
        if d
        for name, pod in _pods(d)
        for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
    }
    assert len(pulled) >= 9
    for name, image in pulled:
        repo, _, digest = image.partition("@")
        part = repo.rsplit("/", 1)[-1].removeprefix("elasticctr-")
        assert digest == digests[part], (name, image)


def test_each_chart_gives_its_own_name_to_the_component_helpers():
    """The library's elasticctr.component.* defines take the component's name (charts/common
    README): every chart's templates give their own chart's name (the umbrella's:
    elasticctr), so a line copied from another part cannot name or label it wrongly."""
    call = re.compile(r'include "elasticctr\.component\.\w+" \(dict "ctx" \S+ "name" "([^"]+)"\)')
    calls = 0
    for chart in [CHART, *sorted(p.parent for p in CHART.glob("charts/*/Chart.yaml"))]:
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        if meta.get("type") == "library":
            continue
        for tpl in sorted((chart / "templates").rglob("*")):
            if not tpl.is_file():
                continue
            text = tpl.read_text()
            names = call.findall(text)
            assert len(names) == text.count('include "elasticctr.component.'), tpl
            assert set(names) <= {meta["name"]}, (tpl, set(names))
            calls += len(names)
    assert calls > 150
