"""`ectl validate` vs helm's own values check, on the shipped values files.

helm checks values.schema.json while rendering (`helm template`, also `helm lint`); ectl
checks the same schemas plus the cross-field rules without rendering. Printed side by
side: median wall time of the console commands (process start included, what a user
waits for) and of the in-process check (what `ectl install` adds before calling helm).

    .venv/bin/python bench/cli/bench_validate.py [--repeat 5] [--ectl PATH] [values/demo.yaml ...]

`--ectl` times another installed `ectl` console script, e.g. one in a venv of the wheel
with only the `kube` extra, as users install it (docs/cli.md, Measured); the default is
this interpreter's `python -m elasticctr.cli.main`.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "elasticctr"


def wall(cmd: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return statistics.median(times)


def in_process(files: list[Path], repeat: int) -> float:
    from elasticctr import values

    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        problems = values.validate_files(files)
        times.append(time.perf_counter() - start)
        if problems:
            sys.exit(f"{files}: {problems}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ectl", help="the ectl to time (default: this interpreter's)")
    args = parser.parse_args()
    files = args.files or sorted((REPO / "values").glob("*.yaml"))
    helm = shutil.which("helm") or str(REPO / ".tools" / "bin" / "helm")
    ectl = [args.ectl] if args.ectl else [sys.executable, "-m", "elasticctr.cli.main"]
    print(
        f"{'values file':<22}{'ectl validate':>15}{'helm template':>15}{'ratio':>8}"
        f"{'in-process':>13}{'helm lint':>12}{'ratio':>8}"
    )
    for f in files:
        e = wall([*ectl, "validate", str(f)], args.repeat)
        h = wall([helm, "template", "r", str(CHART), "-f", str(f)], args.repeat)
        lint = wall([helm, "lint", str(CHART), "-f", str(f)], args.repeat)
        p = in_process([f], args.repeat)
        print(
            f"{f.name:<22}{e * 1000:>13.0f}ms{h * 1000:>13.0f}ms{e / h:>8.2f}"
            f"{p * 1000:>11.1f}ms{lint * 1000:>10.0f}ms{p / lint:>8.3f}"
        )
    start_e = wall([*ectl, "--version"], args.repeat)
    start_h = wall([helm, "version", "--short"], args.repeat)
    print(
        f"{'startup (--version)':<22}{start_e * 1000:>13.0f}ms{start_h * 1000:>13.0f}ms"
        f"{start_e / start_h:>8.2f}"
    )
    start_help = wall([*ectl, "--help"], args.repeat)
    help_h = wall([helm, "--help"], args.repeat)
    print(
        f"{'--help':<22}{start_help * 1000:>13.0f}ms{help_h * 1000:>13.0f}ms"
        f"{start_help / help_h:>8.2f}"
    )
    print("ratio = ectl / helm (lower is faster); ectl also applies the cross-field rules")


if __name__ == "__main__":
    main()
