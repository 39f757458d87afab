"""Readers for ElasticCTR's ``data.config`` and ``slot.conf``, and their values-file form.

ElasticCTR users bring these two files, so they must keep working as inputs:

- ``data.config`` is a shell-style env file: ``[export] KEY=VALUE`` lines, values
  optionally quoted ('...' literal, "..." with ``$VAR``/``${VAR}`` expansion, as in shell),
  ``#`` comments and blank lines. Keys: HDFS_ADDRESS, HDFS_UGI, START_DATE_HR,
  END_DATE_HR, DATASET_PATH, SPARSE_DIM. Variables expand from earlier keys of the file,
  then from the environment; an undefined one is an error (ElasticCTR's template says
  ``hdfs://${IP}:9000``: forgetting to fill it in must not go unnoticed).
- ``slot.conf`` lists one slot id (a non-negative integer) per line.

`DataConfig.to_values()` gives the ``global.data`` keys of the values file
(docs/contracts.md); every problem is reported at once as ``file:line: message``.
"""

from __future__ import annotations

import os
import re
import shlex
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from elasticctr.errors import ValidationError
from elasticctr.versions import (  # partition hours use the version id format
    DATE_HOUR_FORMAT,
    format_date_hour,
    parse_date_hour,
)

KNOWN_KEYS = (
    "HDFS_ADDRESS",
    "HDFS_UGI",
    "START_DATE_HR",
    "END_DATE_HR",
    "DATASET_PATH",
    "SPARSE_DIM",
)
_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def dataset_url(path: str, hdfs_address: str = "") -> str:
    """The full DATASET_PATH URL: a bare path or ``hdfs:///path`` joins HDFS_ADDRESS."""
    path = path.strip()
    address = normalize_hdfs_address(hdfs_address) if hdfs_address else ""
    parsed = urllib.parse.urlparse(path)
    if parsed.scheme == "hdfs" and not parsed.netloc and address:
        return address + "/" + parsed.path.lstrip("/")
    if len(parsed.scheme) <= 1 and address:
        return address + "/" + path.lstrip("/")
    return path


def normalize_hdfs_address(address: str) -> str:
    """``host:port`` or ``hdfs://host:port[/]`` -> ``hdfs://host:port``."""
    address = address.strip().rstrip("/")
    if not address:
        return ""
    if "://" not in address:
        address = "hdfs://" + address
    parsed = urllib.parse.urlparse(address)
    if parsed.scheme != "hdfs" or not parsed.hostname or parsed.path not in ("", "/"):
        raise ValueError(f"{address!r} is not an HDFS namenode address like hdfs://host:9000")
    return f"hdfs://{parsed.netloc}"


@dataclass
class DataConfig:
    """The settings of one data.config file (empty strings when a key is absent)."""

    hdfs_address: str = ""
    hdfs_ugi: str = ""
    start_date_hour: str = ""
    end_date_hour: str = ""
    dataset_path: str = ""
    sparse_dim: int = 0
    source: str = "data.config"
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def dataset_url(self) -> str:
        return dataset_url(self.dataset_path, self.hdfs_address)

    def to_values(self, slots: list[int] | None = None) -> dict[str, Any]:
        """The ``global.data`` map of the values file (docs/contracts.md)."""
        values: dict[str, Any] = {
            "path": self.dataset_url,
            "hdfsAddress": self.hdfs_address,
            "hdfsUgi": self.hdfs_ugi,
            "startDateHour": self.start_date_hour,
            "endDateHour": self.end_date_hour,
            "sparseDim": self.sparse_dim,
        }
        if slots is not None:
            values["slots"] = list(slots)
        return values


def _expand(value: str, env: dict[str, str], where: str, problems: list[str]) -> str:
    def repl(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name in env:
            return env[name]
        if name in os.environ:
            return os.environ[name]
        problems.append(f"{where}: ${name} is not defined (set it above or in the environment)")
        return match.group(0)

    return _VAR.sub(repl, value)


def _shell_value(raw: str, env: dict[str, str], where: str, problems: list[str]) -> str | None:
    """One shell word: quotes removed, $VAR expanded except inside '...'."""
    protected: list[str] = []

    def keep(match: re.Match) -> str:
        protected.append(match.group(0))
        return f"\x00{len(protected) - 1}\x00"

    masked = _expand(re.sub(r"'[^']*'", keep, raw), env, where, problems)
    for i, text in enumerate(protected):
        masked = masked.replace(f"\x00{i}\x00", text)
    try:
        lexer = shlex.shlex(masked, posix=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words = list(lexer)
    except ValueError as exc:
        problems.append(f"{where}: cannot read the value ({exc}; check the quotes)")
        return None
    if len(words) > 1:
        problems.append(f'{where}: value has spaces; quote it (KEY="a b")')
        return None
    return words[0] if words else ""


def parse_data_config(
    text: str, source: str = "data.config", overrides: dict[str, str] | None = None
) -> DataConfig:
    """Parse data.config text; raises ValidationError listing every bad line.

    `overrides` replace keys before their lines are read (`ectl init -hd` gives
    HDFS_ADDRESS): such a line is not expanded, so ElasticCTR's template
    `HDFS_ADDRESS="hdfs://${IP}:9000"` with IP undefined is fine, and later lines that
    use `$HDFS_ADDRESS` see the override.
    """
    problems: list[str] = []
    overrides = dict(overrides or {})
    values: dict[str, str] = dict(overrides)
    lines_of: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{source}:{number}"
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _ASSIGN.match(line)
        if not match:
            problems.append(f"{where}: expected KEY=VALUE (optionally after `export`): {line!r}")
            continue
        key, raw = match.groups()
        if key in overrides:
            lines_of[key] = number
            continue
        value = _shell_value(raw, values, where, problems)
        if value is None:
            continue
        values[key] = value
        lines_of[key] = number

    cfg = DataConfig(source=source)
    cfg.extra = {k: v for k, v in values.items() if k not in KNOWN_KEYS}

    def at(key: str) -> str:
        return f"{source}:{lines_of[key]}" if key in lines_of else source

    if values.get("HDFS_ADDRESS"):
        try:
            cfg.hdfs_address = normalize_hdfs_address(values["HDFS_ADDRESS"])
        except ValueError as exc:
            problems.append(f"{at('HDFS_ADDRESS')}: HDFS_ADDRESS {exc}")
    cfg.hdfs_ugi = values.get("HDFS_UGI", "")
    if cfg.hdfs_ugi and not cfg.hdfs_ugi.split(",", 1)[0].strip():
        problems.append(f"{at('HDFS_UGI')}: HDFS_UGI must start with a user name (user,password)")
    cfg.dataset_path = values.get("DATASET_PATH", "")
    if not cfg.dataset_path:
        problems.append(f"{at('DATASET_PATH')}: DATASET_PATH is missing or empty")
    start = end = None
    for key, attr in (("START_DATE_HR", "start_date_hour"), ("END_DATE_HR", "end_date_hour")):
        raw = values.get(key, "")
        if not raw:
            continue
        try:
            when = parse_date_hour(raw)
        except ValueError as exc:
            problems.append(f"{at(key)}: {key} {exc}")
            continue
        setattr(cfg, attr, format_date_hour(when))
        if key == "START_DATE_HR":
            start = when
        else:
            end = when
    if "START_DATE_HR" not in values or not values["START_DATE_HR"]:
        problems.append(f"{at('START_DATE_HR')}: START_DATE_HR is missing ({DATE_HOUR_FORMAT})")
    if start and end and end < start:
        problems.append(
            f"{at('END_DATE_HR')}: END_DATE_HR {cfg.end_date_hour} is before "
            f"START_DATE_HR {cfg.start_date_hour}"
        )
    raw_dim = values.get("SPARSE_DIM", "")
    if raw_dim:
        if not raw_dim.isdigit() or int(raw_dim) <= 0:
            problems.append(
                f"{at('SPARSE_DIM')}: SPARSE_DIM must be a positive integer: {raw_dim!r}"
            )
        else:
            cfg.sparse_dim = int(raw_dim)
    if problems:
        raise ValidationError(
            f"{source}: {len(problems)} problem(s) in the data config", problems=problems
        )
    return cfg


def parse_slot_conf(text: str, source: str = "slot.conf") -> list[int]:
    """Slot ids in file order; blank lines and ``#`` comments are allowed."""
    problems: list[str] = []
    slots: list[int] = []
    first_seen: dict[int, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        token = line.split("#", 1)[0].strip()
        if not token:
            continue
        where = f"{source}:{number}"
        if not token.isdigit():
            problems.append(f"{where}: slot id must be a non-negative integer, got {token!r}")
            continue
        slot = int(token)
        if slot >= 2**64:
            problems.append(f"{where}: slot id {slot} does not fit in uint64")
            continue
        if slot in first_seen:
            problems.append(f"{where}: duplicate slot {slot} (first on line {first_seen[slot]})")
            continue
        first_seen[slot] = number
        slots.append(slot)
    if not slots and not problems:
        problems.append(f"{source}: no slot ids (one per line)")
    if problems:
        raise ValidationError(f"{source}: {len(problems)} problem(s) in the slot list", problems)
    return slots


def format_slot_conf(slots: list[int]) -> str:
    return "".join(f"{int(s)}\n" for s in slots)


def read_data_config(url: str, hdfs_ugi: str | None = None) -> DataConfig:
    from elasticctr.data.storage import read_text

    return parse_data_config(read_text(url, hdfs_ugi), source=url)


def read_slot_conf(url: str, hdfs_ugi: str | None = None) -> list[int]:
    from elasticctr.data.storage import read_text

    return parse_slot_conf(read_text(url, hdfs_ugi), source=url)
