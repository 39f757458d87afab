"""`ectl fileserver`: run the HTTP artifact store (the fileserver image's entry point)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from elasticctr.constants import (
    ENV_FILESERVER_TOKEN,
    FILESERVER_MAX_UPLOAD_BYTES,
    FILESERVER_PORT,
)
from elasticctr.errors import EctlError


def fileserver(
    root: Path = typer.Option(..., "--root", help="Directory to serve (created if missing)."),
    host: str = typer.Option("127.0.0.1", help="Address to bind (0.0.0.0 in a pod)."),
    port: int = typer.Option(FILESERVER_PORT, help="Port to listen on (0 picks a free one)."),
    token_file: Path | None = typer.Option(
        None, help=f"File holding the write token (else ${ENV_FILESERVER_TOKEN})."
    ),
    allow_anonymous_writes: bool = typer.Option(
        False, help="Accept writes without a token (local experiments only)."
    ),
    protect_reads: bool = typer.Option(False, help="Require the token for reads too."),
    max_upload_bytes: int = typer.Option(FILESERVER_MAX_UPLOAD_BYTES, help="Largest upload."),
) -> None:
    """Serve a directory over HTTP: GET/HEAD with ranges, listings, token-protected writes.

    Example:

      ELASTICCTR_FILESERVER_TOKEN=s3cret ectl fileserver --root ./store --port 8080
    """
    from elasticctr.fileserver import serve

    token = os.environ.get(ENV_FILESERVER_TOKEN)
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise EctlError(f"cannot read token file {token_file}: {exc.strerror}") from exc
    if not token and not allow_anonymous_writes:
        raise EctlError(
            "the fileserver needs a write token",
            hint=f"set ${ENV_FILESERVER_TOKEN}, pass --token-file, or --allow-anonymous-writes",
        )
    root.mkdir(parents=True, exist_ok=True)
    serve(
        root,
        host,
        port,
        token=token or None,
        max_upload_bytes=max_upload_bytes,
        read_token=protect_reads,
    )


def register(app: typer.Typer) -> None:
    app.command("fileserver")(fileserver)
