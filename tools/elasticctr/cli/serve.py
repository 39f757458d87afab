"""`ectl serve` (the serving image's entry point) and `ectl predict` (its client)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from elasticctr.constants import (
    ENV_CUBE_SHARDS,
    ENV_MODEL_STORE,
    ENV_SERVING_TOKEN,
    ENV_SERVING_URL,
    SERVING_MAX_BATCH_SAMPLES,
    SERVING_MAX_QUEUE_SAMPLES,
    SERVING_MAX_WAIT_MS,
    SERVING_PORT,
)
from elasticctr.errors import EctlError


def _token(token_file: Path | None) -> str | None:
    if token_file is not None:
        try:
            return token_file.read_text().strip() or None
        except OSError as exc:
            raise EctlError(f"cannot read token file {token_file}: {exc.strerror}") from exc
    return os.environ.get(ENV_SERVING_TOKEN) or None


def serve(
    store: str = typer.Option(
        None, "--store", envvar=ENV_MODEL_STORE, help="Model store URL (global.modelStore)."
    ),
    cube: str = typer.Option(
        "",
        "--cube",
        envvar=ENV_CUBE_SHARDS,
        help="Comma-separated cube shard URLs, shard 0 first; empty = embeddings in-process.",
    ),  # fmt: skip
    host: str = typer.Option("127.0.0.1", help="Address to bind (0.0.0.0 in a pod)."),
    port: int = typer.Option(SERVING_PORT, help="Port (0 picks a free one)."),
    version: str | None = typer.Option(
        None, help="Start on this version (default: cube's committed one, else the newest)."
    ),
    token_file: Path | None = typer.Option(
        None, help=f"File with the bearer token clients must send (else ${ENV_SERVING_TOKEN})."
    ),
    cache: Path = typer.Option(Path(".elasticctr/serving-cache"), help="Download cache."),
    max_batch_samples: int = typer.Option(
        SERVING_MAX_BATCH_SAMPLES, min=1, help="Samples per dynamic batch."
    ),
    max_wait_ms: float = typer.Option(
        SERVING_MAX_WAIT_MS,
        min=0,
        help="Wait this long to fill a batch (0: batch whatever queued meanwhile).",
    ),
    max_inflight_batches: int = typer.Option(1, min=1, help="Batches in flight at once."),
    max_request_samples: int = typer.Option(1000, min=1, help="Samples per request."),
    max_request_features: int = typer.Option(1000, min=1, help="Feasigns per sample."),
    max_body_bytes: int = typer.Option(4 << 20, min=1, help="Request body limit."),
    max_queue_samples: int = typer.Option(
        SERVING_MAX_QUEUE_SAMPLES, min=1, help="Queue limit; beyond it: 503."
    ),
    poll_interval: float = typer.Option(
        2.0, min=0, help="Seconds between checks for a newly committed version (0: never)."
    ),
    mlflow_tracking_uri: str | None = typer.Option(
        None,
        envvar="MLFLOW_TRACKING_URI",
        help="Log every version served as an MLflow pyfunc model (once per version).",
    ),  # fmt: skip
    mlflow_model_name: str | None = typer.Option(
        None, help="Also register those models under this name in the MLflow registry."
    ),
    scenarios: bool = typer.Option(
        False,
        "--scenarios",
        help=(
            "Serve every scenario of the platform at /v1/scenarios/NAME/predict (found as "
            "cube tables, or as folders of the store's scenarios/ without cube), beside the "
            "default one at /v1/predict (docs/platform.md)."
        ),
    ),
    drain_seconds: float = typer.Option(
        0.0,
        min=0,
        help="After SIGTERM: not ready at once, new connections still answered this long "
        "(with a preStop sleep in a pod the endpoints have already dropped it).",
    ),
    drain_timeout: float = typer.Option(
        20.0, min=0, help="Then: seconds requests in progress get to finish before exit."
    ),
    log_level: str = typer.Option("info", help="debug, info, warning, error."),
) -> None:
    """Run the prediction API: cube lookups + dense model, dynamic batching.

    Example:

      ectl serve --store file:///data/store --cube http://cube-0:8500,http://cube-1:8500
    """
    import asyncio
    import logging
    import signal

    from elasticctr.serving.app import ServeConfig, run
    from elasticctr.serving.model import keep_python_signal_handlers
    from elasticctr.serving.samples import Limits

    if not store:
        raise EctlError("no model store", hint=f"pass --store or set ${ENV_MODEL_STORE}")
    # Paddle's import takes SIGTERM over and resets the root logger: import it first, then
    # configure logging (force) and, in main(), the signal handlers.
    keep_python_signal_handlers()
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    cfg = ServeConfig(
        store=store,
        cube=[u.strip() for u in cube.split(",") if u.strip()],
        cache=cache,
        version=version,
        token=_token(token_file),
        max_batch_samples=max_batch_samples,
        max_wait_ms=max_wait_ms,
        max_queue_samples=max_queue_samples,
        max_inflight_batches=max_inflight_batches,
        poll_interval=poll_interval,
        mlflow_tracking_uri=mlflow_tracking_uri,
        mlflow_model_name=mlflow_model_name,
        limits=Limits(max_request_samples, max_body_bytes, max_request_features),
        scenarios=scenarios,
        drain_seconds=drain_seconds,
        drain_timeout=drain_timeout,
    )
    if cfg.version:
        from elasticctr.versions import check_version_id

        check_version_id(cfg.version)

    async def main():
        stop = asyncio.Event()
        task = asyncio.ensure_future(
            run(
                cfg,
                host,
                port,
                stop=stop,
                ready=lambda p: print(f"serving on http://{host}:{p}", flush=True),
            )  # fmt: skip
        )

        def on_signal():  # the first one drains, a second one stops at once
            if stop.is_set():
                task.cancel()
            stop.set()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(main())


def predict(
    file: str = typer.Argument("-", help="File of ElasticCTR lines, or - for stdin."),
    url: str = typer.Option(
        f"http://127.0.0.1:{SERVING_PORT}", envvar=ENV_SERVING_URL, help="Service base URL."
    ),
    token_file: Path | None = typer.Option(
        None, help=f"Bearer token file (else ${ENV_SERVING_TOKEN})."
    ),
    chunk: int = typer.Option(500, min=1, help="Samples per request."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the summary, no probabilities."),
    scenario: str | None = typer.Option(
        None, "--scenario", "-s", help="Scenario of the platform (default: the default one)."
    ),
    no_model_ok: bool = typer.Option(
        False,
        "--no-model-ok",
        help="Exit 0 when the service answers that no model version exists yet (helm test "
        "right after an install).",
    ),
    wait_ready: float = typer.Option(
        0.0,
        "--wait-ready",
        min=0.0,
        help="Keep asking for up to this many seconds while the service cannot answer yet "
        "(connection refused, 502/503/504 other than no_model): a helm test right after an "
        "install or upgrade. 0: the usual 4 retries (3.7 s).",
    ),
) -> None:
    """Predict click probabilities for sample lines; AUC and logloss from their labels.

    Prints one probability per sample, then a summary line on stderr.

    Example:

      ectl predict data.txt --url http://127.0.0.1:8600
    """
    from elasticctr.serving.client import NoModelYet, ServingClient, retry_delays_for

    if file == "-":
        data, source = sys.stdin.buffer.read(), "<stdin>"
    else:
        try:
            data, source = Path(file).read_bytes(), file
        except OSError as exc:
            raise EctlError(f"cannot read {file}: {exc.strerror}") from exc
    client = ServingClient(url, _token(token_file), scenario=scenario,
                           retry_delays=retry_delays_for(wait_ready))  # fmt: skip
    try:
        result = client.predict_file(data, source, chunk)
    except NoModelYet as exc:
        if not no_model_ok:
            raise
        typer.echo(f"serving is up and has no model version yet: {exc.message}", err=True)
        return
    finally:
        client.close()
    if not quiet:
        sys.stdout.write("".join(f"{p:.6f}\n" for p in result.probabilities))
        sys.stdout.flush()
    auc_text = "n/a (one class)" if result.auc is None else f"{result.auc:.6f}"
    typer.echo(
        f"samples={len(result.probabilities)} version={','.join(result.versions)} "
        f"auc={auc_text} logloss={result.logloss:.6f}",
        err=True,
    )


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("predict")(predict)
