"""The data layer: ElasticCTR line format, data.config / slot.conf, storage URLs, partitions.

Owns reading and writing sample data and its configuration. It must not know about
models, parameter servers or serving: trainers and tools import it, never the reverse.
"""

from __future__ import annotations

from elasticctr.data.parser import (
    FileStats,
    LineParser,
    SlotBatch,
    iter_batches,
    parse_bytes,
    parse_lines,
)

__all__ = [
    "FileStats",
    "LineParser",
    "SlotBatch",
    "iter_batches",
    "parse_bytes",
    "parse_lines",
]
