"""The project's fileserver as a real process (`ectl fileserver`), for tests and benches.

`running_fileserver(root, port, token)` starts it serving `root` with reads protected by
`token` (`--protect-reads`: what a release's data store does), waits until it listens,
and kills it on exit; stopping it early (`proc.kill()`) and starting it again on the same
port models a store that goes away.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from elasticctr.constants import ENV_FILESERVER_TOKEN
from elasticctr.net import wait_for_port


@contextlib.contextmanager
def running_fileserver(root: Path, port: int, token: str) -> Iterator[subprocess.Popen]:
    """`ectl fileserver --root ROOT --port PORT --protect-reads`, log beside `root`."""
    with open(Path(root).parent / f"fileserver-{port}.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "elasticctr.cli.main", "fileserver", "--root", str(root),
             "--port", str(port), "--protect-reads"],
            env={**os.environ, ENV_FILESERVER_TOKEN: token},
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        wait_for_port("127.0.0.1", port, timeout=60, what="fileserver",
                      alive=lambda: proc.poll() is None)  # fmt: skip
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
