"""The steps of docs/install.md, run as written (issue 27: the install guide is tried on the
test cluster). Each fenced block whose info string is `bash guide:<step>` is one step;
`run(step, ...)` runs it with bash (-e, -u, pipefail) in a work folder, with the guide's
shell variables (REGISTRY, CHART, RELEASE, NS, HDFS, HDFS_UGI) set to the test cluster's,
`ectl` and `helm` on PATH and the kubeconfig of the cluster."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import REPO

GUIDE = REPO / "docs" / "install.md"
BLOCK = re.compile(r"^```bash guide:(?P<step>[a-z-]+)\n(?P<body>.*?)^```$", re.S | re.M)


def steps() -> dict[str, str]:
    found: dict[str, str] = {}
    for m in BLOCK.finditer(GUIDE.read_text()):
        assert m["step"] not in found, f"docs/install.md: step {m['step']} twice"
        found[m["step"]] = m["body"]
    return found


def workdir(tmp: Path) -> Path:
    """A folder like a user's checkout for the guide: `values/` of this repository."""
    tmp.mkdir(parents=True, exist_ok=True)
    if not (tmp / "values").exists():
        (tmp / "values").symlink_to(REPO / "values")
    return tmp


def run(step: str, cwd: Path, env: dict, variables: dict, timeout: float = 900, diagnostics=None):
    """Run the guide's block `step`; a failure fails the test with its output."""
    body = steps()[step]
    path = f"{Path(sys.executable).parent}:{REPO / '.tools' / 'bin'}:{env.get('PATH', '')}"
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", body],
        cwd=cwd, env={**env, **variables, "PATH": path},
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(
            f"docs/install.md step {step} exited {proc.returncode}:\n{body}\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\n{diagnostics() if diagnostics else ''}",
            pytrace=False,
        )
    return proc
