"""Native training path: Paddle's C++ dataset pipeline fed by a compiled reader.

`ectl-slotfeed` (slotfeed.c next to this file) turns one byte range of a data file into
Paddle's MultiSlot text; Paddle's `QueueDataset` runs it as the pipe command of every
file in its list and `exe.train_from_dataset(thread=T)` trains T Hogwild threads, so no
sample passes through Python. The file list holds small *spec files*, one per byte range
(`PATH\\tSTART\\tEND\\tSTATS\\tHELDOUT`): QueueDataset hands whole files to threads, so a
leased range is split into T sub-ranges (lines beginning in each; together exactly the
range) and each thread reads its own.

What stays as in the Python path (elasticctr.train.feeds.to_feed): the same sparse table
(raw uint64 feasigns, padding feasign 0 for an empty slot), the same pooled input of the
dense model ([batch, slots, table_dim], sum per slot), the data's show/click per sample
into the table's statistics, the byte-range rule, the malformed-line bound per range.
The held-out samples (hash rule of elastic.heldout_mask) are written raw by the reader and
parsed by Python (10% of the data) for the evaluation of the exported version.

Stored files that are not local (http(s):// fileserver, hdfs://, any URL
elasticctr.data.storage opens) are streamed: per piece, a thread of the trainer reads the
range with `storage.open_range` (one ranged read per block, retried from the byte it
reached) and writes whole lines into a FIFO that the reader reads as a stream (spec field
BASE). The reader keeps the byte-range rule and the lease fence; a range whose input ends
early (file truncated or removed, store unreachable past the retry window) ends
"incomplete" and `NativeFeed.run` raises `ReadError` (docs/training.md "Native path").

Where the Python reader still serves (`can_read`): compressed files, URLs no storage
backend opens, `trainer.threads: 0`, and machines without a C compiler
(the binary is built on first use, cached by the source's hash in
~/.cache/elasticctr/native, or by `make native`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import queue
import shlex
import shutil
import subprocess
import sys
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
TAIL_BYTES = 64 << 10
"""A streamed range's last line is read past the range's end in reads of this size."""
FIRST_BYTES = 256 << 10
"""A stream's first read: small, so the reader starts at once (then full blocks)."""
PIPE_BYTES = 1 << 20
"""FIFO buffer between a stream and its reader (F_SETPIPE_SZ; Linux' default limit)."""
STOPPED_LEASE, STOPPED_INPUT = 1, 2
"""RangeStats.stopped: the lease was lost / the input ended before the range's end."""
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


COMPRESSED = (".gz", ".bz2")


def local_path(url: str) -> str | None:
    """The local path the native reader maps, or None (a stored URL, or compressed)."""
    if url.startswith("file://"):
        url = url[len("file://") :]
    elif "://" in url:
        return None
    if url.endswith(COMPRESSED):
        return None
    return url


def streamable(url: str) -> bool:
    """A stored file the native reader gets streamed: not local, not compressed, and a
    URL elasticctr.data.storage opens (http(s), hdfs, any scheme it adds)."""
    from elasticctr.data import storage

    if "://" not in url or url.startswith("file://") or url.endswith(COMPRESSED):
        return False
    try:
        storage.url_to_fs(url)
    except EctlError:
        return False
    return True


def can_read(urls) -> bool:
    """The native reader reads every one of `urls` (mapped or streamed)."""
    return all(local_path(u) is not None or streamable(u) for u in urls) and binary() is not None


# --- ranges and statistics -------------------------------------------------------------


@dataclass(frozen=True)
class Range:
    path: str  # a local path, file:// URL, or a stored file's URL (streamed)
    start: int = 0
    end: int = -1  # -1: end of file
    size: int = -1  # the file's size when its tasks were made (-1: unknown); a stream
    # that finds the file shorter fails (truncated while read), also in the last line


def _size(url: str, hdfs_ugi: str | None) -> int:
    path = local_path(url)
    if path is not None:
        return os.path.getsize(path)
    from elasticctr.data import storage

    fs, inner = storage.url_to_fs(url, hdfs_ugi)
    try:
        return int(fs.size(inner))
    except Exception as exc:  # fsspec backends raise unrelated types
        raise storage.wrap_error(url, exc) from exc


def split(rng: Range, pieces: int, hdfs_ugi: str | None = None) -> list[Range]:
    """`rng` as exactly `pieces` consecutive byte ranges, each >= MIN_SPLIT_BYTES or empty.

    Exactly `pieces`: Paddle's trainer refuses a file list shorter than its thread count
    ("pool.size() ... != thread_num_"); an empty range reads nothing."""
    file_size = rng.size
    if rng.end < 0 and file_size < 0:
        file_size = _size(rng.path, hdfs_ugi)
    end = file_size if rng.end < 0 else rng.end
    size = max(0, end - rng.start)
    n = max(1, min(pieces, size // MIN_SPLIT_BYTES))
    cuts = [rng.start + size * i // n for i in range(n + 1)]
    cuts += [end] * (pieces - n)
    return [Range(rng.path, cuts[i], cuts[i + 1], file_size) for i in range(pieces)]


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
    stopped: int = 0  # STOPPED_LEASE / STOPPED_INPUT: the range was not read to its end
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

    def check(self, path: str, max_error_rate: float | None, hdfs_ugi: str | None = None) -> None:
        """The Python parser's bound (FileStats.check), with the bad lines diagnosed."""
        counted = self.lines - self.blank
        if max_error_rate is None or not self.malformed or not counted:
            return
        rate = self.malformed / counted
        if rate <= max_error_rate:
            return
        from elasticctr.data import storage
        from elasticctr.data.parser import diagnose_line

        examples = []
        for off in self.bad_offsets:
            line = next(storage.open_range(path, off, None, hdfs_ugi, block_bytes=TAIL_BYTES), b"")
            found = diagnose_line(line.split(b"\n", 1)[0])
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


# --- streams of stored files ------------------------------------------------------------


def _log(msg: str) -> None:
    print(f"[ectl-train {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        raise EctlError(f"{name} must be a number, got {os.environ.get(name)!r}") from None


def _permanent(exc: EctlError) -> bool:
    """A read error no retry cures: gone, refused, or the file shorter than the range."""
    cause = exc.__cause__
    if cause is None:  # raised by storage itself: the file ends before the range does
        return True
    status = getattr(cause, "status", None)
    return isinstance(cause, FileNotFoundError | PermissionError) or status in (401, 403, 404)


class _Stream(threading.Thread):
    """Streams one piece of a stored file into the FIFO its reader (spec BASE) reads.

    Sends the file from byte BASE (start - 1, so the reader sees whether `start` begins a
    line) up to the newline that ends the last line beginning before `end`, and only whole
    lines: whatever it wrote when it stops is whole lines, so a stream cut short ends in
    the reader as "input ended before the range's end" (STOPPED_INPUT), never as a partial
    sample. A failed read is retried from the byte reached for READ_RETRY_SECONDS, unless
    it is permanent (`_permanent`); then `error` is set and every stream of the same range
    stops (`abort`). The reader going away (lease lost: it closes the FIFO) ends it quietly.
    """

    def __init__(self, fifo: Path, piece: Range, hdfs_ugi, abort, stop):
        super().__init__(daemon=True, name=f"stream {piece.path}@{piece.start}")
        self.fifo, self.piece, self.hdfs_ugi = fifo, piece, hdfs_ugi
        self.abort, self.stop = abort, stop  # this range's / the whole run's
        self.base = piece.start - 1 if piece.start > 0 else 0
        self.error: str | None = None
        self.sent = 0  # bytes written into the FIFO
        self.block = int(_env_float(C.ENV_STREAM_BLOCK_KIB, 4096) * 1024) or TAIL_BYTES
        self.retry_seconds = _env_float(C.ENV_READ_RETRY_SECONDS, 30.0)

    def run(self) -> None:
        try:
            fd = self._open()
        except OSError as exc:
            self.error = f"cannot open the reader's FIFO {self.fifo}: {exc}"
            self.abort.set()
            return
        if fd is None:
            return
        try:
            self._feed(fd)
        except BrokenPipeError:
            pass  # the reader stopped (lease lost) or is gone: nothing more to send
        except EctlError as exc:
            self.error = str(exc)
            self.abort.set()
        except Exception as exc:  # noqa: BLE001 - reported as this range's read error
            self.error = f"{self.piece.path}: {type(exc).__name__}: {exc}"
            self.abort.set()
        finally:
            os.close(fd)

    def _open(self) -> int | None:
        """The FIFO's write end, once its reader opened it (None: the run ended first)."""
        t0 = time.monotonic()
        while not self.stop.is_set():
            try:
                fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                    raise
                time.sleep(0.005 if time.monotonic() - t0 < 1 else 0.05)
                continue
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
            with contextlib.suppress(OSError):  # more than the system allows: keep 64 KiB
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
            return fd
        return None

    def _blocks(self):
        """The file's bytes from BASE on: blocks of [BASE, end), then TAIL_BYTES reads
        past `end` until the consumer has its last line; failed reads resumed."""
        from elasticctr.data import storage

        pos, end, failing_since = self.base, self.piece.end, None
        size = self.piece.size if self.piece.size >= 0 else None  # the tail's end: EOF
        first = True
        while True:
            tail = pos >= end
            upto = size if tail else min(end, pos + FIRST_BYTES) if first else end
            try:
                for block in storage.open_range(
                    self.piece.path, pos, upto, self.hdfs_ugi,
                    block_bytes=TAIL_BYTES if tail else self.block,
                ):  # fmt: skip
                    failing_since = None
                    pos += len(block)
                    yield block
                    if self.abort.is_set() or self.stop.is_set():
                        return
                if tail:
                    return  # the file's end
                first = False
            except EctlError as exc:
                now = time.monotonic()
                failing_since = failing_since or now
                if _permanent(exc) or now - failing_since >= self.retry_seconds:
                    raise
                _log(f"read of {self.piece.path} failed at byte {pos} ({exc}); retrying")
                if self.abort.wait(min(2.0, 0.2 + (now - failing_since) / 4)):
                    return

    def _ahead(self):
        """`_blocks()` read one block ahead by a helper thread, so the next read overlaps
        the reader's work on this one (a store's latency stays hidden under load)."""
        slot: queue.Queue = queue.Queue(maxsize=1)
        done = threading.Event()

        def put(item) -> bool:
            """Hand `item` over; False once the consumer is gone."""
            while not done.is_set():
                try:
                    slot.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def pump() -> None:
            try:
                for block in self._blocks():
                    if not put(block):
                        return
                item = None
            except BaseException as exc:  # noqa: BLE001 - re-raised in the stream thread
                item = exc
            put(item)

        helper = threading.Thread(target=pump, daemon=True, name=f"{self.name} read-ahead")
        helper.start()
        try:
            while (item := slot.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            done.set()
            helper.join()

    def _feed(self, fd: int) -> None:
        last_needed = self.piece.end - 1  # the newline at or after it ends our last line
        pos, carry = self.base, b""
        for block in self._ahead():
            at, pos = pos, pos + len(block)
            cut = block.rfind(b"\n")
            if cut < 0:
                carry += block  # a line longer than a block
                continue
            self._write(fd, carry)
            self._write(fd, memoryview(block)[: cut + 1])
            carry = block[cut + 1 :]
            if at + cut >= last_needed:
                return
        if self.abort.is_set() or self.stop.is_set():
            return
        self._write(fd, carry)  # the file's last line, without a newline

    def _write(self, fd: int, data) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        self.sent += len(data)


class _Inputs:
    """The spec lines of ranges split for the readers, with the streams of stored files.

    `lines` are the readers' spec lines in order; `labels[i]`/`stats[i]`/`held[i]` their
    range's label, statistics file and held-out file; `errors()` the read errors per
    label once the streams are stopped (`close`)."""

    def __init__(self, run_dir: Path, ranges, labels, pieces: int, hdfs_ugi, stats: bool = True):
        self.lines: list[str] = []
        self.labels: list[str] = []
        self.stats: list[Path | None] = []
        self.held: list[Path] = []
        self.streams: list[tuple[str, _Stream]] = []
        self.stop = threading.Event()
        for k, (rng, label) in enumerate(zip(ranges, labels, strict=True)):
            local = local_path(rng.path)
            abort = threading.Event()
            for i, piece in enumerate(split(rng, pieces, hdfs_ugi)):
                st = run_dir / f"{k}-{i}.stats" if stats else None
                held = run_dir / f"{k}-{i}.heldout"
                fields = [st or "-", held]
                if local is not None:
                    line = [local, piece.start, piece.end, *fields]
                elif piece.start >= piece.end:  # nothing to read: no stream
                    line = ["/dev/null", 0, 0, *fields]
                else:
                    fifo = run_dir / f"{k}-{i}.fifo"
                    os.mkfifo(fifo, 0o600)
                    stream = _Stream(fifo, piece, hdfs_ugi, abort, self.stop)
                    self.streams.append((label, stream))
                    line = [fifo, piece.start, piece.end, *fields, stream.base]
                self.lines.append("\t".join(map(str, line)) + "\n")
                self.labels.append(label)
                self.stats.append(st)
                self.held.append(held)

    def __enter__(self) -> _Inputs:
        for _label, stream in self.streams:
            stream.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.stop.set()
        for _label, stream in self.streams:
            stream.join()

    def errors(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for label, stream in self.streams:
            if stream.error and label not in out:
                out[label] = stream.error
        return out


class ReadError(EctlError):
    """A range could not be read to its end (stored file truncated or removed, store
    unreachable past the retry window, local file shorter than the range), or held more
    malformed lines than global.data.maxErrorRate allows: nothing of it may count as
    trained. `result` holds what the run did (its samples were trained)."""

    def __init__(self, message: str, result: Result | None = None):
        super().__init__(message)
        self.result = result


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
        return any(s.stopped == STOPPED_LEASE for s in self.stats.values())


class NativeFeed:
    """Runs `train_from_dataset` over byte ranges with `threads` Hogwild threads."""

    def __init__(
        self,
        slots,
        sparse_dim: int | None,
        use_vars,
        threads: int,
        batch_size: int,
        hdfs_ugi: str | None = None,
    ):
        self.hdfs_ugi = hdfs_ugi
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
        inputs = _Inputs(run_dir, ranges, labels, self.threads, self.hdfs_ugi)
        files: list[str] = []
        for k, line in enumerate(inputs.lines):
            spec = run_dir / f"{k}.spec"
            spec.write_text(line)
            files.append(str(spec))
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
            with inputs:
                # train_from_dataset leaves <program>_train_desc.prototxt in the working folder.
                os.chdir(run_dir)
                ds = self._dataset(heldout, files, lease)
                exe.train_from_dataset(
                    program=program, dataset=ds, thread=self.threads, debug=False
                )
        finally:
            os.chdir(cwd)
            stop.set()
            if side is not None:
                side.join()
        seconds = time.monotonic() - t0
        batches, BATCHES[:] = list(BATCHES), []
        losses = [b[0] for b in batches if np.isfinite(b[0])]
        per_range: dict[str, RangeStats] = {}
        for label, stats_path in zip(inputs.labels, inputs.stats, strict=True):
            got = RangeStats.read(label, stats_path)
            per_range.setdefault(label, RangeStats(label)).add(got)
        text = b"".join(p.read_bytes() for p in inputs.held if p.exists())
        shutil.rmtree(run_dir, ignore_errors=True)
        result = Result(
            per_range, text, seconds, losses, ticks[0],
            labels=[b[2] for b in batches], probs=[b[1] for b in batches],
        )  # fmt: skip
        if not result.stopped:
            _raise_incomplete(inputs, per_range, result)
        for rng, label in zip(ranges, labels, strict=True):
            try:
                per_range[label].check(rng.path, max_error_rate, self.hdfs_ugi)
            except ReadError:
                raise
            except EctlError as exc:  # too many malformed lines: the range failed, with why
                problems = getattr(exc, "problems", None) or []
                why = "; ".join([exc.message, *problems[:3]])
                raise ReadError(why, result) from exc
        return result

    @staticmethod
    def _side(stop, every, every_seconds, ticks) -> None:
        while not stop.wait(every_seconds):
            ticks[0] += 1
            if every is not None:
                try:
                    every()
                except Exception:  # noqa: BLE001 - retried at the next tick
                    pass


def _raise_incomplete(inputs: _Inputs, per_range: dict[str, RangeStats], result=None) -> None:
    """ReadError for the first range whose input ended before its end (a stream's error,
    or the reader's STOPPED_INPUT: the file is shorter than the range)."""
    errors = inputs.errors()
    for label, stats in per_range.items():
        if label in errors or stats.stopped == STOPPED_INPUT:
            why = errors.get(label) or f"{label}: the file ends before the range's end"
            raise ReadError(f"reading {label} failed: {why}", result)
    if errors:  # a stream failed while its reader had what it needed (not expected)
        label, why = next(iter(errors.items()))
        raise ReadError(f"reading {label} failed: {why}", result)


def heldout_lines(
    ranges: list[Range], slots, sparse_dim: int | None, hdfs_ugi: str | None = None
) -> bytes:
    """Raw held-out lines of `ranges`, picked by the native reader alone (no training)."""
    exe = binary()
    if exe is None:
        raise EctlError(f"native reader unavailable: {unavailable()}")
    with tempfile.TemporaryDirectory(prefix="ectl-heldout-") as tmp:
        labels = [f"{r.path}@{r.start}" for r in ranges]
        inputs = _Inputs(Path(tmp), ranges, labels, 1, hdfs_ugi)
        cmd = [str(exe), "--slots", ",".join(str(int(s)) for s in slots), "--heldout", "only"]
        if sparse_dim:
            cmd += ["--sparse-dim", str(int(sparse_dim))]
        with inputs:
            done = subprocess.run(
                cmd, input="".join(inputs.lines).encode(), stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )  # fmt: skip
        if done.returncode != 0:
            raise EctlError(f"{BINARY_NAME} failed: {done.stderr.decode(errors='replace')}")
        per_range = {
            label: RangeStats.read(label, st)
            for label, st in zip(inputs.labels, inputs.stats, strict=True)
        }
        _raise_incomplete(inputs, per_range)
        return b"".join(p.read_bytes() for p in inputs.held if p.exists())


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
