"""Where a trainer's and a pserver's CPU goes while training (py-spy + per-thread CPU).

One run: generated data (or --data), `ectl train --local -p 1 -t 1` on it, and while the
trainer trains:
- py-spy samples the trainer's Python threads with native frames (`--native`): every
  sample of the main thread is put in one bucket by the innermost frame that names it
  (parsing, held-out hash, feed conversion, dense pull, sparse pull, sparse push, op
  execution, dataset pipeline, other);
- /proc/<pid>/task/*/stat gives the CPU time of EVERY thread of the trainer and the
  pserver (C++ threads py-spy cannot see: the PS client's and the communicator's
  send/recv threads, brpc workers, dataset reader threads), grouped by thread name.

  .venv/bin/python bench/train/profile_train.py --lines 100000 [--threads T]

Prints a table: CPU-seconds per part, their share, samples per CPU-second.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

BUCKETS = [  # (bucket, pattern on one frame), innermost frame first wins
    ("sparse pull (distributed_lookup_table)", r"PullSparse|DistributedLookupTable|pull_sparse"),
    ("sparse push (distributed_push_sparse)", r"PushSparse|DistributedPushSparse|push_sparse"),
    ("dense pull (_pull_all_dense)", r"_pull_all_dense|PullDense|pull_dense"),
    ("dense push (send ops -> communicator)", r"SendOp|\bSend\b|Communicator::Send|send_op"),
    ("parsing (Python parser)", r"elasticctr/data/parser\.py"),
    ("held-out hash (Python)", r"heldout_mask|elastic\.py.*take"),
    (
        "feed conversion (to_feed, LoDTensor)",
        r"to_feed|pad_empty|feed_slots|_feed_data|SetLoD|set_lod",
    ),
    ("dataset pipeline (train_from_dataset)", r"DataFeed|Dataset|train_from_dataset"),
    ("op execution (forward/backward/Adam)", r"Executor|executor\.py|RunImpl|OperatorBase|Kernel"),
]


TASK_LINE = re.compile(r"\): (\d+) samples in [\d.]+s; accepted True")
"""An elastic trainer's line for a task it trained (elasticctr.train.elastic)."""


def bucket_of(stack: list[str]) -> str:
    for frame in reversed(stack):  # innermost last in py-spy's raw format
        for name, pattern in BUCKETS:
            if re.search(pattern, frame):
                return name
    return "other (Python, idle waits)"


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread name of a process (all threads, C++ ones included)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = collections.Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        # Paddle's C++ threads keep the process name: tell the main thread by its id.
        name = "main thread" if task.name == str(pid) else f"thread {task.name}"
        out[name] += (int(fields[11]) + int(fields[12])) / tick
    return out


PERF_BUCKETS = [  # (bucket, pattern on a symbol of the self-time frame or its callers)
    (
        "parsing / feed (MultiSlot data feed, reader)",
        r"DataFeed|MultiSlot|strtoull|strtof|fgets|getline|LineFileReader|__strtoull|____strto",
    ),
    ("sparse pull", r"PullSparse|pull_sparse|DistributedLookupTable|LookupTable"),
    ("sparse push", r"PushSparse|push_sparse|DistributedPushSparse"),
    (
        "dense pull/push (communicator)",
        r"PullDense|PushDense|Communicator|SendByCommunicator|RecvByCommunicator|MergeVars",
    ),
    (
        "RPC (brpc, protobuf, sockets)",
        r"brpc|bthread|protobuf|google::|butil|Socket|__libc_send|__libc_recv|writev|readv|epoll",
    ),
    (
        "pserver tables (update, optimizer rules)",
        r"MemorySparseTable|MemoryDenseTable|SparseAccessor|SGDRule|DAdam|DenseOptimizer|CtrCommon",
    ),
    ("matmul (MKL/BLAS GEMM)", r"gemm|sgemm|mkl_blas|cblas|Gemm|GEMM|dnnl|jit_avx"),
    ("other op kernels", r"phi::|Kernel|paddle::operators|funcs::"),
    (
        "executor / scope / allocation",
        r"Executor|Scope|Allocat|malloc|free|memcpy|memset|Tensor|OperatorBase|RunImpl|InterpreterCore",
    ),
    ("Python interpreter", r"_PyEval|PyObject|python3|_Py"),
]


def perf_table(data: Path, pids: dict[str, int]) -> None:
    """Self time per bucket and process from `perf script` (first matching frame wins)."""
    out = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "pid,tid,ip,sym"],
        capture_output=True, text=True, errors="replace",
    ).stdout  # fmt: skip
    role_of = {str(p): r for r, p in pids.items()}
    counts: dict[str, collections.Counter] = {r: collections.Counter() for r in pids}
    stack: list[str] = []
    pid = None

    def flush() -> None:
        if pid in role_of and stack:
            name = next(
                (b for frame in stack for b, pat in PERF_BUCKETS if re.search(pat, frame)),
                "other (kernel, libc, unknown)",
            )
            counts[role_of[pid]][name] += 1

    for line in out.splitlines():
        if not line.strip():
            flush()
            stack, pid = [], None
        elif re.match(r"^\s*\d+/\d+\s*$", line):
            flush()
            stack, pid = [], line.split("/")[0].strip()
        else:
            stack.append(line.strip())
    flush()
    for role, c in counts.items():
        total = sum(c.values()) or 1
        print(f"\n| {role} (perf, every thread) | share of CPU samples |")
        print("|---|---|")
        for name, n in c.most_common():
            print(f"| {name} | {n / total:.0%} |")


def find_pid(role: str, marker: str) -> int | None:
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if marker in cmd and role in cmd:
            return proc.pid
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--files", type=int, default=2)
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=None, help="trainer.threads (default: values)")
    ap.add_argument("--rate", type=int, default=50, help="py-spy samples per second")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument(
        "--perf",
        action="store_true",
        help="also `perf record` both processes (every thread, C++ symbols) and group them",
    )
    args = ap.parse_args()
    import yaml

    work = args.work or Path(tempfile.mkdtemp(prefix="ectl-profile-"))
    work.mkdir(parents=True, exist_ok=True)
    data = args.data or work / "data"
    if not (data / "slot.conf").exists():
        cmd = [sys.executable, "-m", "elasticctr.cli.main", "data", "generate", f"file://{data}"]
        cmd += ["--hours", "1", "--lines", str(args.lines), "--files", str(args.files)]
        subprocess.run([*cmd, "--slots", "0-25", "--workers", "2"], check=True)
    slots = [int(s) for s in (data / "slot.conf").read_text().split()]
    trainer: dict = {"model": {"name": "dnn", "batchSize": 512}}
    if args.threads is not None:
        trainer["trainer"] = {"threads": args.threads}
    hours = sorted(p.parent.name and f"{p.parent.parent.name}/{p.parent.name}"
                   for p in data.glob("*/*/donefile"))  # fmt: skip
    values = {
        "global": {
            "data": {
                "path": f"file://{data}",
                "slots": slots,
                "startDateHour": hours[0],
                "endDateHour": hours[0],
            },
            "modelStore": "",
        },
        "trainer": trainer,
    }
    vpath = work / "values.yaml"
    vpath.write_text(yaml.safe_dump(values))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    cmd = [sys.executable, "-m", "elasticctr.cli.main", "train", "--local", "-p", "1", "-t", "1"]
    cmd += ["-f", str(vpath), "--log-dir", str(work / "logs"), "-q"]
    job = subprocess.Popen(cmd, env=env)
    pids: dict[str, int] = {}
    while len(pids) < 2 and job.poll() is None:
        for role in ("trainer", "pserver"):
            pids.setdefault(role, find_pid(role, str(vpath)) or 0) or pids.pop(role)
        time.sleep(0.2)
    log = work / "logs" / "trainer-0.log"
    while job.poll() is None and "worker initialised" not in (
        log.read_text() if log.exists() else ""
    ):
        time.sleep(0.1)
    before = {r: thread_cpu(p) for r, p in pids.items()}
    t0 = time.monotonic()
    raw = work / "trainer.pyspy.txt"
    spy = subprocess.Popen(
        [str(Path(sys.executable).with_name("py-spy")), "record", "--nonblocking", "-r",
         str(args.rate), "-f", "raw", "-o", str(raw), "--pid", str(pids["trainer"])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    perf = None
    if args.perf:
        perf = subprocess.Popen(
            ["perf", "record", "-F", "499", "-g", "-o", str(work / "perf.data"), "-p",
             f"{pids['trainer']},{pids['pserver']}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    # The training window ends with the hour's last task (an elastic trainer logs each
    # task's samples; then it flushes and the hour is exported): the CPU read when the
    # newest task line appeared, at most one poll (0.2 s) late; the export's is left out.
    after, wall, tasks = dict(before), 0.0, 0
    while job.poll() is None:
        text = log.read_text()
        if re.search(r"tables dumped|held-out auc", text):
            break
        snapshot = {r: thread_cpu(p) for r, p in pids.items()}
        done = len(TASK_LINE.findall(text))
        if done > tasks:
            after, wall, tasks = snapshot, time.monotonic() - t0, done
        time.sleep(0.2)
    spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    spy.wait()
    if perf is not None:
        perf.send_signal(signal.SIGINT)
        perf.wait()
    job.wait()
    samples = sum(int(n) for n in TASK_LINE.findall(log.read_text()))
    counts: collections.Counter = collections.Counter()
    if raw.exists():
        for line in raw.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            frames = stack.split(";")
            if not frames or "MainThread" not in frames[0] and "Thread" in frames[0]:
                pass
            counts[bucket_of(frames)] += int(n)
    total = sum(counts.values()) or 1
    cpu = {r: {k: after[r].get(k, 0) - before[r].get(k, 0) for k in after[r]} for r in pids}
    main_cpu = cpu["trainer"].get("main thread", 0.0)  # py-spy samples the main thread
    print(f"\n{samples} samples trained in {wall:.1f}s wall; load average {os.getloadavg()}")
    print(f"trainer CPU {sum(cpu['trainer'].values()):.1f}s, pserver CPU "
          f"{sum(cpu['pserver'].values()):.1f}s")  # fmt: skip
    print("\n| trainer main thread (py-spy) | CPU-s | share |")
    print("|---|---|---|")
    for name, n in counts.most_common():
        print(f"| {name} | {main_cpu * n / total:.2f} | {n / total:.0%} |")
    for role in ("trainer", "pserver"):
        print(f"\n| {role} threads (/proc) | CPU-s |")
        print("|---|---|")
        for name, secs in sorted(cpu[role].items(), key=lambda kv: -kv[1]):
            if secs >= 0.05:
                print(f"| {name} | {secs:.2f} |")
        others = sum(v for k, v in cpu[role].items() if k != "main thread")
        print(f"| all threads but the main one | {others:.2f} |")
    both = sum(cpu["trainer"].values()) + sum(cpu["pserver"].values())
    print(f"\nsamples per CPU-second (trainer + pserver): {samples / max(both, 1e-9):,.0f}")
    if perf is not None:
        perf_table(work / "perf.data", pids)
    (work / "profile.json").write_text(
        json.dumps({"samples": samples, "wall": wall, "buckets": counts, "cpu": cpu}, indent=1)
    )


if __name__ == "__main__":
    main()
