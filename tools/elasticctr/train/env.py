"""The role environment contract: one set of variables for local processes and pods.

Paddle's `PaddleCloudRoleMaker` reads the PADDLE_* variables named in
`elasticctr.constants`. In a Volcano job they are derived from the svc/env plugins'
`VC_*_HOSTS` / `VC_TASK_INDEX` when the chart did not set them explicitly; the local
launcher sets them directly. `resolve()` does that mapping and validates the result, so
both runtimes fail the same way on a broken environment.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from elasticctr import constants as C
from elasticctr.errors import ValidationError


@dataclass(frozen=True)
class RoleEnv:
    role: str  # C.ROLE_PSERVER | C.ROLE_TRAINER
    pserver_endpoints: tuple[str, ...]
    trainers_num: int
    index: int  # trainer id, or pserver index
    pod_ip: str
    port: int
    gloo_endpoint: str

    @property
    def is_pserver(self) -> bool:
        return self.role == C.ROLE_PSERVER

    def paddle_env(self) -> dict[str, str]:
        """The variables Paddle itself reads (set into os.environ before fleet.init)."""
        env = {
            C.ENV_TRAINING_ROLE: self.role,
            C.ENV_PSERVER_ENDPOINTS: ",".join(self.pserver_endpoints),
            C.ENV_TRAINERS_NUM: str(self.trainers_num),
            C.ENV_POD_IP: self.pod_ip,
            C.ENV_PADDLE_PORT: str(self.port),
            C.ENV_GLOO_HTTP_ENDPOINT: self.gloo_endpoint,
            # trainer barriers; none in an elastic job (a dead trainer must not block)
            C.ENV_WITH_GLOO: "0" if os.environ.get(C.ENV_TRAIN_ELASTIC) == "1" else "1",
            C.ENV_GLOO_RENDEZVOUS: "3",  # HTTP store served by pserver 0
            C.ENV_PIR_API: "0",
        }
        env[C.ENV_TRAINER_ID] = str(self.index if self.role == C.ROLE_TRAINER else 0)
        return env


def _split_hosts(value: str) -> list[str]:
    return [h.strip() for h in value.split(",") if h.strip()]


def _int(env: Mapping[str, str], name: str, problems: list[str]) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        problems.append(f"{name}: expected an integer, got {raw!r}")
        return None


def _check_endpoint(ep: str, problems: list[str]) -> None:
    host, sep, port = ep.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        problems.append(f"{C.ENV_PSERVER_ENDPOINTS}: {ep!r} is not host:port")


def resolve(env: Mapping[str, str] | None = None, role: str | None = None) -> RoleEnv:
    """Read the role contract from `env` (default os.environ), mapping Volcano's variables.

    `role` overrides TRAINING_ROLE (the CLI verb `ectl train pserver|trainer` knows it).
    Raises ValidationError listing every missing or malformed variable.
    """
    env = dict(os.environ if env is None else env)
    problems: list[str] = []
    role = (role or env.get(C.ENV_TRAINING_ROLE) or "").upper()
    if role not in (C.ROLE_PSERVER, C.ROLE_TRAINER):
        problems.append(
            f"{C.ENV_TRAINING_ROLE}: expected {C.ROLE_PSERVER} or {C.ROLE_TRAINER}, "
            f"got {role or 'nothing'!r}"
        )
    port = _int(env, C.ENV_PADDLE_PORT, problems)
    ps_port = port if role == C.ROLE_PSERVER and port else C.DEFAULT_PSERVER_PORT

    # pserver endpoints: explicit list, else Volcano host names + the pserver port
    endpoints = _split_hosts(env.get(C.ENV_PSERVER_ENDPOINTS, ""))
    vc_ps_hosts = _split_hosts(env.get(C.ENV_VC_PSERVER_HOSTS, ""))
    if not endpoints and vc_ps_hosts:
        endpoints = [f"{h}:{ps_port}" for h in vc_ps_hosts]
    if not endpoints:
        problems.append(
            f"{C.ENV_PSERVER_ENDPOINTS} (or {C.ENV_VC_PSERVER_HOSTS}) is not set: "
            "the trainers cannot find the pservers"
        )
    for ep in endpoints:
        _check_endpoint(ep, problems)

    trainers_num = _int(env, C.ENV_TRAINERS_NUM, problems)
    if trainers_num is None:
        trainers_num = _int(env, C.ENV_VC_TRAINER_NUM, problems)
    if trainers_num is None and env.get(C.ENV_VC_TRAINER_HOSTS):
        trainers_num = len(_split_hosts(env[C.ENV_VC_TRAINER_HOSTS]))
    if trainers_num is None or trainers_num < 1:
        problems.append(
            f"{C.ENV_TRAINERS_NUM} (or {C.ENV_VC_TRAINER_NUM}/{C.ENV_VC_TRAINER_HOSTS}) "
            "must be a positive integer"
        )

    index = _int(env, C.ENV_TRAINER_ID, problems) if role == C.ROLE_TRAINER else None
    if index is None:
        index = _int(env, C.ENV_VC_TASK_INDEX, problems)
    pod_ip = env.get(C.ENV_POD_IP, "")
    if role == C.ROLE_PSERVER:
        if index is None and pod_ip and port:
            mine = f"{pod_ip}:{port}"
            index = endpoints.index(mine) if mine in endpoints else None
        if index is not None and endpoints and not 0 <= index < len(endpoints):
            problems.append(f"pserver index {index} is outside the {len(endpoints)} endpoints")
        elif index is not None and endpoints:
            # Paddle finds its shard by matching POD_IP:PADDLE_PORT within the list, and
            # its server binds that entry's host. In a Volcano job the entry is the pod's
            # svc-plugin host name, which has no DNS record until the pod is Ready (and the
            # pod is Ready only once the server listens): the pserver's own entry becomes
            # its pod address instead. Trainers keep the host names; the order, and so
            # every shard's index, is the same in both lists.
            host, _, ep_port = endpoints[index].rpartition(":")
            if pod_ip and host != pod_ip:
                endpoints[index] = f"{pod_ip}:{ep_port}"
            pod_ip = pod_ip or host
            port = int(ep_port)
        if index is None:
            problems.append(
                f"pserver index unknown: set {C.ENV_VC_TASK_INDEX}, or {C.ENV_POD_IP} and "
                f"{C.ENV_PADDLE_PORT} to one of {C.ENV_PSERVER_ENDPOINTS}"
            )
    elif role == C.ROLE_TRAINER:
        if index is None:
            problems.append(f"{C.ENV_TRAINER_ID} (or {C.ENV_VC_TASK_INDEX}) is not set")
        elif trainers_num and not 0 <= index < trainers_num:
            problems.append(f"trainer id {index} is outside 0..{trainers_num - 1}")
        if not pod_ip:
            pod_ip = socket.gethostname()
        if not port:
            port = C.DEFAULT_PSERVER_PORT  # unused by trainers, but Paddle requires it

    gloo = env.get(C.ENV_GLOO_HTTP_ENDPOINT, "")
    if not gloo and endpoints:
        gloo = f"{endpoints[0].rpartition(':')[0]}:{C.DEFAULT_GLOO_PORT}"
    if problems:
        raise ValidationError("the training role environment is incomplete", problems)
    return RoleEnv(
        role=role,
        pserver_endpoints=tuple(endpoints),
        trainers_num=int(trainers_num),
        index=int(index),
        pod_ip=pod_ip,
        port=int(port),
        gloo_endpoint=gloo,
    )


def coordinator_url(env: Mapping[str, str] | None = None) -> str | None:
    """The coordinator an elastic trainer leases from: `ELASTICCTR_COORDINATOR_URL`, else the
    Volcano coordinator task's host (`VC_COORDINATOR_HOSTS`) on `ELASTICCTR_COORDINATOR_PORT`;
    None when neither is set (static file split)."""
    env = os.environ if env is None else env
    if env.get(C.ENV_COORDINATOR_URL):
        return env[C.ENV_COORDINATOR_URL].rstrip("/")
    hosts = _split_hosts(env.get(C.ENV_VC_COORDINATOR_HOSTS, ""))
    if not hosts:
        return None
    port = env.get(C.ENV_COORDINATOR_PORT) or str(C.DEFAULT_COORDINATOR_PORT)
    if not port.isdigit():
        raise ValidationError(f"{C.ENV_COORDINATOR_PORT}: {port!r} is not a port number")
    return f"http://{hosts[0]}:{port}"


def wait_for_endpoints(
    endpoints: tuple[str, ...] | list[str],
    timeout: float,
    *,
    what: str = "pserver",
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Block until every host:port accepts a TCP connection; return seconds waited.

    Trainers call this before `fleet.init_worker()`: a trainer that connects before its
    pservers listen fails with an opaque "push dense param failed" otherwise.
    """
    from elasticctr.errors import EctlError

    start = time.monotonic()
    pending = list(endpoints)
    last_error: dict[str, str] = {}
    while pending:
        for ep in list(pending):
            host, _, port = ep.rpartition(":")
            try:
                with socket.create_connection((host, int(port)), timeout=1.0):
                    pending.remove(ep)
            except OSError as exc:
                last_error[ep] = str(exc)
        if not pending:
            break
        if time.monotonic() - start > timeout:
            detail = "; ".join(f"{ep} ({last_error.get(ep, 'no answer')})" for ep in pending)
            raise EctlError(
                f"{what} endpoint(s) not reachable after {timeout:.0f}s: {detail}",
                hint=f"check that the {what}s started; raise {C.ENV_PSERVER_WAIT_SECONDS} "
                "if they are just slow",
            )
        sleep(0.2)
    return time.monotonic() - start
