"""Start-up time, memory and a 32 MiB round trip of the test S3 server (SeaweedFS).

Each run starts `tests.s3_fixture.SeaweedS3` (what the integration tests use), times it
until a signed PUT/GET/DELETE answers, reads the server's resident memory, writes and
reads back `--mib` MiB through `elasticctr.data.storage` (s3:// vs a local file), and
stops it. Prints medians. Run: `.venv/bin/python bench/s3/startup.py --runs 3`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.hdfs.startup import round_trip_seconds  # noqa: E402
from tests.s3_fixture import TEST_BUCKET, SeaweedS3, s3_env  # noqa: E402


def tree_rss_mib(pid: int) -> float:
    """Resident memory of a process and its children (the supervisor shell and weed)."""
    out = subprocess.run(["ps", "-o", "rss=", "--ppid", str(pid), "-p", str(pid)],
                         capture_output=True, text=True, check=False).stdout  # fmt: skip
    return sum(int(x) for x in out.split()) / 1024


def one_run(mib: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        server = SeaweedS3(Path(tmp) / "s")
        t0 = time.monotonic()
        server.start()
        ready = time.monotonic() - t0
        rss = tree_rss_mib(server.pid)
        data = os.urandom(mib << 20)
        with s3_env(server):
            s3_rt = round_trip_seconds(f"s3://{TEST_BUCKET}/bench/blob", data)
        local_rt = round_trip_seconds(str(Path(tmp) / "blob"), data)
        t3 = time.monotonic()
        server.stop()
        stop = time.monotonic() - t3
    return {"ready_s": ready, "rss_mib": rss, "stop_s": stop, "s3_rt": s3_rt, "local": local_rt}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mib", type=int, default=32, help="size of the round-trip file")
    args = ap.parse_args()
    runs = [one_run(args.mib) for _ in range(args.runs)]

    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    print(f"seaweedfs S3, median of {args.runs} runs (load average {os.getloadavg()[0]:.1f})")
    print(f"{'start -> serves signed PUT/GET (s)':36}{med('ready_s'):8.2f}")
    print(f"{'RSS when ready (MiB)':36}{med('rss_mib'):8.1f}")
    print(f"{'stop: TERM, 2 s grace, KILL (s)':36}{med('stop_s'):8.2f}")
    s3, loc = med("s3_rt"), med("local")
    print(f"\n{args.mib} MiB write+read via elasticctr.data.storage")
    print(f"{'':28}{'s3://':>10}{'local file':>14}{'ratio':>8}")
    print(f"{'round trip (s)':28}{s3:10.2f}{loc:14.2f}{s3 / loc:8.1f}")
    print(f"{'MiB/s':28}{2 * args.mib / s3:10.1f}{2 * args.mib / loc:14.1f}")


if __name__ == "__main__":
    main()
