"""The harness's cluster really runs pods: networking, DNS, the API from pods, storage, Volcano.

Each test creates its own namespace and waits with bounded timeouts; on failure the message
carries node conditions, pod events and component log tails (Harness.diagnostics).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import harness
import pytest
from kubernetes import client
from tests.e2e.conftest import wait_until

POD_START = 90  # seconds for a pod to run on a loaded 2-core machine


@pytest.fixture
def ns(kube_cluster):
    name = f"t-{uuid.uuid4().hex[:8]}"
    api = kube_cluster.api()
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    wait_until(
        "the namespace's default ServiceAccount",
        lambda: core.read_namespaced_service_account("default", name),
        60,
        kube_cluster,
    )
    yield name
    core.delete_namespace(name, grace_period_seconds=0)
    api.close()


def busybox_pod(name: str, script: str, **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": spec.pop("restartPolicy", "Never"),
            "containers": [
                {
                    "name": "main",
                    "image": harness.BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", script],
                    **spec.pop("container", {}),
                }
            ],
            **spec,
        },
    }


def pod_phase(core, name, ns, phases=("Succeeded",)):
    pod = core.read_namespaced_pod(name, ns)
    if pod.status.phase == "Failed" and "Failed" not in phases:
        raise AssertionError(
            f"pod {name} failed: {core.read_namespaced_pod_log(name, ns)}"
        )  # surfaces in wait_until's last error
    return pod.status.phase in phases


def finished_log(kube_cluster, core, name, ns, timeout=POD_START) -> str:
    def done():
        pod = core.read_namespaced_pod(name, ns)
        return pod.status.phase in ("Succeeded", "Failed") and pod

    pod = wait_until(f"pod {name} to finish", done, timeout, kube_cluster, ns)
    out = core.read_namespaced_pod_log(name, ns)
    assert pod.status.phase == "Succeeded", (
        f"pod {name} {pod.status.phase}:\n{out}\n{kube_cluster.diagnostics(ns)}"
    )
    return out


def test_node_ready_with_the_cluster_addons(kube_cluster):
    api = kube_cluster.api()
    try:
        core = client.CoreV1Api(api)
        node = core.read_node(harness.NODE_NAME)
        conds = {c.type: c.status for c in node.status.conditions}
        assert conds["Ready"] == "True", conds
        addresses = {a.type: a.address for a in node.status.addresses}
        assert addresses["InternalIP"] == kube_cluster.info["node_ip"]
        assert node.status.node_info.kubelet_version == "v1.32.13"
        assert node.status.node_info.container_runtime_version.startswith("containerd://1.6")
        dns = core.read_namespaced_service("kube-dns", "kube-system")
        assert dns.spec.cluster_ip == harness.DNS_SERVICE_IP
        classes = client.StorageV1Api(api).list_storage_class().items
        default = [
            c.metadata.name
            for c in classes
            if (c.metadata.annotations or {}).get("storageclass.kubernetes.io/is-default-class")
            == "true"
        ]
        assert default == [harness.STORAGE_CLASS]
        crds = {
            c.metadata.name
            for c in client.ApiextensionsV1Api(api).list_custom_resource_definition().items
        }
        for crd in (
            "jobs.batch.volcano.sh",
            "podgroups.scheduling.volcano.sh",
            "queues.scheduling.volcano.sh",
            "commands.bus.volcano.sh",
            "numatopologies.nodeinfo.volcano.sh",
            "hypernodes.topology.volcano.sh",
            "jobflows.flow.volcano.sh",
            "jobtemplates.flow.volcano.sh",
        ):
            assert crd in crds
        # Volcano's controller-manager creates its queues itself once it runs
        queues = client.CustomObjectsApi(api).list_cluster_custom_object(
            "scheduling.volcano.sh", "v1beta1", "queues"
        )
        assert "default" in {q["metadata"]["name"] for q in queues["items"]}
    finally:
        api.close()
    print(f"\nstart timings: {kube_cluster.timings}")


def test_pods_talk_through_services_dns_and_reach_the_api(kube_cluster, ns):
    """A web pod behind a ClusterIP Service; a client pod resolves it by name through CoreDNS,
    fetches from it, and reaches the API server through the `kubernetes` Service."""
    api = kube_cluster.api()
    try:
        core = client.CoreV1Api(api)
        token = uuid.uuid4().hex
        core.create_namespaced_pod(
            ns,
            busybox_pod(
                "web",
                f"mkdir -p /www && echo {token} > /www/token && exec httpd -f -p 8080 -h /www",
                container={"readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}},
            ),
        )
        core.create_namespaced_service(
            ns,
            {
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
            },
        )
        wait_until(
            "pod web Ready",
            lambda: any(
                c.type == "Ready" and c.status == "True"
                for c in core.read_namespaced_pod("web", ns).status.conditions or []
            ),
            POD_START,
            kube_cluster,
            ns,
        )
        discovery = client.DiscoveryV1Api(api)
        wait_until(
            "the web Service's ready endpoint",
            lambda: any(
                e.conditions.ready
                for sl in discovery.list_namespaced_endpoint_slice(
                    ns, label_selector="kubernetes.io/service-name=web"
                ).items
                for e in sl.endpoints or []
            ),
            60,
            kube_cluster,
            ns,
        )
        script = (
            "set -e; cat /etc/resolv.conf; "
            f"nslookup web.{ns}.svc.cluster.local; "
            # kube-proxy programs the Service within a second or so of its endpoint
            "for i in $(seq 20); do wget -qO /tmp/t http://web/token && break; sleep 1; done; "
            "echo TOKEN=$(cat /tmp/t); "
            "echo API=$(wget -qO- --no-check-certificate https://kubernetes.default.svc/version"
            " | tr -d ' \\n')"
        )
        core.create_namespaced_pod(ns, busybox_pod("client", script))
        out = finished_log(kube_cluster, core, "client", ns)
        assert f"nameserver {harness.DNS_SERVICE_IP}" in out
        assert f"search {ns}.svc.cluster.local" in out
        service_ip = core.read_namespaced_service("web", ns).spec.cluster_ip
        assert f"Address: {service_ip}" in out, out
        assert f"TOKEN={token}" in out
        assert '"gitVersion":"v1.32.13"' in out, out
        # the API server proxies logs and exec to the kubelet
        assert core.read_namespaced_pod_log("web", ns) is not None
    finally:
        api.close()


def test_default_storage_class_provisions_a_local_volume(kube_cluster, ns):
    api = kube_cluster.api()
    try:
        core = client.CoreV1Api(api)
        core.create_namespaced_persistent_volume_claim(
            ns,
            {
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "64Mi"}},
                },
            },
        )
        token = uuid.uuid4().hex
        pod = busybox_pod("writer", f"echo {token} > /data/token && cat /data/token")
        pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
        pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        core.create_namespaced_pod(ns, pod)
        out = finished_log(kube_cluster, core, "writer", ns, timeout=120)
        assert token in out
        pvc = core.read_namespaced_persistent_volume_claim("data", ns)
        assert pvc.status.phase == "Bound"
        assert pvc.spec.storage_class_name == harness.STORAGE_CLASS
        pv = core.read_persistent_volume(pvc.spec.volume_name)
        host_dir = Path(pv.spec.host_path.path if pv.spec.host_path else pv.spec.local.path)
        assert host_dir.parent == kube_cluster.dir / "storage"
        assert (host_dir / "token").read_text().strip() == token
        # reclaim policy Delete: the provisioner's helper pod removes the directory
        core.delete_namespaced_pod("writer", ns, grace_period_seconds=0)
        wait_until(
            "writer pod gone", lambda: not core.list_namespaced_pod(ns).items, 60, kube_cluster, ns
        )
        core.delete_namespaced_persistent_volume_claim("data", ns)
        wait_until(
            "the PV and its directory deleted",
            lambda: (
                not host_dir.exists()
                and pvc.spec.volume_name
                not in {v.metadata.name for v in core.list_persistent_volume().items}
            ),
            120,
            kube_cluster,
            harness.LOCAL_PATH_NAMESPACE,
        )
    finally:
        api.close()


@pytest.mark.slow
def test_volcano_job_runs_with_gang_svc_and_env_plugins(kube_cluster, ns):
    """A Volcano Job (ps x1, worker x2) through the admission webhook: the svc plugin's host
    names resolve through cluster DNS, workers fetch from the ps, the job completes."""
    api = kube_cluster.api()
    try:
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)

        def task(name, replicas, script, **extra):
            tmpl = busybox_pod(name, script, restartPolicy="Never")
            tmpl.pop("apiVersion"), tmpl.pop("kind")
            tmpl["metadata"] = {"labels": {"role": name}}
            return {"name": name, "replicas": replicas, "template": tmpl, **extra}

        job = {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "gang"},
            "spec": {
                "schedulerName": "volcano",
                "minAvailable": 3,
                "plugins": {"svc": [], "env": []},
                "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}],
                "tasks": [
                    task(
                        "ps",
                        1,
                        "mkdir -p /www && hostname > /www/who && exec httpd -f -p 8080 -h /www",
                    ),
                    task(
                        "worker",
                        2,
                        "set -e; echo hosts=$VC_PS_HOSTS index=$VC_TASK_INDEX; "
                        "for i in $(seq 60); do "
                        "wget -qO- http://$VC_PS_HOSTS:8080/who > /tmp/who && break; "
                        "sleep 1; done; echo fetched=$(cat /tmp/who)",
                        policies=[{"event": "TaskCompleted", "action": "CompleteJob"}],
                    ),
                ],
            },
        }
        created = custom.create_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", ns, "jobs", job
        )
        # the mutating webhook filled in defaults (it is really in the path)
        assert created["spec"]["queue"] == "default"
        assert all(t.get("maxRetry") == 3 for t in created["spec"]["tasks"]), created["spec"][
            "tasks"
        ]

        def phase():
            j = custom.get_namespaced_custom_object(
                "batch.volcano.sh", "v1alpha1", ns, "jobs", "gang"
            )
            p = (j.get("status") or {}).get("state", {}).get("phase")
            if p in ("Failed", "Aborted", "Terminated"):
                raise AssertionError(f"job {p}: {j.get('status')}")
            return p == "Completed" and j

        wait_until("Volcano job Completed", phase, 150, kube_cluster, ns)
        workers = [
            p
            for p in core.list_namespaced_pod(ns).items
            if p.metadata.name.startswith("gang-worker-")
        ]
        assert len(workers) == 2
        for pod in workers:
            log = core.read_namespaced_pod_log(pod.metadata.name, ns)
            assert "hosts=gang-ps-0.gang" in log, log
            assert "fetched=gang-ps-0" in log, log
            assert pod.spec.scheduler_name == "volcano"
    finally:
        api.close()


def test_volcano_rejects_an_invalid_job(kube_cluster, ns):
    """The validating webhook is wired: duplicate task names are refused (no CRD schema can)."""
    api = kube_cluster.api()
    try:
        custom = client.CustomObjectsApi(api)
        pod = busybox_pod("x", "true")
        pod.pop("apiVersion"), pod.pop("kind")
        job = {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "dup"},
            "spec": {
                "minAvailable": 1,
                "tasks": [
                    {"name": "a", "replicas": 1, "template": pod},
                    {"name": "a", "replicas": 1, "template": pod},
                ],
            },
        }
        with pytest.raises(client.ApiException) as err:
            custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", ns, "jobs", job)
        assert "duplicated task name" in json.loads(err.value.body)["message"]
    finally:
        api.close()


def test_doctor_passes_against_the_cluster(kube_cluster):
    proc = subprocess.run(
        ["ectl", "doctor", "--kubeconfig", str(kube_cluster.kubeconfig), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_images_are_pulled_from_the_local_registry(kube_cluster, ns, tmp_path):
    """An image that exists only in the local registry runs: the kubelet's containerd pulls
    it over plain HTTP on loopback through its hosts.toml (the way the project's images
    reach the cluster)."""
    token = uuid.uuid4().hex
    files = {**harness.busybox_files(), "hello.txt": (token.encode(), 0o644)}
    tar = harness.oci_image_tar(
        tmp_path / "hello.tar", "elasticctr.local/e2e-hello:1", files, ["/bin/cat", "/hello.txt"]
    )
    ref = harness.push_oci_tar(tar, kube_cluster.registry, f"e2e/hello-{ns}", "v1")
    api = kube_cluster.api()
    try:
        core = client.CoreV1Api(api)
        pod = {
            "metadata": {"name": "hello"},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "hello", "image": ref, "imagePullPolicy": "Always"}],
            },
        }
        core.create_namespaced_pod(ns, pod)
        assert finished_log(kube_cluster, core, "hello", ns) == token
        events = core.list_namespaced_event(ns, field_selector="involvedObject.name=hello").items
        assert any(e.reason == "Pulled" and ref in e.message for e in events), [
            (e.reason, e.message) for e in events
        ]
    finally:
        api.close()


def test_volume_permissions_make_a_root_owned_volume_writable(kube_cluster, ns, tmp_path):
    """global.volumePermissions (docs/chart.md "Shared volumes") on a root-owned hostPath
    volume, which like an NFS-like class's volume is not changed by fsGroup: the pod's user
    (10001) cannot write it; with the chart's own init container (rendered by helm for
    cube-transfer's cube root; busybox instead of the cube image, both have sh, stat, chown
    and chmod) it can, files already there keep their owner, and a second start changes
    nothing."""
    import os

    import yaml
    from tests.conftest import REPO, require_tool

    rendered = subprocess.run(
        [require_tool("helm"), "template", "ctr", str(REPO / "charts" / "elasticctr"),
         "--set", "global.volumePermissions.enabled=true",
         "--show-only", "charts/cube/templates/transfer-deployment.yaml"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    chart_pod = yaml.safe_load(rendered.stdout)["spec"]["template"]["spec"]
    (init,) = chart_pod["initContainers"]
    (mount,) = init["volumeMounts"]
    root = tmp_path / "cube-root"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    (root / "kept").write_text("from before\n")
    assert (root.stat().st_uid, root.stat().st_gid) == (0, 0)

    def pod(name: str, with_init: bool) -> dict:
        spec = busybox_pod(
            name,
            f"echo {name} > {mount['mountPath']}/{name} && echo wrote",
            securityContext=chart_pod["securityContext"],
            container={
                "securityContext": chart_pod["containers"][0]["securityContext"],
                "volumeMounts": [mount],
            },
            volumes=[{"name": mount["name"], "hostPath": {"path": str(root), "type": "Directory"}}],
        )
        if with_init:
            spec["spec"]["initContainers"] = [
                {**init, "image": harness.BUSYBOX_IMAGE, "imagePullPolicy": "Never"}
            ]
        return spec

    def ended(name: str):
        def probe():
            p = core.read_namespaced_pod(name, ns)
            return p.status.phase in ("Succeeded", "Failed") and p

        return wait_until(f"pod {name} to finish", probe, POD_START, kube_cluster, ns)

    api = kube_cluster.api()
    try:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(ns, pod("without", with_init=False))
        assert ended("without").status.phase == "Failed"
        assert "Permission denied" in core.read_namespaced_pod_log("without", ns)

        core.create_namespaced_pod(ns, pod("first", with_init=True))
        assert "wrote" in finished_log(kube_cluster, core, "first", ns)
        init_log = core.read_namespaced_pod_log("first", ns, container="volume-permissions")
        assert f"{mount['mountPath']}: 0:0 drwxr-xr-x -> 10001:10001 drwxrwxr-x" in init_log
        assert (root.stat().st_uid, root.stat().st_gid) == (10001, 10001)
        assert (root / "first").stat().st_uid == 10001
        assert (root / "kept").stat().st_uid == 0  # the root directory only, never recursive

        core.create_namespaced_pod(ns, pod("again", with_init=True))
        assert "wrote" in finished_log(kube_cluster, core, "again", ns)
        init_log = core.read_namespaced_pod_log("again", ns, container="volume-permissions")
        assert "10001:10001 drwxrwxr-x, nothing to change" in init_log
    finally:
        api.close()
