"""The data layer: ElasticCTR line format, data.config / slot.conf, storage URLs, partitions,
and the `ectl data` tools (generate, profile, convert). See docs/data.md.

Owns reading and writing sample data and its configuration. It must not know about
models, parameter servers or serving: trainers and tools import it, never the reverse.
"""

from __future__ import annotations

from elasticctr.data.parser import (
    BatchStream,
    FileStats,
    LineParser,
    SlotBatch,
    diagnose_line,
    iter_batches,
    parse_bytes,
    parse_lines,
    read_file,
)

__all__ = [
    "BatchStream",
    "FileStats",
    "LineParser",
    "SlotBatch",
    "diagnose_line",
    "iter_batches",
    "parse_bytes",
    "parse_lines",
    "read_file",
]
