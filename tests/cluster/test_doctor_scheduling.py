"""`ectl doctor -f values.yaml` against a real kube-apiserver (tests/cluster/conftest.py):
the Volcano queue and the per-role PriorityClasses the values name (docs/chart.md,
Scheduling on a shared cluster). No Volcano controller runs here, so the test sets the
queue's status itself, as Volcano's queue controller would."""

from __future__ import annotations

import json

import pytest
import yaml
from test_release_lifecycle import ectl  # noqa: F401  (the in-process ectl fixture)
from tests.conftest import REPO

pytestmark = pytest.mark.cluster

QUEUE = ("scheduling.volcano.sh", "v1beta1", "queues")
REPO_VALUES = REPO / "values"


def _checks(ectl, cluster, values) -> dict:  # noqa: F811
    proc = ectl("doctor", "-f", str(values), "-o", "json", kubeconfig=cluster.kubeconfig)
    return {c["name"]: c for c in json.loads(proc.stdout)["checks"]}


def test_doctor_checks_the_queue_and_priority_classes_the_values_name(cluster, ectl, tmp_path):  # noqa: F811
    from kubernetes import client

    values = tmp_path / "values.yaml"
    volcano = {
        "queue": "doctor-q",
        "priorityClasses": {"guaranteed": "doctor-ps", "trainer": "doctor-tr"},
    }
    values.write_text(yaml.safe_dump({"trainer": {"volcano": volcano}}))
    checks = _checks(ectl, cluster, values)
    assert checks["Volcano queue doctor-q"]["status"] == "fail"
    assert "no Volcano queue doctor-q" in checks["Volcano queue doctor-q"]["detail"]
    assert checks["PriorityClasses"]["status"] == "fail"
    assert (
        checks["PriorityClasses"]["detail"] == "doctor-ps does not exist; doctor-tr does not exist"
    )
    # No volcano-scheduler-configmap here: a warning, not a failure.
    assert checks["Volcano preemption"]["status"] == "warn"

    api = cluster.api()
    try:
        custom = client.CustomObjectsApi(api)
        queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                 "metadata": {"name": "doctor-q"}, "spec": {"weight": 1}}  # fmt: skip
        custom.create_cluster_custom_object(*QUEUE, queue)
        checks = _checks(ectl, cluster, values)
        assert checks["Volcano queue doctor-q"]["status"] == "fail"  # not Open yet
        assert "is unknown" in checks["Volcano queue doctor-q"]["detail"]
        custom.patch_cluster_custom_object_status(*QUEUE, "doctor-q", {"status": {"state": "Open"}})
        scheduling = client.SchedulingV1Api(api)
        for name, value in (("doctor-ps", 1000), ("doctor-tr", -10)):
            scheduling.create_priority_class(
                client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value)
            )
        checks = _checks(ectl, cluster, values)
        queue_check = checks["Volcano queue doctor-q"]
        assert (queue_check["status"], queue_check["detail"]) == ("ok", "exists and is Open")
        assert checks["PriorityClasses"]["status"] == "ok"
        # Asked to create what already exists outside Helm: both would fail the install.
        volcano["createQueue"] = {"enabled": True}
        volcano["priorityClasses"]["create"] = True
        values.write_text(yaml.safe_dump({"trainer": {"volcano": volcano}}))
        checks = _checks(ectl, cluster, values)
        assert checks["Volcano queue doctor-q"]["status"] == "fail"
        assert "createQueue.enabled: false" in checks["Volcano queue doctor-q"]["fix"]
        assert checks["PriorityClasses"]["detail"] == (
            "doctor-ps exists outside Helm; doctor-tr exists outside Helm"
        )
    finally:
        for name in ("doctor-ps", "doctor-tr"):
            try:
                client.SchedulingV1Api(api).delete_priority_class(name)
            except client.exceptions.ApiException:
                pass
        try:
            client.CustomObjectsApi(api).delete_cluster_custom_object(*QUEUE, "doctor-q")
        except client.exceptions.ApiException:
            pass
        api.close()


def test_doctor_checks_the_classes_and_apis_the_cloud_values_need(cluster, ectl, tmp_path):  # noqa: F811
    """production.yaml + aws-eks.yaml name the StorageClasses efs-sc (ReadWriteMany) and gp3,
    the IngressClass nginx and serving autoscaling (metrics.k8s.io); the Volcano CRDs of
    the fixture serve the job's group versions. The classes and the APIService are created
    here the way their controllers' charts would."""
    import time

    from kubernetes import client

    files = [str(REPO_VALUES / "production.yaml"), str(REPO_VALUES / "aws-eks.yaml")]

    def checks(*extra: str) -> dict:
        args = ["doctor", "-o", "json"]
        for f in [*files, *extra]:
            args += ["-f", f]
        proc = ectl(*args, kubeconfig=cluster.kubeconfig)
        return {c["name"]: c for c in json.loads(proc.stdout)["checks"]}

    first = checks()
    assert first["Volcano APIs"] == {
        "name": "Volcano APIs",
        "status": "ok",
        "detail": "batch.volcano.sh/v1alpha1, scheduling.volcano.sh/v1beta1",
        "fix": "",
    }
    assert first["StorageClass efs-sc"]["status"] == "fail"
    assert (
        "trainer.staging, cube.sharedStorage would stay Pending"
        in (first["StorageClass efs-sc"]["detail"])
    )
    assert first["StorageClass gp3"]["status"] == "fail"
    assert first["IngressClass nginx"]["status"] == "fail"
    assert first["metrics API"]["status"] == "fail"
    assert "metrics.k8s.io is not served" in first["metrics API"]["detail"]

    api = cluster.api()
    storage, networking = client.StorageV1Api(api), client.NetworkingV1Api(api)
    registration = client.ApiregistrationV1Api(api)
    metrics = "v1beta1.metrics.k8s.io"
    try:
        for name, provisioner in (("efs-sc", "efs.csi.aws.com"), ("gp3", "ebs.csi.aws.com")):
            storage.create_storage_class(
                client.V1StorageClass(
                    metadata=client.V1ObjectMeta(name=name), provisioner=provisioner
                )
            )
        networking.create_ingress_class(
            client.V1IngressClass(
                metadata=client.V1ObjectMeta(name="nginx"),
                spec=client.V1IngressClassSpec(controller="k8s.io/ingress-nginx"),
            )
        )
        # metrics-server's APIService while its Service does not exist (yet).
        spec = {"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100,
                "versionPriority": 100, "insecureSkipTLSVerify": True,
                "service": {"namespace": "kube-system", "name": "metrics-server"}}  # fmt: skip
        registration.create_api_service({"metadata": {"name": metrics}, "spec": spec})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the aggregator's availability controller
            status = registration.read_api_service(metrics).status
            if status and status.conditions:
                break
            time.sleep(0.5)

        second = checks()
        assert second["StorageClass efs-sc"] == {
            "name": "StorageClass efs-sc",
            "status": "ok",
            "detail": "provisioner efs.csi.aws.com (file storage); used by trainer.staging "
            "(ReadWriteMany), cube.sharedStorage (ReadWriteMany)",
            "fix": "",
        }
        assert second["StorageClass gp3"]["status"] == "ok"
        assert second["IngressClass nginx"]["detail"] == (
            "controller k8s.io/ingress-nginx; used by serving.ingress, mlflow.ingress"
        )
        assert second["metrics API"]["status"] == "fail"
        assert "registered but not available" in second["metrics API"]["detail"]

        # The same classes asked for the wrong way: RWX on EBS, EFS without the init step.
        wrong = tmp_path / "wrong.yaml"
        wrong.write_text(
            yaml.safe_dump({
                "global": {"volumePermissions": {"enabled": False}},
                "cube": {"sharedStorage": {"storageClass": "gp3"}},
            })
        )  # fmt: skip
        third = checks(str(wrong))
        assert third["StorageClass gp3"]["status"] == "fail"
        assert "cube.sharedStorage ask for ReadWriteMany" in third["StorageClass gp3"]["detail"]
        assert third["StorageClass efs-sc"]["status"] == "warn"
        assert "global.volumePermissions.enabled" in third["StorageClass efs-sc"]["fix"]

        # An APIService served by the API server itself is always Available.
        registration.delete_api_service(metrics)
        local = {k: v for k, v in spec.items() if k not in ("service", "insecureSkipTLSVerify")}
        registration.create_api_service({"metadata": {"name": metrics}, "spec": local})
        deadline = time.monotonic() + 60
        while checks()["metrics API"]["status"] != "ok":
            assert time.monotonic() < deadline, checks()["metrics API"]
            time.sleep(0.5)
    finally:
        for call, name in (
            (storage.delete_storage_class, "efs-sc"),
            (storage.delete_storage_class, "gp3"),
            (networking.delete_ingress_class, "nginx"),
            (registration.delete_api_service, metrics),
        ):
            try:
                call(name)
            except client.exceptions.ApiException:
                pass
        api.close()
