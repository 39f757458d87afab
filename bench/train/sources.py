"""Native-path training throughput by data source: local file, fileserver (http), HDFS, S3.

Same generated hour (`ectl data generate`, default 26 slots), same model (the default
`dnn`, batch 512), same threads (`trainer.threads`, default 2), same task size (the local
job's rule: the hour in 4 tasks), 1 pserver + 1 elastic trainer (`ElasticJob`, what `ectl
train --local` runs), read from:

- local: the files, mapped by ectl-slotfeed;
- fileserver: `ectl fileserver` serving the same folder, reads protected by its token
  (`--protect-reads`, as a release's data store), ranges streamed to the readers;
- hdfs: the test MiniDFSCluster (scripts/hdfs, `make tools`), the files copied to it,
  read as HDFS_UGI's user, ranges streamed to the readers;
- s3: the test SeaweedFS S3 gateway (tests/s3_fixture.py, `make tools`), the files put in
  its bucket, read through s3fs with the S3_* environment (path-style, signed), ranges
  streamed to the readers.

Rounds are interleaved (local, fileserver, hdfs, s3; the order rotates every round) and
repeated (`--rounds`, default 3); the table gives the median and the spread (min-max).

What one round measures: the job starts with the hour's donefile missing, so every role
starts up and the trainer idles asking for work; then the donefile is written, and the
training window runs from the coordinator's discovery of the hour (polled every 0.02 s;
its listing of the store is not measured) until it reports every task of the hour done
(polled every 0.05 s; the export after it is not measured). Over that window:
- samples/s per trainer: the coordinator's trained samples / window seconds;
- CPU: cumulative CPU times (utime + stime + cutime + cstime from /proc/<pid>/stat, so
  exited and reaped children such as the readers count) of every live process of each
  role's process tree, read at both ends of the window (not sampled): trainer (with its
  readers and the store client's threads), pserver, coordinator, and the store server
  (fileserver / HDFS JVM / weed) reported separately;
- samples per CPU-second: samples / CPU of trainer + pserver + coordinator (the job);
  the store server's CPU is shown beside it, and once more included.

Placement (`--pin`, default `job=0,store=1` when CPUs 0 and 1 are both available,
`none` otherwise or when asked): the job's processes (coordinator, pserver, trainer, and
all their children: the trainer's readers) run on the `job` CPUs, the store server's
(fileserver / HDFS JVM / weed) on the `store` CPUs, so the store never takes the
trainer's core and every source is measured under the same placement. Both are set at
launch (each is started from a thread with that CPU mask, which children inherit) and
again on every thread of each process tree (`os.sched_setaffinity` per thread) before
each window; a thread found elsewhere at the window's end is reported. This driver
(polling the coordinator, uploads) runs on the `store` CPUs. A side left out gets the
other available CPUs: `--pin job=0` is `job=0,store=<the rest>`; a list is CPU numbers
and ranges (`job=0-1,3,store=2`). The header prints the placement.

The last lines are `ratio: <source> vs local samples per CPU-second = N.NNx` and
`ratio: <source> vs local samples/s = N.NNx` (medians).

    .venv/bin/python bench/train/sources.py --lines 200000 --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.fileserver_fixture import running_fileserver  # noqa: E402
from tests.hdfs_fixture import MiniHdfs  # noqa: E402
from tests.s3_fixture import TEST_BUCKET, SeaweedS3, s3_env  # noqa: E402
from treecpu import tree_cpu  # noqa: E402  (bench/train/treecpu.py: one tree-CPU reader)

from elasticctr import constants as C  # noqa: E402
from elasticctr.data import storage  # noqa: E402
from elasticctr.local.training import ElasticJob, local_task_mib  # noqa: E402
from elasticctr.net import free_port  # noqa: E402

ECTL = [sys.executable, "-m", "elasticctr.cli.main"]
HOUR = "20200401/00"
TOKEN = "bench-sources-token"
UGI = "bench,secret"


PIN_SIDES = ("job", "store")


def parse_pin(text: str, available: set[int]) -> dict[str, set[int]] | None:
    """`job=LIST,store=LIST` -> {"job": CPUs, "store": CPUs}; `none` -> None. A LIST is
    CPU numbers and ranges separated by commas (`0`, `0-3`, `0,2`); a side left out gets
    the `available` CPUs the other does not have. ValueError with the reason."""
    if text.strip().lower() == "none":
        return None
    sides: dict[str, set[int]] = {}
    side = None
    for item in text.split(","):
        item = item.strip()
        if "=" in item:
            side, item = (x.strip() for x in item.split("=", 1))
            if side not in PIN_SIDES or side in sides:
                raise ValueError(f"{text!r}: expected job=CPUS,store=CPUS or none")
            sides[side] = set()
        if side is None or not item:
            raise ValueError(f"{text!r}: expected job=CPUS,store=CPUS or none")
        lo, _, hi = item.partition("-")
        try:
            first, last = int(lo), int(hi or lo)
        except ValueError:
            raise ValueError(f"{text!r}: {item!r} is not a CPU number or range") from None
        if first > last:
            raise ValueError(f"{text!r}: empty CPU range {item!r}")
        sides[side].update(range(first, last + 1))
    for one, other in (PIN_SIDES, PIN_SIDES[::-1]):
        if one not in sides:
            sides[one] = available - sides.get(other, set())
    if sides["job"] & sides["store"]:
        raise ValueError(
            f"{text!r}: job and store share CPUs {sorted(sides['job'] & sides['store'])}"
        )
    for side in PIN_SIDES:
        if not sides[side]:
            raise ValueError(f"{text!r}: no CPU left for the {side}")
        if not sides[side] <= available:
            missing = sorted(sides[side] - available)
            raise ValueError(
                f"{text!r}: CPUs {missing} are not available (have {sorted(available)})"
            )
    return sides


def cpu_list(cpus: set[int]) -> str:
    """{0, 1, 2, 5} -> '0-2,5' (taskset's list syntax)."""
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def tree_threads(root: int) -> list[int]:
    """Thread ids (Linux tasks) of every live process of `root`'s tree."""
    try:
        top = psutil.Process(root)
        procs = [top, *top.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    tids = []
    for proc in procs:
        try:
            tids += [t.id for t in proc.threads()]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # exited meanwhile
    return tids


def pin_tree(root: int, cpus: set[int]) -> int:
    """Pin every thread of `root`'s process tree to `cpus`; the number of threads pinned.

    sched_setaffinity sets one thread: each thread of each process is set, so the threads a
    JVM or Paddle has already started move too (what `taskset -a -p` does); what they start
    later inherits the mask. Walked again until no new thread shows up (a process forked
    while the walk ran)."""
    done: set[int] = set()
    for _ in range(5):
        fresh = [t for t in tree_threads(root) if t not in done]
        if not fresh:
            break
        for tid in fresh:
            with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                os.sched_setaffinity(tid, cpus)
                done.add(tid)
    return len(done)


def misplaced(root: int, cpus: set[int]) -> int:
    """Threads of `root`'s tree whose CPU mask is not `cpus`."""
    off = 0
    for tid in tree_threads(root):
        with contextlib.suppress(ProcessLookupError):
            off += os.sched_getaffinity(tid) != cpus
    return off


@contextlib.contextmanager
def spawning_on(cpus: set[int] | None):
    """Processes started inside run on `cpus`: this thread's mask, inherited by what it
    forks, restored after (None: no change)."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@contextlib.contextmanager
def fileserver(root: Path):
    port = free_port()
    with running_fileserver(root, port, TOKEN) as proc:
        yield proc.pid, f"http://127.0.0.1:{port}"


def values(work: Path, name: str, url: str, ugi: str, threads: int) -> Path:
    data = {"path": url, "slots": SLOTS, "startDateHour": HOUR, "endDateHour": HOUR}
    if ugi:
        data["hdfsUgi"] = ugi
    path = work / f"{name}.yaml"
    doc = {"global": {"data": data, "modelStore": f"file://{work / 'store' / name}"}}
    doc["trainer"] = {"trainer": {"threads": threads}}
    path.write_text(yaml.safe_dump(doc))
    return path


def one_round(
    work: Path, source: dict, threads: int, task_mib: float, k: int, pin: dict | None
) -> dict:
    name = f"{source['name']}-{k}"
    shutil.rmtree(work / "store" / name, ignore_errors=True)
    job = ElasticJob(
        values(work, name, source["url"], source["ugi"], threads),
        work / "logs" / name,
        pservers=1,
        trainers=1,
        lease_seconds=30.0,
        task_mb=task_mib,
    )
    load0 = os.getloadavg()[0]
    job_cpus = pin["job"] if pin else None
    with contextlib.ExitStack() as running:
        with spawning_on(job_cpus):  # every role inherits the job's CPUs from its start
            running.enter_context(job)
        client = job.client()
        deadline = time.monotonic() + 600
        while "0" not in client.progress()["trainers"]:  # started up, asking for work
            if time.monotonic() > deadline:
                raise SystemExit(f"{name}: the trainer never asked for work")
            time.sleep(0.2)
        pids = {r: job.sup.pid(r) for r in ("trainer-0", "pserver-0", "coordinator")}
        if source.get("pid"):
            pids["store"] = source["pid"]
        pinned = {}
        if pin:
            pinned = {
                r: pin_tree(p, pin["store" if r == "store" else "job"]) for r, p in pids.items()
            }
        source["ready"](True)
        while not client.progress()["partitions"]:  # the coordinator found the hour
            time.sleep(0.02)
        before = {r: tree_cpu(p) for r, p in pids.items()}
        t0 = time.monotonic()
        while True:
            progress = client.progress()
            parts = progress["partitions"]
            if parts and parts[0]["done"] == parts[0]["tasks"]:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{name}: the hour was not trained in time")
            time.sleep(0.05)
        after = {r: tree_cpu(p) for r, p in pids.items()}
        seconds = time.monotonic() - t0
        off = {}
        if pin:
            off = {
                r: misplaced(p, pin["store" if r == "store" else "job"]) for r, p in pids.items()
            }
        with spawning_on(job_cpus):  # a role restarted by job.wait stays on the job's CPUs
            job.wait(600)
    source["ready"](False)
    cpu = {r: after[r] - before[r] for r in pids}
    samples = progress["samples"]
    job_cpu = cpu["trainer-0"] + cpu["pserver-0"] + cpu["coordinator"]
    logs = (job.log_dir / "trainer-0.log").read_text()
    assert "(Python reader)" not in logs and "(native reader)" in logs, name
    return {
        "source": source["name"],
        "samples": samples,
        "seconds": seconds,
        "rate": samples / seconds,
        "cpu": cpu,
        "per_cpu": samples / job_cpu,
        "per_cpu_store": samples / (job_cpu + cpu.get("store", 0.0)),
        "load": (load0, os.getloadavg()[0]),
        "pinned": pinned,
        "misplaced": {r: n for r, n in off.items() if n},
    }


def put_retrying(local: Path, url: str, tries: int = 5) -> None:
    """Upload to HDFS; a fresh MiniDFSCluster answers NotReplicatedYetException for a
    moment (seen once), which a retry outlives."""
    for i in range(tries):
        try:
            return storage.put_file(local, url, UGI)
        except Exception:  # noqa: BLE001 - hdfs-native's RuntimeError, or wrapped
            if i == tries - 1:
                raise
            time.sleep(2)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main() -> None:
    global SLOTS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--files", type=int, default=2)
    ap.add_argument("--slots", type=int, default=26)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sources", default="local,fileserver,hdfs,s3")
    ap.add_argument("--work", type=Path, default=None)
    available = os.sched_getaffinity(0)
    ap.add_argument(
        "--pin",
        default="job=0,store=1" if {0, 1} <= available else "none",
        help="CPUs of the job (coordinator, pserver, trainer and their children) and of the "
        "store server and this driver: job=CPUS,store=CPUS (a side left out gets the other "
        "CPUs) or none; default job=0,store=1 when CPUs 0 and 1 are available, else none",
    )
    args = ap.parse_args()
    try:
        pin = parse_pin(args.pin, available)
    except ValueError as exc:
        ap.error(f"--pin {exc}")
    SLOTS = list(range(args.slots))
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-sources-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "data"
    if not (data / HOUR / C.DONEFILE).exists() and not (data / HOUR).exists():
        subprocess.run(
            [*ECTL, "data", "generate", f"file://{data}", "--hours", "1", "--lines",
             str(args.lines), "--files", str(args.files), "--slots", f"0-{args.slots - 1}",
             "--seed", "0"],
            check=True, capture_output=True,
        )  # fmt: skip
    (data / HOUR / C.DONEFILE).touch()
    parts = sorted((data / HOUR).glob("part-*"))
    size = sum(p.stat().st_size for p in parts)
    task_mib = local_task_mib(
        yaml.safe_load(values(work, "probe", str(data), "", 2).read_text()), 1
    )
    local_done = data / HOUR / C.DONEFILE
    local_done.unlink()
    os.environ[C.ENV_FILESERVER_TOKEN] = TOKEN  # the trainers' and the coordinator's
    wanted = args.sources.split(",")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    print(f"commit {head}; command: {' '.join(sys.argv)}")
    print(f"data: {len(parts)} files, {size / 2**20:.1f} MiB, {args.lines:,} lines, "
          f"{args.slots} slots; tasks of {task_mib:.2f} MiB; threads {args.threads}; "
          f"load average {os.getloadavg()}")  # fmt: skip
    if pin:
        print(f"pinning: job (coordinator, pserver, trainer and their children) on CPUs "
              f"{cpu_list(pin['job'])}; store server and this driver on CPUs "
              f"{cpu_list(pin['store'])} (of {cpu_list(available)})")  # fmt: skip
        os.sched_setaffinity(0, pin["store"])  # what this driver starts from here inherits it
    else:
        print(f"pinning: none (every process on CPUs {cpu_list(available)})")

    def local_ready(on: bool) -> None:
        local_done.touch() if on else local_done.unlink(missing_ok=True)

    with contextlib.ExitStack() as stack:
        sources = []
        if "local" in wanted:
            sources.append({"name": "local", "url": f"file://{data}", "ugi": "",
                            "ready": local_ready})  # fmt: skip
        if "fileserver" in wanted:
            pid, url = stack.enter_context(fileserver(work))
            sources.append({"name": "fileserver", "url": f"{url}/data", "ugi": "", "pid": pid,
                            "ready": local_ready})  # fmt: skip
        if "hdfs" in wanted:
            hdfs = MiniHdfs(work / "minihdfs")
            hdfs.start()
            stack.callback(hdfs.stop)
            base = hdfs.make_open_dir("/bench")
            for p in parts:
                put_retrying(p, storage.join(base, "data", HOUR, p.name))
            done_url = storage.join(base, "data", HOUR, C.DONEFILE)

            def hdfs_ready(on: bool, done_url=done_url) -> None:
                fs, path = storage.url_to_fs(done_url, UGI)
                if on:
                    storage.write_bytes(done_url, b"", UGI)
                elif fs.exists(path):
                    fs.rm(path)

            sources.append({"name": "hdfs", "url": storage.join(base, "data"), "ugi": UGI,
                            "pid": hdfs._proc.pid, "ready": hdfs_ready})  # fmt: skip
        if "s3" in wanted:
            # a fresh server folder: SeaweedFS refused uploads into one left by a run before
            # ("failed to pick 1 from 0 node candidates", InternalError on UploadPart)
            shutil.rmtree(work / "seaweed", ignore_errors=True)
            s3 = SeaweedS3(work / "seaweed")
            s3.start()
            stack.callback(s3.stop)
            # every role of every round reads the S3_* variables from the environment
            stack.enter_context(s3_env(s3))
            s3_base = f"s3://{TEST_BUCKET}/bench"
            for p in parts:
                storage.put_file(p, storage.join(s3_base, "data", HOUR, p.name))
            s3_done = storage.join(s3_base, "data", HOUR, C.DONEFILE)

            def s3_ready(on: bool, done_url=s3_done) -> None:
                fs, path = storage.url_to_fs(done_url)
                if on:
                    storage.write_bytes(done_url, b"")
                    return
                fs.invalidate_cache()  # s3fs lists from a cache; the object is there
                fs.rm(path)

            sources.append({"name": "s3", "url": storage.join(s3_base, "data"), "ugi": "",
                            "pid": s3.pid, "ready": s3_ready})  # fmt: skip
        results = []
        for k in range(args.rounds):
            order = sources[k % len(sources) :] + sources[: k % len(sources)]
            for source in order:
                r = one_round(work, source, args.threads, task_mib, k, pin)
                results.append(r)
                cpu = ", ".join(f"{n} {s:.1f}" for n, s in r["cpu"].items())
                if r["misplaced"]:
                    print(f"round {k} {r['source']}: threads off their CPUs at the window's "
                          f"end: {r['misplaced']}", flush=True)  # fmt: skip
                print(f"round {k} {r['source']}: {r['samples']:,} samples in "
                      f"{r['seconds']:.1f}s = {r['rate']:,.0f}/s; CPU-s {cpu}; "
                      f"{r['per_cpu']:,.0f} samples per CPU-s; load average "
                      f"{r['load'][0]:.1f} -> {r['load'][1]:.1f}"
                      + (f"; threads pinned {sum(r['pinned'].values())}" if pin else ""),
                      flush=True)  # fmt: skip
    by = {s["name"]: [r for r in results if r["source"] == s["name"]] for s in sources}
    print(f"\nload average at the end {os.getloadavg()}; {args.rounds} rounds, "
          "median (min-max)\n")  # fmt: skip
    print("| source | samples/s per trainer | samples per CPU-s (job) | trainer CPU-s | "
          "pserver CPU-s | coordinator CPU-s | store server CPU-s | samples per CPU-s "
          "(job + store) | load average |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for name, rs in by.items():

        def med(role: str, rs=rs) -> str:
            vals = [r["cpu"].get(role, 0.0) for r in rs]
            return f"{statistics.median(vals):.1f}" if role in rs[0]["cpu"] else "-"

        loads = [x for r in rs for x in r["load"]]
        print(f"| {name} | {spread([r['rate'] for r in rs])} | "
              f"{spread([r['per_cpu'] for r in rs])} | {med('trainer-0')} | "
              f"{med('pserver-0')} | {med('coordinator')} | {med('store')} | "
              f"{spread([r['per_cpu_store'] for r in rs])} | "
              f"{min(loads):.1f}-{max(loads):.1f} |")  # fmt: skip
    if "local" not in by:
        return
    base_cpu = statistics.median(r["per_cpu"] for r in by["local"])
    base_rate = statistics.median(r["rate"] for r in by["local"])
    print()
    for name, rs in by.items():
        if name != "local":
            with_store = statistics.median(r["per_cpu_store"] for r in rs) / base_cpu
            print(f"{name} vs local samples per CPU-second, store server included = "
                  f"{with_store:.2f}x")  # fmt: skip
    for name, rs in by.items():
        if name == "local":
            continue
        ratio = statistics.median(r["per_cpu"] for r in rs) / base_cpu
        print(f"ratio: {name} vs local samples per CPU-second = {ratio:.2f}x")
        print(f"ratio: {name} vs local samples/s = "
              f"{statistics.median(r['rate'] for r in rs) / base_rate:.2f}x")  # fmt: skip


SLOTS: list[int] = []

if __name__ == "__main__":
    main()
