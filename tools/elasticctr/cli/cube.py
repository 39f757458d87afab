"""`ectl cube ...`: build shard files, run a shard server, run cube-transfer, roll back."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import typer

from elasticctr.constants import (
    CUBE_PORT,
    CUBE_REPLICA_SEPARATOR,
    CUBE_TRANSFER_PORT,
    ENV_CUBE_SHARDS,
)
from elasticctr.errors import EctlError

cube_app = typer.Typer(
    help=(
        "Cube: the sharded sparse-embedding service.\n\n"
        "  ectl cube build --model-store ./store --version 20200401/00 --cube-root ./cube -n 2\n\n"
        "  ectl cube server --cube-root ./cube --state-dir ./s0 --shard 0 --num-shards 2\n\n"
        "  ectl cube transfer --model-store ./store --cube-root ./cube "
        "--shard-url http://127.0.0.1:8500 --shard-url http://127.0.0.1:8501"
    ),
    no_args_is_help=True,
)

_SHARD_URL_HELP = (
    f"Base URL of each shard, shard 0 first (repeat; else ${ENV_CUBE_SHARDS}); the replicas "
    f"of one shard joined by {CUBE_REPLICA_SEPARATOR!r}."
)


def _shard_urls(urls: list[str] | None) -> list[str]:
    """One entry per shard (its replicas joined by `|`: `protocol.parse_shards`)."""
    from elasticctr.cube.protocol import format_shards, parse_shards

    found = format_shards(parse_shards(urls or os.environ.get(ENV_CUBE_SHARDS, "")))
    if not found:
        raise EctlError("no cube shards given", hint=f"pass --shard-url or set ${ENV_CUBE_SHARDS}")
    return found


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise


@cube_app.command("build")
def build(
    model_store: str = typer.Option(
        ..., help="Model store URL or directory (file://, hdfs://, http://)."
    ),
    version: str = typer.Option(..., help="Model version YYYYMMDD/HH to build."),
    cube_root: Path = typer.Option(..., help="Directory that receives versions/{V}/shard-*.cube."),
    shards: int = typer.Option(
        ..., "--shards", "-n", help="Number of shards N (shard = hash % N)."
    ),
    force: bool = typer.Option(False, help="Rebuild even when a complete build exists."),
) -> None:
    """Build the N shard files of one model version (verifies the export's sha256 first)."""
    import tempfile

    from elasticctr.cube.builder import build_version
    from elasticctr.cube.modelstore import fetch_version

    cube_root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=cube_root, prefix=".fetch-") as cache:
        mv = fetch_version(model_store, version, Path(cache))
        t1 = time.perf_counter()
        manifest = build_version(mv, cube_root, shards, force=force)
    t2 = time.perf_counter()
    keys = manifest["total_keys"]
    typer.echo(
        f"built {version}: {keys} keys, dim {manifest['dim']}, {shards} shards in "
        f"{t2 - t1:.2f}s ({keys / max(t2 - t1, 1e-9):,.0f} keys/s; verify {t1 - t0:.2f}s)"
    )
    for entry in manifest["shards"]:
        typer.echo(f"  {entry['file']}  {entry['keys']} keys  sha256 {entry['sha256'][:16]}")


@cube_app.command("server")
def server(
    cube_root: Path = typer.Option(..., help="Directory holding built versions (read-only use)."),
    state_dir: Path = typer.Option(..., help="This shard's own directory (committed version)."),
    shard: int | None = typer.Option(None, help="This shard's index, 0..N-1."),
    num_shards: int = typer.Option(..., help="Total number of shards N."),
    ordinal: int | None = typer.Option(
        None,
        help="Instead of --shard: this replica's number (a StatefulSet pod ordinal); it "
        "serves shard ORDINAL % N, so ordinals i, i+N, i+2N, ... are replicas of shard i.",
    ),
    host: str = typer.Option("127.0.0.1", help="Address to bind (0.0.0.0 in a pod)."),
    port: int = typer.Option(CUBE_PORT, help="Port to listen on."),
    keep: int = typer.Option(2, help="Versions held in memory (committed + previous ones)."),
    capacity_mib: int = typer.Option(
        0, help="MiB all tables (scenarios) together may hold on this shard; 0 = no cap."
    ),
) -> None:
    """Serve one shard: batch lookups (binary + JSON), health, metrics, hot version switch.
    One table per scenario of the platform (docs/platform.md)."""
    from elasticctr.cube.server import run_server

    if (shard is None) == (ordinal is None):
        raise EctlError("pass one of --shard and --ordinal")
    if num_shards < 1 or (ordinal if shard is None else shard) < 0:
        raise EctlError("--num-shards must be >= 1, --shard and --ordinal >= 0")
    if shard is None:
        shard = ordinal % num_shards
    _logging()
    run_server(
        cube_root=cube_root,
        state_dir=state_dir,
        shard=shard,
        num_shards=num_shards,
        host=host,
        port=port,
        keep=keep,
        capacity_bytes=capacity_mib << 20,
    )


_SCENARIOS_HELP = (
    "Also publish every registered scenario ({store}/scenarios/NAME into table NAME): "
    "kube:PLATFORM (ConfigMaps labelled elasticctr.io/platform=PLATFORM in this pod's "
    "namespace) or a folder of NAME.json files (docs/platform.md)."
)


@cube_app.command("transfer")
def transfer(
    model_store: str = typer.Option(..., help="Model store URL or directory to watch."),
    cube_root: Path = typer.Option(..., help="Directory where shard files are built."),
    shard_url: list[str] = typer.Option(None, help=_SHARD_URL_HELP),
    keep: int = typer.Option(3, help="Built versions kept on disk for rollback (K)."),
    interval: float = typer.Option(30.0, help="Seconds between polls of the model store."),
    notify: list[str] = typer.Option(None, help="URL to POST {version} to after a commit."),
    once: bool = typer.Option(False, help="Poll once (publish the newest new version) and exit."),
    version: str | None = typer.Option(None, help="Publish exactly this version and exit."),
    scenarios: str | None = typer.Option(None, help=_SCENARIOS_HELP),
    scenario: str = typer.Option(
        "default", help="With --once/--version: the scenario (table) to publish."
    ),
    listen: str = typer.Option(
        f"0.0.0.0:{CUBE_TRANSFER_PORT}",
        help="HOST:PORT of the watcher's status server (/healthz, /readyz, /v1/status; "
        "port 0 picks a free one). Not started with --once/--version.",
    ),
) -> None:
    """Watch the model store; build, load on all shards, commit (two-phase), keep K versions.

    While watching, serves GET /healthz, /readyz (200 once the latest read of the model
    store succeeded, else 503 naming the store and the error) and /v1/status."""

    from elasticctr.cube.transfer import PlatformTransfer, Transfer
    from elasticctr.cube.transfer_server import parse_listen
    from elasticctr.scenarios import check_name, open_registry

    _logging()
    address = parse_listen(listen)
    if scenarios and not (version or once):
        p = PlatformTransfer(
            cube_root=cube_root,
            shard_urls=_shard_urls(shard_url),
            store=model_store,
            registry=open_registry(scenarios),
            keep=keep,
            notify=notify,
            echo=typer.echo,
        )
        try:
            _watch_serving(p, address, interval)
        finally:
            p.close()
        return
    t = Transfer(
        table=check_name(scenario),
        cube_root=cube_root,
        shard_urls=_shard_urls(shard_url),
        store=model_store,
        keep=keep,
        notify=notify,
        echo=typer.echo,
    )
    try:
        if version or once:
            t.check_shards()
        if version:
            t.publish(version)
            return
        if once:
            published = t.poll_once(raise_errors=True)
            typer.echo(f"published {published}" if published else "no new version")
            return
        _watch_serving(t, address, interval)
    finally:
        t.close()


def _watch_serving(watcher, address: tuple[str, int], interval: float) -> None:
    """Run the watcher until SIGTERM with its status server on `address`."""
    import signal

    from elasticctr.cube.transfer_server import TransferStatusServer

    try:
        server = TransferStatusServer(address, watcher).start()
    except OSError as exc:
        raise EctlError(
            f"cannot listen on {address[0]}:{address[1]}: {exc.strerror or exc}",
            hint="pick another --listen HOST:PORT (port 0 picks a free one)",
        ) from exc
    typer.echo(f"status server on {server.url} (/healthz, /readyz, /v1/status)")
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    try:
        watcher.run(interval, stop=lambda: bool(stopping))
    finally:
        server.stop()


@cube_app.command("rollback")
def rollback(
    to: str = typer.Option(..., "--to", help="Retained version YYYYMMDD/HH to switch back to."),
    cube_root: Path = typer.Option(..., help="The cube root the transfer uses."),
    shard_url: list[str] = typer.Option(None, help=_SHARD_URL_HELP),
    scenario: str = typer.Option("default", help="The scenario (table) to roll back."),
) -> None:
    """Switch every shard back to an earlier retained version (same two-phase switch)."""
    from elasticctr.cube.transfer import Transfer
    from elasticctr.scenarios import check_name

    t = Transfer(
        cube_root=cube_root,
        shard_urls=_shard_urls(shard_url),
        echo=typer.echo,
        table=check_name(scenario),
    )
    try:
        t.check_shards()
        t.rollback(to)
    finally:
        t.close()


@cube_app.command("status")
def status(
    cube_root: Path = typer.Option(..., help="The cube root the transfer uses."),
    shard_url: list[str] = typer.Option(None, help=_SHARD_URL_HELP),
) -> None:
    """Committed version per shard, retained builds, transfer state (JSON)."""
    from elasticctr.cube.builder import built_versions
    from elasticctr.cube.client import ShardError
    from elasticctr.cube.transfer import Transfer

    t = Transfer(cube_root=cube_root, shard_urls=_shard_urls(shard_url))
    try:
        shards = []
        for s in t.cube.shards:
            try:
                shards.append(s.status())
            except ShardError as exc:
                shards.append({"url": s.url, "error": str(exc)})
        out = {"transfer": t.state(), "retained": built_versions(cube_root), "shards": shards}
        typer.echo(json.dumps(out, indent=1))
    finally:
        t.close()


def register(app: typer.Typer) -> None:
    app.add_typer(cube_app, name="cube")
