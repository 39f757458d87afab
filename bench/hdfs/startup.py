"""Start-up time and memory of the test HDFS (scripts/hdfs/minihdfs), tuned vs JVM defaults.

The peer is the same MiniDFSCluster under the JVM's default flags (G1, full JIT, heap
sized from RAM): the launcher's small-heap/C1-only flags must not cost start-up time.
Each run: process start -> READY line -> first real hdfs-native write+read round-trip
(what the pytest fixture waits for), resident memory once ready, and the clean-stop time.
Also a round-trip of one `--mib` MiB file through elasticctr.data.storage, HDFS vs local.

    .venv/bin/python bench/hdfs/startup.py --runs 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.hdfs_fixture import MiniHdfs  # noqa: E402

from elasticctr.data import storage  # noqa: E402

DEFAULT_JVM = "-XX:+UseG1GC"  # the JVM default collector; everything else left as shipped


def rss_mib(pid: int) -> float:
    """Resident memory of the JVM (the launcher execs java, so the pid is the JVM's)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def round_trip_seconds(url: str, data: bytes) -> float:
    """Write `data` to `url` and read it back through elasticctr.data.storage (seconds)."""
    started = time.monotonic()
    storage.write_bytes(url, data)
    assert storage.read_bytes(url) == data
    return time.monotonic() - started


def one_run(java_opts: str | None, mib: int) -> dict[str, float]:
    if java_opts is None:
        os.environ.pop("MINIHDFS_JAVA_OPTS", None)
    else:
        os.environ["MINIHDFS_JAVA_OPTS"] = java_opts
    with tempfile.TemporaryDirectory() as tmp:
        cluster = MiniHdfs(Path(tmp) / "c")
        t0 = time.monotonic()
        cluster.start()
        ready = time.monotonic() - t0
        rss = rss_mib(cluster.pid)
        data = os.urandom(mib << 20)
        hdfs_rt = round_trip_seconds(cluster.make_open_dir("/bench") + "/blob", data)
        local_rt = round_trip_seconds(str(Path(tmp) / "blob"), data)
        t3 = time.monotonic()
        cluster.stop()
        stop = time.monotonic() - t3
    return {"ready_s": ready, "rss_mib": rss, "stop_s": stop, "hdfs_rt": hdfs_rt, "local": local_rt}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mib", type=int, default=32, help="size of the round-trip file")
    args = ap.parse_args()
    results: dict[str, list[dict[str, float]]] = {"tuned": [], "defaults": []}
    for _ in range(args.runs):  # interleaved, so load changes hit both alike
        results["tuned"].append(one_run(None, args.mib))
        results["defaults"].append(one_run(DEFAULT_JVM, args.mib))

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    print(f"minihdfs, median of {args.runs} runs (load average {os.getloadavg()[0]:.1f})")
    print(f"{'':28}{'tuned':>10}{'JVM defaults':>14}{'ratio':>8}")
    for key, label in (
        ("ready_s", "start -> serves writes (s)"),
        ("rss_mib", "RSS when ready (MiB)"),
        ("stop_s", "clean stop (s)"),
    ):
        a, b = med("tuned", key), med("defaults", key)
        print(f"{label:28}{a:10.2f}{b:14.2f}{a / b:8.2f}")
    h, loc = med("tuned", "hdfs_rt"), med("tuned", "local")
    print(f"\n{args.mib} MiB write+read via elasticctr.data.storage (tuned cluster)")
    print(f"{'':28}{'hdfs://':>10}{'local file':>14}{'ratio':>8}")
    print(f"{'round trip (s)':28}{h:10.2f}{loc:14.2f}{h / loc:8.1f}")
    print(f"{'MiB/s':28}{2 * args.mib / h:10.1f}{2 * args.mib / loc:14.1f}")


if __name__ == "__main__":
    main()
