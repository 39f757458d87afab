"""Exact CPU time of a command's whole process tree, for the benchmarks.

`run_tree(argv)` runs `argv` under a small reaper process that makes itself a child
subreaper (prctl PR_SET_CHILD_SUBREAPER): every process the command starts, however
deep, stays a descendant of the reaper even when its own parent exits first (orphans are
re-parented to the reaper, not to init), and the reaper waits for all of them. Its
RUSAGE_CHILDREN at the end is then the CPU (user + system, the kernel's accounting, not
samples) of the whole tree from launch to the exit of its last process; the reaper's own
CPU (an idle `waitpid`) is not in it.

Windows inside a run (`marks`): when a mark's check first returns true (polled every
`poll` seconds by the caller), the tree's CPU so far is read from /proc (`tree_cpu`):
utime + stime + cutime + cstime of every live descendant of the reaper plus the reaper's
cutime + cstime. A process that exits is reaped by its parent, whose cutime/cstime then
hold its times, so the sum only grows and has no gaps; a window's CPU is the difference of
two reads. One read is one pass over /proc (milliseconds); a process reaped during that
pass can be counted twice or missed, and a mark is seen up to `poll` seconds late.

    run = run_tree([sys.executable, "-c", "..."], marks={"half": lambda: flag.exists()})
    run.cpu, run.wall                # launch -> exit of the last process
    run.window("start", "half")      # (wall seconds, CPU seconds) between two marks
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
LEFTOVER_GRACE = 10.0
"""Seconds the reaper waits for descendants still running after the command exited
before it kills them (counted all the same)."""

_REAPER = r"""
import ctypes, json, os, resource, signal, sys, time
report, grace, argv = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    sys.exit("treecpu: prctl(PR_SET_CHILD_SUBREAPER) failed")
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the command's group itself
t0 = time.monotonic()
pid = os.posix_spawnp(argv[0], argv, os.environ)


def forward(signum, _frame):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


signal.signal(signal.SIGTERM, forward)


def orphans():
    me, found = os.getpid(), []
    for stat in os.listdir("/proc"):
        if stat.isdigit():
            try:
                with open(f"/proc/{stat}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == me:
                        found.append(int(stat))
            except (OSError, ValueError, IndexError):
                pass
    return found


code, t_exit, killed = None, None, 0
while True:
    try:
        if t_exit is None:
            got, status = os.waitpid(-1, 0)
        else:
            got, status = os.waitpid(-1, os.WNOHANG)
            if got == 0:
                if time.monotonic() - t_exit > grace:
                    for left in orphans():
                        try:
                            os.kill(left, signal.SIGKILL)
                            killed += 1
                        except ProcessLookupError:
                            pass
                    grace = float("inf")
                time.sleep(0.02)
                continue
    except ChildProcessError:
        break
    if got == pid:
        code, t_exit = os.waitstatus_to_exitcode(status), time.monotonic()
t_end = time.monotonic()
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(report, "w") as fh:
    json.dump({
        "code": code, "t0": t0, "exit": t_exit - t0, "wall": t_end - t0,
        "cpu": usage.ru_utime + usage.ru_stime, "killed": killed,
    }, fh)
sys.exit(code if code is not None and code >= 0 else 128 + abs(code or 0))
"""


def proc_table() -> tuple[dict[int, list[int]], dict[int, tuple[int, int, int, int]]]:
    """Every process's children and (utime, stime, cutime, cstime) in clock ticks."""
    children: dict[int, list[int]] = {}
    times: dict[int, tuple[int, int, int, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(name)
        children.setdefault(int(fields[1]), []).append(pid)
        utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
        times[pid] = (utime, stime, cutime, cstime)
    return children, times


def tree_cpu(root: int, *, root_self: bool = True) -> float:
    """CPU seconds of `root`'s live process tree so far: each process's own time plus
    what its reaped children used (cutime/cstime). `root_self=False` leaves out the
    root's own utime/stime (a reaper's), keeping what it reaped."""
    return sum(tree_cpu_by(root, root_self=root_self).values())


def tree_cpu_by(
    root: int,
    label: Callable[[list[str]], str | None] | None = None,
    *,
    root_self: bool = True,
    rest: str = "rest",
) -> dict[str, float]:
    """`tree_cpu` split by subtree: the first process on each path down from `root` whose
    command line `label` names (not None) takes its whole subtree under that name; every
    other process counts under `rest`."""
    children, times = proc_table()
    totals: dict[str, int] = {}
    todo: list[tuple[int, str]] = [(root, rest)]
    while todo:
        pid, name = todo.pop()
        if name == rest and label is not None and pid != root:
            name = label(_cmdline(pid)) or rest
        utime, stime, cutime, cstime = times.get(pid, (0, 0, 0, 0))
        own = cutime + cstime + (utime + stime if pid != root or root_self else 0)
        totals[name] = totals.get(name, 0) + own
        todo += [(child, name) for child in children.get(pid, [])]
    return {name: ticks / TICK for name, ticks in totals.items()}


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


@dataclasses.dataclass
class TreeRun:
    """One command run under the reaper: wall and CPU seconds of its whole tree from
    launch to the exit of its last process, the marks (name -> seconds since launch and
    the tree's CPU seconds by then), the 1-minute load average at both ends."""

    argv: list[str]
    returncode: int
    wall: float
    exit_wall: float  # launch -> the command itself exited
    cpu: float
    marks: dict[str, tuple[float, float]]
    by: dict[str, dict[str, float]]  # mark -> CPU so far per `label` name (run_tree)
    late: list[str]  # marks first seen after the command had exited (end values used)
    load: tuple[float, float]
    killed: int  # leftover descendants killed LEFTOVER_GRACE s after the command exited

    def window(self, start: str | None, end: str | None) -> tuple[float, float]:
        """(wall, CPU) seconds between two marks; None = the launch / the end."""
        t0, c0 = self.marks[start] if start else (0.0, 0.0)
        t1, c1 = self.marks[end] if end else (self.wall, self.cpu)
        return t1 - t0, c1 - c0

    def window_by(self, start: str, end: str) -> dict[str, float]:
        """CPU seconds per `label` name between two marks."""
        a, b = self.by[start], self.by[end]
        return {name: b.get(name, 0.0) - a.get(name, 0.0) for name in sorted({*a, *b})}


def run_tree(
    argv: Sequence[str],
    *,
    marks: Mapping[str, Callable[[], bool]] | None = None,
    label: Callable[[list[str]], str | None] | None = None,
    poll: float = 0.05,
    check: bool = True,
    grace: float = LEFTOVER_GRACE,
    **popen,
) -> TreeRun:
    """Run `argv` to completion under the reaper (`popen`: env, cwd, stdout, stderr as
    for subprocess.Popen); CalledProcessError when it fails and `check`. At each mark
    the CPU so far is also split by `label` (`tree_cpu_by`; TreeRun.by)."""
    argv = [str(a) for a in argv]
    load0 = os.getloadavg()[0]
    seen: dict[str, tuple[float, float]] = {}
    by: dict[str, dict[str, float]] = {}
    late: list[str] = []
    pending = dict(marks or {})
    with tempfile.TemporaryDirectory(prefix="treecpu-") as tmp:
        report = Path(tmp) / "report.json"
        reaper = [sys.executable, "-I", "-c", _REAPER, str(report), str(grace), *argv]
        proc = subprocess.Popen(reaper, **popen)
        try:
            while pending and proc.poll() is None:
                for name, found in list(pending.items()):
                    if found():
                        now = time.monotonic()
                        by[name] = tree_cpu_by(proc.pid, label, root_self=False)
                        seen[name] = (now, sum(by[name].values()))
                        del pending[name]
                time.sleep(poll)
            proc.wait()
        except BaseException:
            proc.terminate()
            proc.wait()
            raise
        for name, found in pending.items():
            if found():
                late.append(name)
        if not report.exists():
            raise RuntimeError(f"treecpu: the reaper wrote no report (exit {proc.returncode})")
        rep = json.loads(report.read_text())
    run = TreeRun(
        argv=argv,
        returncode=proc.returncode,
        wall=rep["wall"],
        exit_wall=rep["exit"],
        cpu=rep["cpu"],
        marks={name: (t - rep["t0"], cpu) for name, (t, cpu) in seen.items()},
        by=by,
        late=late,
        load=(load0, os.getloadavg()[0]),
        killed=rep["killed"],
    )
    for name in late:
        run.marks[name] = (run.wall, run.cpu)
    if check and run.returncode != 0:
        raise subprocess.CalledProcessError(run.returncode, argv)
    return run
