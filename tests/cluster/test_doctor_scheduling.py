"""`ectl doctor -f values.yaml` against a real kube-apiserver (tests/cluster/conftest.py):
the Volcano queue and the per-role PriorityClasses the values name (docs/chart.md,
Scheduling on a shared cluster). No Volcano controller runs here, so the test sets the
queue's status itself, as Volcano's queue controller would."""

from __future__ import annotations

import json

import pytest
import yaml
from test_release_lifecycle import ectl  # noqa: F401  (the in-process ectl fixture)

pytestmark = pytest.mark.cluster

QUEUE = ("scheduling.volcano.sh", "v1beta1", "queues")


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
