"""Real server processes of the four services with the HTTP layer's limits set small, raw
socket helpers, and a bounded load loop; used by test_http_hardening.py and
bench/http/load.py (which prints the figures recorded in docs/http.md)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from elasticctr.httpd import ENV_HEADER_TIMEOUT, ENV_IDLE_TIMEOUT, ENV_MAX_CONNECTIONS
from elasticctr.net import free_port, wait_for_port

ECTL = [sys.executable, "-m", "elasticctr.cli.main"]


def layer_env(header: float, idle: float, cap: int) -> dict[str, str]:
    return {
        ENV_HEADER_TIMEOUT: str(header),
        ENV_IDLE_TIMEOUT: str(idle),
        ENV_MAX_CONNECTIONS: str(cap),
    }


class Proc:
    """One `ectl ...` server process on a free loopback port."""

    def __init__(self, name: str, args: list[str], log: Path, env: dict[str, str]):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.fh = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [*ECTL, *args, "--port", str(self.port)],
            stdout=self.fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "GLOG_minloglevel": "2", "PYTHONUNBUFFERED": "1", **env},
            start_new_session=True,
            cwd=log.parent,
        )
        wait_for_port(
            "127.0.0.1", self.port, timeout=120, what=name, alive=lambda: self.proc.poll() is None
        )

    def text(self) -> str:
        self.fh.flush()
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.fh.close()


# The load tests guard that nothing is lost or corrupted, not latency: a request may wait
# long on a loaded machine (p99 5.0 s seen for the fileserver under make test's load).
LOAD_TIMEOUT = 60.0


# --- raw sockets ------------------------------------------------------------------------
def connect(port: int, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def read_until_close(sock: socket.socket, limit: float = 10.0) -> tuple[bytes, float]:
    """Everything the server sends until it closes; (bytes, seconds waited)."""
    t0 = time.monotonic()
    out = b""
    sock.settimeout(limit)
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except (ConnectionResetError, TimeoutError):
        pass  # reset, or still open at the limit: the caller judges what arrived
    return out, time.monotonic() - t0


def exchange(port: int, data: bytes, limit: float = 10.0) -> bytes:
    """Send raw bytes, read until the server closes the connection."""
    with connect(port) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before reading everything
        return read_until_close(s, limit)[0]


def statuses(raw: bytes) -> list[int]:
    """Status codes of every HTTP/1.1 response in a raw byte stream."""
    out = []
    for line in raw.split(b"\r\n"):
        if line.startswith(b"HTTP/1.1 ") and len(line) >= 12 and line[9:12].isdigit():
            out.append(int(line[9:12]))
    return out


# Request-smuggling heads: each must be refused with one 400/501 and a close (RFC 9112).
SMUGGLE = {
    "CL.CL": b"Content-Length: 4\r\nContent-Length: 40\r\n\r\nabcd",
    "CL.TE": b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "TE.CL": b"Transfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n",
    "TE.TE": b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n",
    "TE-gzip": b"Transfer-Encoding: gzip\r\nContent-Length: 4\r\n\r\nabcd",
    "TE-xchunked": b"Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
    "TE-space-colon": b"Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
    "TE-folded": b"X-A: 1\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n",
}
SMUGGLED = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def smuggle_refused(
    port: int, post_path: str, auth: dict[str, str], case: str, limit: float = 10.0
) -> bool:
    """True when the case got exactly one 400/501 answer (the hidden request unanswered)."""
    h = "".join(f"{k}: {v}\r\n" for k, v in auth.items())
    head = f"POST {post_path} HTTP/1.1\r\nHost: x\r\n{h}".encode()
    got = statuses(exchange(port, head + SMUGGLE[case] + SMUGGLED, limit=limit))
    return len(got) == 1 and got[0] in (400, 501)


# --- bounded load -----------------------------------------------------------------------
@dataclass
class LoadResult:
    name: str
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    first_error: str = ""

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def p(self, q: float) -> float:
        return float(np.percentile(self.latencies, q)) * 1e3 if self.latencies else float("nan")

    def line(self) -> str:
        return (
            f"{self.name:12s} {self.requests:7d} req  {self.throughput:8.0f} req/s  "
            f"p50 {self.p(50):7.2f} ms  p99 {self.p(99):7.2f} ms  errors {self.errors}"
        )


def run_load(
    name: str,
    worker_factory: Callable[[int], Callable[[int], None]],
    *,
    threads: int,
    requests_per_thread: int,
) -> LoadResult:
    """`threads` threads each call `worker(i)` `requests_per_thread` times; a worker
    raises on any wrong, lost or failed answer (counted as an error)."""
    res = LoadResult(name)
    lock = threading.Lock()

    def run(t: int) -> None:
        work = worker_factory(t)
        lat: list[float] = []
        errs, first = 0, ""
        for i in range(requests_per_thread):
            t0 = time.perf_counter()
            try:
                work(i)
            except Exception as exc:  # counted and reported, the loop goes on
                errs += 1
                first = first or f"{type(exc).__name__}: {exc}"
            lat.append(time.perf_counter() - t0)
        with lock:
            res.latencies += lat
            res.requests += len(lat)
            res.errors += errs
            res.first_error = res.first_error or first

    pool = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    t0 = time.perf_counter()
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    res.seconds = time.perf_counter() - t0
    return res


# --- the four services ----------------------------------------------------------------
TOKEN = "adversarial-t0ken"
VERSION = "20200401/00"


@dataclass
class Service:
    """A running service and what the suite needs to know to attack and load it."""

    name: str
    proc: Proc
    post_path: str  # a POST route whose body the service reads
    auth: dict[str, str]  # headers that pass its token check
    protected: tuple[str, str] | None  # (method, path) that needs the token
    worker_factory: Callable[[int], Callable[[int], None]] | None = None
    check: Callable[[], None] | None = None  # after the load: nothing lost or corrupted

    @property
    def port(self) -> int:
        return self.proc.port


def start_cube(tmp: Path, env: dict[str, str]) -> Service:
    from _cube_procs import make_version, random_keys, version_rows

    from elasticctr.cube.builder import build_version
    from elasticctr.cube.client import ShardClient
    from elasticctr.cube.modelstore import verify_version

    keys = random_keys(5000)
    vdir = make_version(tmp / "store", VERSION, keys, 1)
    build_version(verify_version(vdir, VERSION), tmp / "cube", 1)
    proc = Proc(
        "cube",
        ["cube", "server", "--cube-root", str(tmp / "cube"), "--state-dir", str(tmp / "state"),
         "--shard", "0", "--num-shards", "1"],
        tmp / "cube.log",
        {**env, "ELASTICCTR_CUBE_ADMIN_TOKEN": TOKEN},
    )  # fmt: skip
    admin = ShardClient(proc.url, token=TOKEN)
    admin.load(VERSION)
    admin.commit(VERSION)
    admin.close()

    def factory(t: int):
        client = ShardClient(proc.url, token="")
        rng = np.random.default_rng(t)

        def work(i: int) -> None:
            batch = keys[rng.integers(0, keys.size, 100)]
            res = client.lookup(batch)
            if res.version != VERSION or not np.array_equal(res.rows, version_rows(batch, 1)):
                raise AssertionError("wrong rows")

        return work

    return Service(
        "cube", proc, "/v1/lookup", {"Authorization": f"Bearer {TOKEN}"},
        ("POST", "/admin/commit"), factory,
    )  # fmt: skip


def start_serving(tmp: Path, env: dict[str, str], demo: Path) -> Service:
    import httpx

    from elasticctr.serving.testing import keys_of_file, write_version

    slots = list(range(27))
    write_version(
        tmp / "store", VERSION, slots=slots, dim=8, keys=keys_of_file(demo, slots), seed=1
    )
    (tmp / "token").write_text(TOKEN)
    proc = Proc(
        "serving",
        ["serve", "--store", str(tmp / "store"), "--version", VERSION, "--poll-interval", "0",
         "--token-file", str(tmp / "token"), "--max-body-bytes", "200000",
         "--cache", str(tmp / "cache")],
        tmp / "serve.log",
        env,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(proc.url + "/readyz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.proc.poll() is not None:
            raise RuntimeError(f"serving not ready: {proc.text()}")
        time.sleep(0.2)
    lines = demo.read_bytes().splitlines()[:200]
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "text/plain"}
    want = {}
    with httpx.Client(timeout=LOAD_TIMEOUT) as c:
        for j in range(0, len(lines), 10):
            r = c.post(
                proc.url + "/v1/predict", content=b"\n".join(lines[j : j + 10]), headers=auth
            )
            r.raise_for_status()
            want[j] = np.array(r.json()["probabilities"])

    def factory(t: int):
        client = httpx.Client(headers=auth, timeout=LOAD_TIMEOUT)

        def work(i: int) -> None:
            j = ((t * 7 + i) * 10) % len(lines)
            r = client.post(proc.url + "/v1/predict", content=b"\n".join(lines[j : j + 10]))
            if r.status_code != 200:
                raise AssertionError(f"{r.status_code} {r.text[:200]}")
            got = np.array(r.json()["probabilities"])
            if got.shape != want[j].shape or not np.allclose(got, want[j], atol=1e-6):
                raise AssertionError("wrong probabilities")

        return work

    return Service(
        "serving", proc, "/v1/predict", {"Authorization": f"Bearer {TOKEN}"},
        ("POST", "/v1/predict"), factory,
    )  # fmt: skip


def _payload(t: int, i: int) -> bytes:
    return (f"{t}:{i}:".encode() * 400)[: 3000 + (t * 31 + i) % 1000]


def start_fileserver(tmp: Path, env: dict[str, str]) -> Service:
    import httpx

    from elasticctr.constants import ENV_FILESERVER_TOKEN

    root = tmp / "root"
    root.mkdir()
    (root / "public.txt").write_text("public\n")
    (tmp / "outside").mkdir()
    (tmp / "outside" / "secret.txt").write_text("secret\n")
    (root / "escape").symlink_to(tmp / "outside")
    proc = Proc(
        "fileserver",
        ["fileserver", "--root", str(root), "--max-upload-bytes", "1000000"],
        tmp / "fileserver.log",
        {**env, ENV_FILESERVER_TOKEN: TOKEN},
    )
    auth = {"Authorization": f"Bearer {TOKEN}"}
    written: dict[str, bytes] = {}
    lock = threading.Lock()

    def factory(t: int):
        client = httpx.Client(headers=auth, timeout=LOAD_TIMEOUT)

        def work(i: int) -> None:
            path, data = f"/load/{t}/{i % 20}.bin", _payload(t, i)
            r = client.put(proc.url + path, content=data)
            if r.status_code != 201:
                raise AssertionError(f"PUT {r.status_code} {r.text[:200]}")
            with lock:
                written[path] = data
            got = client.get(proc.url + path)
            if got.status_code != 200 or got.content != data:
                raise AssertionError(f"GET {path}: {got.status_code}, not what was written")

        return work

    def check() -> None:
        for path, data in written.items():
            if (root / path.lstrip("/")).read_bytes() != data:
                raise AssertionError(f"{path} on disk is not the last write")
        leftovers = [p for p in root.rglob(".tmp-*")]
        if leftovers:
            raise AssertionError(f"temporary upload files left: {leftovers[:3]}")

    return Service(
        "fileserver", proc, "/up/x.bin", auth, ("PUT", "/up/x.bin"), factory, check
    )  # fmt: skip


def start_coordinator(tmp: Path, env: dict[str, str], files: int = 60) -> Service:
    from elasticctr.coordinator.client import CoordinatorClient

    hour = tmp / "data" / "20200401" / "00"
    hour.mkdir(parents=True)
    for i in range(files):
        (hour / f"part-{i:05d}").write_text("1 0 11:0 12:1\n" * 100)  # 1,400 bytes
    (hour / "donefile").write_text("")
    proc = Proc(
        "coordinator",
        ["coordinator", "--dataset-path", str(tmp / "data"), "--start", VERSION,
         "--end", VERSION, "--state-url", str(tmp / "progress.json"),
         "--poll-seconds", "0.2", "--lease-seconds", "60", "--task-mb", "0.001"],
        tmp / "coordinator.log",
        env,
    )  # fmt: skip
    done: dict[str, int] = {}
    lock = threading.Lock()

    def factory(t: int):
        client = CoordinatorClient(proc.url, f"trainer-{t}", retry_seconds=5)

        def work(i: int) -> None:
            got = client.lease()
            if got["kind"] == "task":
                task = got["task"]
                samples = task["end"] - task["start"]
                if not client.complete(got["lease"], samples)["accepted"]:
                    raise AssertionError("completion not accepted")
                with lock:
                    if task["id"] in done:
                        raise AssertionError(f"task {task['id']} completed twice")
                    done[task["id"]] = samples
            elif got["kind"] == "export":
                client.exported(got["partition"], got["partition"], checkpoint=False)
            elif got["kind"] not in ("wait", "finished"):
                raise AssertionError(f"unexpected answer {got}")

        return work

    def check() -> None:
        progress = CoordinatorClient(proc.url, "checker").progress()
        if progress["tasks_done"] != len(done) or progress["samples"] != sum(done.values()):
            raise AssertionError(
                f"coordinator counts {progress['tasks_done']} tasks / {progress['samples']} "
                f"samples, clients completed {len(done)} / {sum(done.values())}"
            )

    return Service(
        "coordinator", proc, "/v1/lease", {}, None, factory, check
    )  # fmt: skip
