"""Native training path: Paddle's C++ dataset pipeline fed by a compiled reader.

`ectl-slotfeed` (slotfeed.c next to this file) turns one byte range of a data file into
Paddle's MultiSlot text; Paddle's `QueueDataset` runs it as the pipe command of every
file in its list and `exe.train_from_dataset(thread=T)` trains T Hogwild threads, so no
sample passes through Python. The file list holds small *spec files*, one per byte range
(`PATH\\tSTART\\tEND\\tSTATS\\tHELDOUT`): QueueDataset hands whole files to threads, so a
leased range is split into T sub-ranges (lines beginning in each; together exactly the
range) and each thread reads its own.

What stays as in the Python path (elasticctr.train.roles.to_feed): the same sparse table
(raw uint64 feasigns, padding feasign 0 for an empty slot), the same pooled input of the
dense model ([batch, slots, table_dim], sum per slot), the data's show/click per sample
into the table's statistics, the byte-range rule, the malformed-line bound per range.
The held-out samples (hash rule of elastic.heldout_mask) are written raw by the reader and
parsed by Python (10% of the data) for the evaluation of the exported version.

Where the Python reader still serves (`can_read`): files that are not local (hdfs://,
http(s)://, other fsspec URLs), compressed files, synthetic data, `trainer.threads: 0`,
and machines without a C compiler (the binary is built on first use, cached by the
source's hash in ~/.cache/elasticctr/native, or by `make native`).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from elasticctr import constants as C
from elasticctr.errors import EctlError, ValidationError

SOURCE = Path(__file__).with_name("slotfeed.c")
BINARY_NAME = "ectl-slotfeed"
MIN_SPLIT_BYTES = 64 << 10
"""A range is split for threads into pieces of at least this many bytes (the rest empty)."""
BATCHES: list[tuple] = []
"""(loss, prediction, label) of every batch the native pipeline trained (record_batch, a
py_func op of the graph), in the order the Hogwild threads ran them."""


def record_batch(loss, prob, label) -> None:
    """Called by Paddle's py_func op once per batch, from each training thread: one
    append of one tuple (atomic under the GIL: the threads' batches never mix)."""
    BATCHES.append(
        (
            float(np.asarray(loss).reshape(-1)[0]),
            np.array(prob, dtype=np.float32).reshape(-1),
            np.array(label).reshape(-1) > 0.5,
        )
    )


def cache_dir() -> Path:
    return Path(os.environ.get(C.ENV_NATIVE_CACHE) or Path.home() / ".cache/elasticctr/native")


def _source_digest() -> str:
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]


def build(out_dir: Path | None = None) -> Path:
    """Compile slotfeed.c (gcc/cc -O2) into the cache, once per source version."""
    out_dir = Path(out_dir or cache_dir())
    target = out_dir / f"{BINARY_NAME}-{_source_digest()}"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise EctlError(
            f"no C compiler to build {BINARY_NAME} (gcc or cc, or $CC)",
            hint="install gcc, or set trainer.threads: 0 for the Python reader",
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{target.name}.{os.getpid()}"
    done = subprocess.run(
        [cc, "-O2", "-std=gnu11", "-o", str(tmp), str(SOURCE)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise EctlError(f"building {BINARY_NAME} failed:\n{done.stderr.strip()}")
    os.replace(tmp, target)  # atomic: concurrent builders end with the same file
    return target


_BINARY: Path | None = None
_BINARY_ERROR: str | None = None


def binary() -> Path | None:
    """The reader binary, built on first use; None (reason in `unavailable()`) if it cannot be."""
    global _BINARY, _BINARY_ERROR
    if _BINARY is None and _BINARY_ERROR is None:
        explicit = os.environ.get(C.ENV_SLOTFEED)
        try:
            _BINARY = Path(explicit) if explicit else build()
        except EctlError as exc:
            _BINARY_ERROR = str(exc)
    return _BINARY


def unavailable() -> str | None:
    binary()
    return _BINARY_ERROR


def local_path(url: str) -> str | None:
    """The local path the native reader can map, or None (remote or compressed file)."""
    if url.startswith("file://"):
        url = url[len("file://") :]
    elif "://" in url:
        return None
    if url.endswith((".gz", ".bz2")):
        return None
    return url


def can_read(urls) -> bool:
    return all(local_path(u) is not None for u in urls) and binary() is not None


# --- ranges and statistics -------------------------------------------------------------


@dataclass(frozen=True)
class Range:
    path: str
    start: int = 0
    end: int = -1  # -1: end of file


def split(rng: Range, pieces: int) -> list[Range]:
    """`rng` as exactly `pieces` consecutive byte ranges, each >= MIN_SPLIT_BYTES or empty.

    Exactly `pieces`: Paddle's trainer refuses a file list shorter than its thread count
    ("pool.size() ... != thread_num_"); an empty range reads nothing."""
    end = os.path.getsize(rng.path) if rng.end < 0 else rng.end
    size = max(0, end - rng.start)
    n = max(1, min(pieces, size // MIN_SPLIT_BYTES))
    cuts = [rng.start + size * i // n for i in range(n + 1)]
    cuts += [end] * (pieces - n)
    return [Range(rng.path, cuts[i], cuts[i + 1]) for i in range(pieces)]


@dataclass
class RangeStats:
    source: str
    lines: int = 0
    samples: int = 0
    blank: int = 0
    malformed: int = 0
    ignored: int = 0
    heldout: int = 0
    emitted: int = 0
    stopped: int = 0  # 1: the lease was lost, the range was not read to its end
    bad_offsets: list[int] = field(default_factory=list)

    @classmethod
    def read(cls, source: str, path: Path) -> RangeStats:
        if not path.is_file():
            raise EctlError(f"{BINARY_NAME} wrote no statistics for {source} (did it crash?)")
        v = [int(x) for x in path.read_text().split()]
        return cls(source, *v[:8], bad_offsets=v[8:])

    def add(self, other: RangeStats) -> None:
        for k in ("lines", "samples", "blank", "malformed", "ignored", "heldout", "emitted"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.stopped = max(self.stopped, other.stopped)
        self.bad_offsets.extend(other.bad_offsets[: max(0, 5 - len(self.bad_offsets))])

    def check(self, path: str, max_error_rate: float | None) -> None:
        """The Python parser's bound (FileStats.check), with the bad lines diagnosed."""
        counted = self.lines - self.blank
        if max_error_rate is None or not self.malformed or not counted:
            return
        rate = self.malformed / counted
        if rate <= max_error_rate:
            return
        from elasticctr.data.parser import diagnose_line

        examples = []
        with open(path, "rb") as fh:
            for off in self.bad_offsets:
                fh.seek(off)
                found = diagnose_line(fh.readline())
                examples.append(f"{self.source}@{off}: {found[1] if found else 'rejected'}")
        raise ValidationError(
            f"{self.source}: {self.malformed} of {counted} lines malformed ({rate:.2%}, more "
            f"than the allowed {max_error_rate:.2%})",
            problems=examples,
            hint="fix or drop the bad lines, or raise global.data.maxErrorRate",
        )


# --- the dataset run -------------------------------------------------------------------


class Lease:
    """The file through which an elastic trainer tells its readers that its lease lives.

    `renew()` (touch) after every heartbeat the coordinator accepted, `lose()` (remove)
    when one is refused. A reader stops at its next 64 KiB of output when the file is
    gone or older than `seconds` (the lease period: no accepted heartbeat for that long
    means the coordinator expired the lease too); ectl-slotfeed's --lease-file."""

    def __init__(self, path: Path, seconds: float):
        self.path, self.seconds = Path(path), float(seconds)
        if not self.seconds > 0:
            raise EctlError(f"lease seconds must be > 0, got {seconds!r}")

    def renew(self) -> None:
        self.path.touch()  # creates it, or sets its mtime to now

    def lose(self) -> None:
        self.path.unlink(missing_ok=True)


@dataclass
class Result:
    stats: dict[str, RangeStats]  # per source range (its label)
    heldout_text: bytes  # raw held-out lines ('save'/'only')
    seconds: float
    losses: list[float]
    ticks: int = 0  # side-thread periods that ran (dense pulls)
    labels: list = field(default_factory=list)  # per batch: clicks (bool)
    probs: list = field(default_factory=list)  # per batch: predictions before the update

    @property
    def trained(self) -> int:
        return sum(s.emitted for s in self.stats.values())

    @property
    def stopped(self) -> bool:
        """The reader stopped before the end of a range: the lease was lost."""
        return any(s.stopped for s in self.stats.values())


class NativeFeed:
    """Runs `train_from_dataset` over byte ranges with `threads` Hogwild threads."""

    def __init__(self, slots, sparse_dim: int | None, use_vars, threads: int, batch_size: int):
        self.slots = [int(s) for s in slots]
        self.sparse_dim = int(sparse_dim or 0)
        self.use_vars = use_vars
        self.threads = max(1, int(threads))
        self.batch_size = int(batch_size)
        self.exe_binary = binary()
        if self.exe_binary is None:
            raise EctlError(f"native reader unavailable: {unavailable()}")
        self.workdir = Path(tempfile.mkdtemp(prefix="ectl-native-"))

    def close(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    def pipe_command(self, heldout: str, lease: Lease | None = None) -> str:
        cmd = f"{self.exe_binary} --slots {','.join(map(str, self.slots))} --heldout {heldout}"
        if self.sparse_dim:
            cmd += f" --sparse-dim {self.sparse_dim}"
        if lease is not None:
            cmd += f" --lease-file {shlex.quote(str(lease.path))} --lease-seconds {lease.seconds}"
        return cmd

    def _dataset(self, heldout: str, files: list[str], lease: Lease | None = None):
        import paddle

        ds = paddle.distributed.QueueDataset()
        ds.init(
            batch_size=self.batch_size,
            thread_num=self.threads,
            use_var=self.use_vars,
            pipe_command=self.pipe_command(heldout, lease),
        )
        ds.set_filelist(files)
        return ds

    def run(
        self,
        exe,
        program,
        ranges: list[Range],
        *,
        heldout: str = "skip",
        labels: list[str] | None = None,
        loss_var=None,
        every=None,
        every_seconds: float = 0.05,
        max_error_rate: float | None = None,
        lease: Lease | None = None,
    ) -> Result:
        """Train `program` on `ranges` (each split for the threads). `every` is called from
        a side thread every `every_seconds` while training (the dense pull); `loss_var`'s
        value is sampled then too (train_loss metrics). With `lease` the readers stop once
        it is lost (Lease), so the run ends early (`Result.stopped`). Returns statistics per
        range and each batch's loss, predictions and labels (train_loss, train_auc)."""
        labels = labels or [f"{r.path}@{r.start}" for r in ranges]
        run_dir = Path(tempfile.mkdtemp(dir=self.workdir))
        specs: list[tuple[str, Path]] = []  # (label, stats file)
        files: list[str] = []
        held_paths: list[Path] = []  # one per piece: readers run in parallel
        for k, (rng, label) in enumerate(zip(ranges, labels, strict=True)):
            for i, piece in enumerate(split(rng, self.threads)):
                stats = run_dir / f"{k}-{i}.stats"
                spec = run_dir / f"{k}-{i}.spec"
                held = run_dir / f"{k}-{i}.heldout"
                held_paths.append(held)
                spec.write_text(f"{piece.path}\t{piece.start}\t{piece.end}\t{stats}\t{held}\n")
                files.append(str(spec))
                specs.append((label, stats))
        losses: list[float] = []
        ticks = [0]
        t0 = time.monotonic()
        stop = threading.Event()
        side = None
        BATCHES.clear()
        if every is not None:
            side = threading.Thread(
                target=self._side,
                args=(stop, every, every_seconds, ticks),
                daemon=True,
            )
            side.start()
        cwd = os.getcwd()
        try:
            # train_from_dataset leaves <program>_train_desc.prototxt in the working folder.
            os.chdir(run_dir)
            ds = self._dataset(heldout, files, lease)
            exe.train_from_dataset(program=program, dataset=ds, thread=self.threads, debug=False)
        finally:
            os.chdir(cwd)
            stop.set()
            if side is not None:
                side.join()
        seconds = time.monotonic() - t0
        batches, BATCHES[:] = list(BATCHES), []
        losses = [b[0] for b in batches if np.isfinite(b[0])]
        per_range: dict[str, RangeStats] = {}
        for label, stats_path in specs:
            got = RangeStats.read(label, stats_path)
            per_range.setdefault(label, RangeStats(label)).add(got)
        for rng, label in zip(ranges, labels, strict=True):
            per_range[label].check(rng.path, max_error_rate)
        text = b"".join(p.read_bytes() for p in held_paths if p.exists())
        shutil.rmtree(run_dir, ignore_errors=True)
        return Result(
            per_range, text, seconds, losses, ticks[0],
            labels=[b[2] for b in batches], probs=[b[1] for b in batches],
        )  # fmt: skip

    @staticmethod
    def _side(stop, every, every_seconds, ticks) -> None:
        while not stop.wait(every_seconds):
            ticks[0] += 1
            if every is not None:
                try:
                    every()
                except Exception:  # noqa: BLE001 - retried at the next tick
                    pass


def heldout_lines(ranges: list[Range], slots, sparse_dim: int | None) -> bytes:
    """Raw held-out lines of `ranges`, picked by the native reader alone (no training)."""
    exe = binary()
    if exe is None:
        raise EctlError(f"native reader unavailable: {unavailable()}")
    with tempfile.TemporaryDirectory(prefix="ectl-heldout-") as tmp:
        held = Path(tmp) / "heldout.txt"
        spec = "".join(f"{r.path}\t{r.start}\t{r.end}\t-\t{held}\n" for r in ranges)
        cmd = [str(exe), "--slots", ",".join(str(int(s)) for s in slots), "--heldout", "only"]
        if sparse_dim:
            cmd += ["--sparse-dim", str(int(sparse_dim))]
        done = subprocess.run(
            cmd, input=spec.encode(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        if done.returncode != 0:
            raise EctlError(f"{BINARY_NAME} failed: {done.stderr.decode(errors='replace')}")
        return held.read_bytes() if held.exists() else b""


def parse_heldout(text: bytes, slots, sparse_dim: int | None, batch_size: int) -> list:
    """Held-out raw lines -> SlotBatches (the Python parser; 10% of the data)."""
    from elasticctr.data.parser import parse_bytes

    if not text:
        return []
    batch, _ = parse_bytes(text, slots, sparse_dim=sparse_dim)
    return [batch.slice(i, i + batch_size) for i in range(0, len(batch), batch_size)]


if (
    __name__ == "__main__"
):  # `python -m elasticctr.train.native --build` (scripts/bootstrap-python.sh)
    import sys

    if sys.argv[1:] != ["--build"]:
        sys.exit("usage: python -m elasticctr.train.native --build")
    print(build())
