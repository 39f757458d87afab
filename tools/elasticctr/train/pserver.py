"""The pserver role: `ectl train pserver` serves the parameter tables until stopped.

It builds the same program as the trainers (`elasticctr.train.program`) so that Fleet
knows the tables, then serves them; the elastic trainers (`elasticctr.train.elastic`)
push and pull asynchronously. A pserver holds no durable state: the checkpoint is the
durable copy, and a pserver that exits restarts the job from it (docs/coordinator.md).
"""

from __future__ import annotations

import sys

from elasticctr import constants as C
from elasticctr.train import env as role_env
from elasticctr.train.config import TrainConfig
from elasticctr.train.program import edit_ps_desc, init_fleet, log


def run_pserver(cfg: TrainConfig, renv: role_env.RoleEnv) -> None:
    """Serve the parameter tables until the process is stopped (launcher / job end)."""
    log(f"pserver {renv.index} at {renv.pod_ip}:{renv.port}; endpoints {renv.pserver_endpoints}")
    init_fleet(renv, cfg.model, len(cfg.slots), per_slot=cfg.threads > 0)
    import paddle.distributed.fleet as fleet

    plain_table_dumps()
    fleet.init_server()
    exit_at_once_on_sigterm()
    log("pserver serving")
    fleet.run_server()


def plain_table_dumps() -> None:
    """Have this pserver write its table dumps as plain text, not gzip.

    Paddle's tables compress every full dump (`TableParameter.compress_in_save`, on by
    default, and the_one_ps does not pass the strategy's setting through). The gzip runs
    as a piped child process that outlives the save call, so a dump could look complete
    before it was (the trainer had to wait for its files to stay unchanged), and it cost
    about half of every hourly export's pserver CPU (docs/training.md). A plain dump is
    written by the save call itself: complete when the call returns. Loading reads
    either kind (by the file suffix), so older gzip checkpoints still load.
    """
    edit_ps_desc("build_server_desc", _uncompressed_dumps)


def _uncompressed_dumps(ps_desc) -> None:
    for table in ps_desc.server_param.downpour_server_param.downpour_table_param:
        table.compress_in_save = False


def exit_at_once_on_sigterm() -> None:
    """From now on SIGTERM ends this process at once with exit status 15, also when it
    is PID 1 of its PID namespace (a container's `ectl train pserver`).

    `fleet.run_server()` blocks in C++ holding the GIL, so a Python handler never runs;
    Paddle's own handler (glog's) prints "SIGTERM ... received by PID 1" and re-raises
    with the default action, which the kernel ignores for a namespace's PID 1. So a
    deleted, evicted or preempted pserver pod kept serving until the kubelet's SIGKILL
    after the grace period (30 s): Volcano's RestartJob came that late, or never when
    the job completed meanwhile, and every job restart waited that long for it. The C
    handler installed here is libc's `_exit` itself: it needs neither the GIL nor the
    default action. A pserver has nothing to flush (its tables die with it; the
    checkpoint is the durable copy)."""
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.signal.restype = ctypes.c_void_p
    handler = ctypes.cast(libc._exit, ctypes.c_void_p).value
    if libc.signal(int(signal.SIGTERM), handler) == ctypes.c_void_p(-1).value:  # SIG_ERR
        raise OSError(ctypes.get_errno(), "cannot install the pserver's SIGTERM handler")


def main(cfg: TrainConfig) -> None:
    """`ectl train pserver`: the role environment of this process, then serve."""
    renv = role_env.resolve(role=C.ROLE_PSERVER)
    run_pserver(cfg, renv)


if __name__ == "__main__":  # pragma: no cover - use `ectl train pserver`
    sys.exit("use `ectl train pserver`")
