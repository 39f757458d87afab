"""The node's CPU as the schedulers count it, sampled over a run, and a tenant that asks
for it: shared by the e2e tests that measure borrowing and giving back (preemption,
platform)."""

from __future__ import annotations

import threading
import time

from tests.e2e import releases

TENANT = "tenant"


def millicpu(quantity) -> int:
    from kubernetes.utils import parse_quantity

    return int(parse_quantity(quantity or "0") * 1000)


def pod_cpu_request(pod) -> int:
    """What kube-scheduler counts: the sum over containers, or the largest init container."""

    def req(c):
        return millicpu(((c.resources and c.resources.requests) or {}).get("cpu"))

    return max(
        sum(req(c) for c in pod.spec.containers),
        max((req(c) for c in pod.spec.init_containers or []), default=0),
    )


def node_cpu(kube_cluster) -> tuple[int, int]:
    """(allocatable millicores, millicores requested by the pods bound to the node and not
    finished)."""
    core = releases.core_api(kube_cluster)
    (node,) = core.list_node(_request_timeout=10).items
    allocatable = millicpu(node.status.allocatable["cpu"])
    bound = core.list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName={node.metadata.name}", _request_timeout=10
    ).items
    requested = sum(
        pod_cpu_request(p) for p in bound if p.status.phase not in ("Succeeded", "Failed")
    )
    return allocatable, requested


class Utilisation:
    """Samples the node's requested-CPU share every second on a thread."""

    def __init__(self, kube_cluster):
        self.h, self.samples, self._stop = kube_cluster, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                allocatable, requested = node_cpu(self.h)
                self.samples.append((time.monotonic(), requested / allocatable))
            except Exception:  # noqa: BLE001 - a missed sample; the mean uses the others
                pass
            self._stop.wait(1.0)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(15)

    def mark(self) -> float:
        """Now, on the samples' clock (for `mean(since=...)`)."""
        return time.monotonic()

    def mean(self, since: float | None = None) -> float:
        """Time-weighted mean over the sampled window, or over its part from `since`."""
        pts = [p for p in self.samples if since is None or p[0] >= since]
        if len(pts) < 2:
            return float("nan")
        area = sum((t1 - t0) * u0 for (t0, u0), (t1, _) in zip(pts, pts[1:], strict=False))
        return area / (pts[-1][0] - pts[0][0])

    def low(self, since: float | None = None, below: float = 0.9) -> list[tuple[float, float]]:
        """(seconds from the first sample, share) of the samples under `below`."""
        t0 = self.samples[0][0] if self.samples else 0.0
        return [
            (round(t - t0, 1), round(u, 3))
            for t, u in self.samples
            if (since is None or t >= since) and u < below
        ]


def tenant_deployment(
    millicores: int,
    priority_class: str | None,
    queue: str | None = None,
    *,
    scheduler: str = "volcano",
    name: str = TENANT,
) -> dict:
    """A tenant pod in a class above the trainers' (None: no class, priority 0): of Volcano,
    or of kube-scheduler (`scheduler="default-scheduler"`: the coordinator yields trainers
    to it, elasticctr.coordinator.yielding). Labelled `app=<name>`."""
    spec: dict = {"schedulerName": scheduler, "terminationGracePeriodSeconds": 1}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    # Volcano's queue of the pod's PodGroup (default: Volcano's `default`).
                    "annotations": {"scheduling.volcano.sh/queue-name": queue} if queue else {},
                },
                "spec": {
                    **spec,
                    "containers": [
                        {
                            "name": "pause",
                            "image": "elasticctr.local/pause:3.10",
                            "imagePullPolicy": "Never",
                            "resources": {
                                "requests": {"cpu": f"{millicores}m", "memory": "16Mi"},
                                "limits": {"memory": "32Mi"},
                            },
                        }
                    ],
                },
            },
        },
    }
