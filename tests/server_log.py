"""The log file of a test server process (MiniHdfs, SeaweedS3): where it is, its tail."""

from __future__ import annotations

from pathlib import Path


def log_path(base_dir: Path) -> Path:
    """`<base_dir>.log` beside the server's folder (kept when the folder is removed)."""
    return base_dir.parent / f"{base_dir.name}.log"


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
