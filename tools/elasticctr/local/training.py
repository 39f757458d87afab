"""Local training jobs: a coordinator, P pservers and T elastic trainers as processes on
loopback; `ectl train --local`, the quickstart and the local deployment all train this
way (one path, as the chart does).

The processes are exactly what pods run (`ectl coordinator`, `ectl train pserver|trainer`),
with the role environment of docs/training.md set here instead of by Volcano;
`elasticctr.supervisor` runs them. The trainer runtime itself is `elasticctr.train` (this
module only starts it). The coordinator leases byte ranges of each hour's files to the
trainers, so every trainer gets work whatever the number of files, and the chief exports
an hour once all its tasks are done (every export holds every trained row).

`ElasticJob` is the job; `run_elastic` runs one to completion.
"""

from __future__ import annotations

import dataclasses
import shutil
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from elasticctr import constants as C
from elasticctr.coordinator.client import CoordinatorClient
from elasticctr.coordinator.runtime import restart_from_checkpoint
from elasticctr.errors import EctlError
from elasticctr.net import free_port
from elasticctr.supervisor import Component, RestartPolicy, Supervisor, python_entry
from elasticctr.train import config
from elasticctr.values import effective_values

LOOPBACK = "127.0.0.1"


def role_components(
    values: Path,
    pservers: int,
    trainers: int,
    staging: Path,
    extra_trainer_args: Sequence[str] = (),
) -> list[Component]:
    """The P + T components with their role environment (free loopback ports)."""
    if pservers < 1 or trainers < 1:
        raise EctlError("need at least one pserver and one trainer (-p/-t)")
    ps_ports = [free_port(LOOPBACK) for _ in range(pservers)]
    endpoints = ",".join(f"{LOOPBACK}:{p}" for p in ps_ports)
    common = {
        C.ENV_PSERVER_ENDPOINTS: endpoints,
        C.ENV_TRAINERS_NUM: str(trainers),
        C.ENV_GLOO_HTTP_ENDPOINT: f"{LOOPBACK}:{free_port(LOOPBACK)}",
        C.ENV_POD_IP: LOOPBACK,
        C.ENV_TRAIN_STAGING: str(staging),
        C.ENV_PIR_API: "0",
    }
    comps = []
    for i, port in enumerate(ps_ports):
        env = {**common, C.ENV_TRAINING_ROLE: C.ROLE_PSERVER, C.ENV_PADDLE_PORT: str(port)}
        argv = python_entry("train", "pserver", "-f", str(values))
        comps.append(Component(f"pserver-{i}", argv, env, ready_port=(LOOPBACK, port)))
    for i in range(trainers):
        env = {
            **common,
            C.ENV_TRAINING_ROLE: C.ROLE_TRAINER,
            C.ENV_TRAINER_ID: str(i),
            C.ENV_PADDLE_PORT: str(free_port(LOOPBACK)),
        }
        argv = python_entry("train", "trainer", "-f", str(values), *extra_trainer_args)
        comps.append(Component(f"trainer-{i}", argv, env))
    return comps


class _Tail:
    """Echo new lines of each log with a [name] prefix."""

    def __init__(self, echo: Callable[[str], None]):
        self.echo = echo
        self.offsets: dict[Path, int] = {}

    def pump(self, logs: dict[str, Path]) -> None:
        for name, path in logs.items():
            try:
                with open(path, "rb") as fh:
                    fh.seek(self.offsets.get(path, 0))
                    data = fh.read()
            except FileNotFoundError:
                continue
            cut = data.rfind(b"\n") + 1
            self.offsets[path] = self.offsets.get(path, 0) + cut
            for line in data[:cut].decode(errors="replace").splitlines():
                self.echo(f"[{name}] {line}")


# --- elastic job: coordinator + pservers + elastic trainers ---------------------------

TRAINER_CAPACITY = 64
"""Highest trainer id + 1 a local elastic job accepts (trainers may join later)."""


class ElasticJob:
    """`ectl coordinator` + P pservers + T elastic trainers as local processes.

    Trainers may be killed or added while it runs (`kill`, `add_trainer`); the job is
    done when the coordinator reports `finished` and every live trainer exited 0.
    Restart policies (the chart's Volcano policies, docs/coordinator.md):
    - a trainer that crashes (exits non-zero) restarts in place, up to 3 times, as the
      chart's trainer pods do (restartPolicy OnFailure); the coordinator re-queues the
      task it held when the restarted process asks for work; a trainer killed through
      `kill` (fault injection: its pod is gone) is not replaced — its lease expires and
      another trainer retrains that one task;
    - the coordinator alone restarts on failure (its progress file is durable and the
      pservers still hold everything it records);
    - a pserver exit restarts the whole job from the last checkpoint (up to
      `max_restarts` times): every role is stopped, the coordinator's progress is reset
      to the checkpoint's, and one trainer loads the checkpoint into the new pservers.
    Use as a context manager: every process is stopped on exit.
    """

    def __init__(
        self,
        values: Path,
        log_dir: Path,
        *,
        pservers: int = 1,
        trainers: int = 2,
        lease_seconds: float = 10.0,
        task_mb: float = 0.25,
        state_url: str | None = None,
        checkpoint_dir: Path | None = None,
        checkpoint_every: int = 1,
        resume: bool = False,
        max_restarts: int = 3,
        report_every: float | None = None,
        extra_trainer_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        echo=None,
    ):
        """`env`: added to every process's environment (e.g. a scenario's MLflow names)."""
        self.log_dir = Path(log_dir)
        self.env = dict(env or {})
        self.port = free_port(LOOPBACK)
        self.url = f"http://{LOOPBACK}:{self.port}"
        state = state_url or (self.log_dir / "coordinator.json").resolve().as_uri()
        self.state_url = state
        self.checkpoint_dir = Path(checkpoint_dir or self.log_dir / "checkpoint").resolve()
        self.max_restarts = max_restarts
        self.resume = resume
        self.report_every = report_every
        self.restarts: list[dict] = []  # {"reason", "stopped_at", "started_at"} per restart
        self.echo = echo or (lambda _msg: None)
        comps = role_components(
            Path(values),
            pservers,
            trainers,
            self.log_dir / "staging",
            ("--coordinator", self.url, *extra_trainer_args),
        )
        roles = [self._elastic_role(c) for c in comps]
        self._trainer_template = next(c for c in roles if c.name.startswith("trainer-"))
        self.sup = Supervisor(self.log_dir, grace=10.0, echo=echo)
        coord_argv = python_entry(
            "coordinator", "-f", str(values), "--port", str(self.port),
            "--state-url", state, "--lease-seconds", str(lease_seconds),
            "--task-mb", str(task_mb), "--poll-seconds", "0.5",
            "--checkpoint-every", str(checkpoint_every),
        )  # fmt: skip
        self.components = [
            Component(
                "coordinator",
                coord_argv,
                dict(self.env),
                ready_port=(LOOPBACK, self.port),
                restart=RestartPolicy.ON_FAILURE,
            )
        ]
        self.components.extend(roles)
        self.trainers = {c.name for c in self.components if c.name.startswith("trainer-")}
        self.killed: set[str] = set()
        self._codes: dict[str, int] = {}  # exit codes of the roles that exited
        self._by_name = {c.name: c for c in self.components}

    def _elastic_role(self, comp: Component) -> Component:
        """A role component of `role_components` as this elastic job runs it."""
        env = {**comp.env, **self.env, C.ENV_TRAIN_ELASTIC: "1"}
        if not comp.name.startswith("trainer-"):
            return dataclasses.replace(comp, env=env)
        env[C.ENV_TRAINERS_NUM] = str(TRAINER_CAPACITY)
        env[C.ENV_TRAIN_CHECKPOINT] = str(self.checkpoint_dir)
        # As the chart's trainer pods (restartPolicy OnFailure): a crashed trainer restarts
        # in place; the coordinator re-queues the task it held as soon as it asks again,
        # so nothing is lost or counted twice.
        return dataclasses.replace(comp, env=env, restart=RestartPolicy.ON_FAILURE)

    def __enter__(self) -> ElasticJob:
        current = self.checkpoint_dir / "ps"
        if not self.resume and current.exists():
            # A fresh job must never restart from another job's checkpoint: keep the old
            # one aside (one generation) instead of deleting it.
            previous = self.checkpoint_dir / "ps.previous-job"
            shutil.rmtree(previous, ignore_errors=True)
            current.rename(previous)
            self.echo(f"kept the previous job's checkpoint as {previous}")
        # The job starts as a restart from the checkpoint would (none when fresh).
        self.echo(restart_from_checkpoint(self.checkpoint_dir.as_uri(), self.state_url)["message"])
        self.sup.__enter__()
        for comp in self.components:
            self.sup.start(comp)
            if comp.name == "coordinator":
                self.sup.wait_ready("coordinator", timeout=60)
        return self

    def __exit__(self, *exc) -> None:
        self.sup.__exit__(*exc)

    def client(self) -> CoordinatorClient:
        return CoordinatorClient(self.url, "observer", retry_seconds=60)

    def add_trainer(self, index: int) -> str:
        name = f"trainer-{index}"
        env = {
            **self._trainer_template.env,
            C.ENV_TRAINER_ID: str(index),
            C.ENV_PADDLE_PORT: str(free_port(LOOPBACK)),
        }
        comp = dataclasses.replace(self._trainer_template, name=name, env=env)
        self._by_name[name] = comp
        self.sup.start(comp)
        self.trainers.add(name)
        return name

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Fault injection: a killed trainer stays down (its pod is gone for good); a
        killed pserver restarts the job, a killed coordinator restarts alone."""
        if name.startswith("trainer-"):
            self.killed.add(name)
        self.sup.kill(name, sig, keep_down=name.startswith("trainer-"))

    def wait(self, timeout: float, on_tick=None) -> dict[str, int]:
        """Until every trainer exited; raise EctlError on a failure or the timeout.
        `on_tick()` runs every round (~0.3 s), e.g. to watch progress while the job
        restarts roles (which happens only inside this loop)."""
        deadline = time.monotonic() + timeout
        while not self.poll_once():
            if on_tick is not None:
                on_tick()
            if time.monotonic() > deadline:
                raise EctlError(f"elastic job not finished in {timeout:.0f}s; logs {self.log_dir}")
            time.sleep(0.3)
        return dict(self._codes)

    def poll_once(self) -> bool:
        """One round of `wait`: True once every trainer exited; raises EctlError on a
        failure. A pserver's exit restarts the job here (Volcano's RestartJob)."""
        if not self.trainers - set(self._codes) - self.killed:
            return True
        for name, code in self.sup.poll():
            if name.startswith("pserver-"):
                self._restart_job(f"{name} exited with code {code}")
                self._codes.clear()
                break
            self._codes[name] = code
            if name in self.killed:
                continue
            if code != 0 or not name.startswith("trainer-"):
                tail = self.sup.log_tail(name)
                raise EctlError(
                    f"{name} exited with code {code}; its log ends:\n{tail}",
                    hint=f"see {self.sup.log_path(name)}",
                )
        self._note_resumed()
        self._report()
        return not self.trainers - set(self._codes) - self.killed

    def _report(self) -> None:
        """Every `report_every` seconds, one line of the coordinator's progress."""
        now = time.monotonic()
        if self.report_every is None or now - getattr(self, "_reported", 0.0) < self.report_every:
            return
        self._reported = now
        try:
            p = self.client().progress()
        except Exception:  # the coordinator is (re)starting
            return
        rate = sum(t["samples_per_s"] for t in p["trainers"].values())
        exported = sum(1 for part in p["partitions"] if part["exported"])
        self.echo(
            f"tasks done {p['tasks_done']}, leased {p['tasks_leased']}, pending "
            f"{p['tasks_pending']} (retried {p['tasks_retried']}); {p['samples']} samples, "
            f"{rate:.0f}/s over {len(p['trainers'])} trainer(s); "
            f"{exported}/{len(p['partitions'])} hour(s) exported"
        )

    def _note_resumed(self) -> None:
        """After a restart: when the first task is done again (recovery time)."""
        last = self.restarts[-1] if self.restarts else None
        if last is None or "resumed_at" in last:
            return
        try:
            done = self.client().progress()["tasks_done"]
        except Exception:  # the coordinator is starting: ask again next round
            return
        if done > last["tasks_done"]:
            last["resumed_at"] = time.monotonic()
            self.echo(f"training resumed {last['resumed_at'] - last['stopped_at']:.1f}s after")

    def _restart_job(self, reason: str) -> None:
        """Volcano's RestartJob, locally: stop every role, reset the coordinator's
        progress to the checkpoint's, start everything again."""
        if len(self.restarts) >= self.max_restarts:
            raise EctlError(
                f"{reason}; the job was already restarted {len(self.restarts)} times",
                hint=f"logs in {self.log_dir}",
            )
        stopped_at = time.monotonic()
        alive = sorted(self.trainers - self.killed)
        self.echo(f"{reason}: restarting the job from the checkpoint in {self.checkpoint_dir}")
        for name in list(self.sup.running()):
            self.sup.kill(name, signal.SIGKILL)
            self.sup.stop(name)
        restart = restart_from_checkpoint(self.checkpoint_dir.as_uri(), self.state_url)
        self.echo(restart["message"])
        self.restarts.append({"reason": reason, "stopped_at": stopped_at, **restart})
        self.trainers = set(alive)
        for comp in self.components:
            if comp.name.startswith("trainer-") and comp.name not in alive:
                continue
            self.sup.start(comp)
            if comp.name == "coordinator":
                self.sup.wait_ready("coordinator", timeout=60)
        for name in alive:
            if not any(c.name == name for c in self.components):
                self.sup.start(self._by_name[name])
        self.restarts[-1]["started_at"] = time.monotonic()


@dataclass
class LocalRun:
    """What `run_elastic` reports: the coordinator's final progress (per-trainer samples
    and tasks, per-partition samples; every sample counted once) and the wall time."""

    progress: dict
    seconds: float
    restarts: int

    def trainer_samples(self) -> dict[str, int]:
        """Samples each trainer trained (coordinator progress), by trainer name (in the
        order of the trainer ids)."""
        trainers = self.progress["trainers"]
        order = sorted(trainers, key=lambda n: (not n.isdigit(), int(n) if n.isdigit() else n))
        return {name: int(trainers[name]["samples"]) for name in order}

    def summary(self) -> str:
        p = self.progress
        per = ", ".join(f"trainer-{n} {s}" for n, s in self.trainer_samples().items())
        return (
            f"training finished in {self.seconds:.0f}s: {p['tasks_done']} tasks, "
            f"{p['samples']} samples ({per}), {p['tasks_retried']} retried, "
            f"{self.restarts} job restart(s)"
        )


def train_on_generated(values: dict, root: Path, hours: Sequence[str]) -> dict:
    """Point `values` (a raw values dict, changed in place and returned) at hours written
    by `elasticctr.data.generate` under `root`: the quickstart's and `--synthetic-samples`'
    training data."""
    data = values.setdefault("global", {}).setdefault("data", {})
    data.update({"path": str(root), "startDateHour": hours[0], "endDateHour": hours[-1]})
    data.pop("sparseDim", None)  # generated feasigns are already in range
    return values


TASKS_PER_TRAINER = 4
"""Unless the values set trainer.coordinator.taskMiB, a local job splits the largest
hour into about this many tasks per trainer (the chart's 64 MiB would make a small hour
one task, trained by one trainer while the others wait)."""


def local_task_mib(values: dict, trainers: int) -> float | None:
    """trainer.coordinator.taskMiB for a local job: None when the values set it or the
    hours are open-ended (a streaming job), else the size that splits the largest hour
    in [startDateHour, endDateHour] into TASKS_PER_TRAINER tasks per trainer, at most
    the chart's default (C.DEFAULT_COORDINATOR_TASK_MIB)."""
    from elasticctr.data import partitions, storage

    if ((values.get("trainer") or {}).get("coordinator") or {}).get("taskMiB") is not None:
        return None
    cfg = config.from_values(values)
    if not cfg.data_path or not cfg.start_date_hour or not cfg.end_date_hour:
        return None
    ugi = cfg.hdfs_ugi
    largest = 0
    for part in partitions.list_partitions(
        cfg.data_path, cfg.start_date_hour, cfg.end_date_hour, ugi
    ):
        files = partitions.data_files(part, ugi)
        if files:
            fs, _ = storage.url_to_fs(files[0], ugi)
            largest = max(largest, sum(fs.size(storage.url_to_fs(f, ugi)[1]) for f in files))
    if largest == 0:
        return None
    mib = largest / (TASKS_PER_TRAINER * max(trainers, 1)) / (1 << 20)
    return min(max(round(mib, 4), 0.001), float(C.DEFAULT_COORDINATOR_TASK_MIB))


def elastic_job(
    values: Path,
    log_dir: Path,
    pservers: int,
    trainers: int,
    checkpoint_dir: Path,
    *,
    resume: bool = False,
    echo=None,
    report_every: float = 10.0,
    checkpoint_every: int | None = None,
    env: dict[str, str] | None = None,
) -> ElasticJob:
    """An ElasticJob with the values' `trainer.coordinator` settings (chart defaults
    otherwise; taskMiB from `local_task_mib` when the values leave it out), not started;
    `checkpoint_every` overrides trainer.coordinator.checkpointEvery, `env` is added to
    every process's environment."""
    raw = config.load_values(values)
    coord = effective_values(raw)["trainer"]["coordinator"]
    echo = echo or (lambda _m: None)
    task_mib = local_task_mib(raw, trainers) or float(coord["taskMiB"])
    job = ElasticJob(
        Path(values).resolve(),
        log_dir,
        pservers=pservers,
        trainers=trainers,
        lease_seconds=float(coord["leaseSeconds"]),
        task_mb=task_mib,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every=checkpoint_every or int(coord["checkpointEvery"]),
        resume=resume,
        report_every=report_every,
        env=env,
        echo=echo,
    )
    echo(
        f"elastic job: coordinator {job.url}, {pservers} pserver(s), {trainers} trainer(s), "
        f"tasks of {task_mib:g} MiB"
    )
    return job


def run_jobs(
    jobs: dict[str, ElasticJob], *, timeout: float | None = None, on_tick=None
) -> dict[str, LocalRun]:
    """Several elastic jobs side by side until each finished (the scenarios of a local
    platform train at once); each is stopped as soon as it is done, so its processes
    free their CPU for the others. Raises EctlError when one fails (every job is
    stopped) or at `timeout`. `on_tick()` runs every ~0.3 s."""
    t0 = time.monotonic()
    deadline = t0 + (timeout if timeout is not None else float("inf"))
    runs: dict[str, LocalRun] = {}
    started: list[ElasticJob] = []
    try:
        for job in jobs.values():
            job.__enter__()
            started.append(job)
        pending = dict(jobs)
        while pending:
            for name, job in list(pending.items()):
                if job.poll_once():
                    progress = job.client().progress()
                    runs[name] = LocalRun(progress, time.monotonic() - t0, len(job.restarts))
                    del pending[name]
                    started.remove(job)
                    job.__exit__(None, None, None)
            if on_tick is not None:
                on_tick()
            if pending and time.monotonic() > deadline:
                raise EctlError(
                    f"elastic job(s) {', '.join(pending) or '?'} not finished in "
                    f"{timeout:.0f}s; logs {', '.join(str(j.log_dir) for j in pending.values())}"
                )
            if pending:
                time.sleep(0.3)
    finally:
        exc = sys.exc_info()
        for job in reversed(started):
            job.__exit__(*exc)
    return runs


def run_elastic(
    *job_args, timeout: float | None = None, on_tick=None, stream: bool = False, **job_options
) -> LocalRun:
    """`ectl train --local`, `ectl quickstart` and the local deployment's training: one
    `elastic_job(*job_args, **job_options)` (values, log_dir, pservers, trainers,
    checkpoint_dir; resume, echo, report_every, checkpoint_every, env) run until it
    finishes (`run_jobs`). Raises EctlError when the job fails. `on_tick()` runs every
    ~0.3 s while it trains; `stream` echoes every role's log lines with a `[role-i]`
    prefix."""
    echo = job_options.get("echo") or (lambda _m: None)
    job = elastic_job(*job_args, **job_options)
    tail = _Tail(echo)

    def pump() -> None:
        if stream:
            tail.pump({c.name: job.sup.log_path(c.name) for c in job.components})

    def tick() -> None:
        pump()
        if on_tick is not None:
            on_tick()

    try:
        return run_jobs({"job": job}, timeout=timeout, on_tick=tick)["job"]
    finally:
        pump()
