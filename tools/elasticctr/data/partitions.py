"""Hourly partitions: ``{DATASET_PATH}/{YYYYMMDD}/{HH}/part-*`` plus a ``donefile``.

A partition exists for readers only once its donefile does (writers put it last), so a
half-uploaded hour is never trained on. `list_partitions` answers "what is ready in
[start, end] now"; `follow_partitions` yields hours in order as they become ready and,
with no end, keeps waiting for new hours until its stop event is set.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from elasticctr.constants import DATA_FILE_PREFIX, DONEFILE
from elasticctr.data import storage
from elasticctr.errors import EctlError
from elasticctr.versions import format_date_hour, parse_date_hour

log = logging.getLogger(__name__)
HOUR = dt.timedelta(hours=1)


@dataclass(frozen=True, order=True)
class Partition:
    hour: dt.datetime
    url: str

    @property
    def id(self) -> str:
        """``YYYYMMDD/HH``: the partition's name, also the model version id it produces."""
        return format_date_hour(self.hour)


def _as_hour(value: str | dt.datetime) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value.replace(minute=0, second=0, microsecond=0)
    try:
        return parse_date_hour(value)
    except ValueError as exc:
        raise EctlError(f"bad date-hour: {exc}") from None


def partition_url(root: str, hour: str | dt.datetime) -> str:
    when = _as_hour(hour)
    return storage.join(root, format_date_hour(when))


def partition(root: str, hour: str | dt.datetime) -> Partition:
    when = _as_hour(hour)
    return Partition(when, partition_url(root, when))


def is_ready(root: str, hour: str | dt.datetime, hdfs_ugi: str | None = None) -> bool:
    return storage.exists(storage.join(partition_url(root, hour), DONEFILE), hdfs_ugi)


def data_files(part: Partition | str, hdfs_ugi: str | None = None) -> list[str]:
    """URLs of the partition's data files (``part-*``), sorted by name."""
    url = part.url if isinstance(part, Partition) else part
    return [
        storage.join(url, name)
        for name, is_dir in storage.list_names(url, hdfs_ugi)
        if not is_dir and name.startswith(DATA_FILE_PREFIX)
    ]


def list_partitions(
    root: str,
    start: str | dt.datetime | None = None,
    end: str | dt.datetime | None = None,
    hdfs_ugi: str | None = None,
) -> list[Partition]:
    """Ready partitions (donefile present) with start <= hour <= end, oldest first.

    Lists day folders, then hour folders, so sparse data costs one listing per day
    plus one per hour found; folders that are not ``YYYYMMDD``/``HH`` are ignored.
    """
    lo = _as_hour(start) if start else None
    hi = _as_hour(end) if end else None
    found = []
    for day, is_dir in storage.list_names(root, hdfs_ugi):
        if not is_dir or len(day) != 8 or not day.isdigit():
            continue
        try:
            day_start = parse_date_hour(f"{day}/00")
        except ValueError:
            continue
        if (lo and day_start + dt.timedelta(hours=23) < lo) or (hi and day_start > hi):
            continue
        day_url = storage.join(root, day)
        for hh, hour_is_dir in storage.list_names(day_url, hdfs_ugi):
            if not hour_is_dir or len(hh) != 2 or not hh.isdigit() or int(hh) > 23:
                continue
            when = day_start.replace(hour=int(hh))
            if (lo and when < lo) or (hi and when > hi):
                continue
            url = storage.join(day_url, hh)
            names = {name for name, _ in storage.list_names(url, hdfs_ugi)}
            if DONEFILE in names:
                found.append(Partition(when, url))
    return sorted(found)


def _explain_wait(root: str, hour: dt.datetime, hdfs_ugi: str | None) -> None:
    """Say why an hour is not ready when its wait begins. A dataset root with nothing under
    it yet is waited for like a missing hour (users install first and their pipeline writes
    the first hour later), with a warning naming the root in case the path is wrong; a
    missing bucket or an unreadable store is an error (`storage.list_names`). An hour with
    data files but no donefile is logged (producers write the donefile last, so it is
    waited for, never trained on half-written)."""
    if not storage.list_names(root, hdfs_ugi):
        log.warning(
            "%s: nothing under the dataset root yet; waiting for partitions (if none are "
            "coming, check global.data.path / DATASET_PATH)",
            root,
        )
        return
    url = partition_url(root, hour)
    names = [name for name, is_dir in storage.list_names(url, hdfs_ugi) if not is_dir]
    if any(name.startswith(DATA_FILE_PREFIX) for name in names):
        log.warning(
            "%s: data files but no %s: waiting for it (the producer writes it last)",
            url,
            DONEFILE,
        )


def follow_partitions(
    root: str,
    start: str | dt.datetime,
    end: str | dt.datetime | None = None,
    *,
    poll_interval: float = 60.0,
    stop: threading.Event | None = None,
    skip_missing_after: float | None = None,
    hdfs_ugi: str | None = None,
) -> Iterator[Partition]:
    """Yield partitions hour by hour from ``start``, waiting for each donefile.

    Ends after ``end`` (inclusive), or never when ``end`` is None, until ``stop`` is set.
    Hours are strictly in order, as in ElasticCTR; with ``skip_missing_after`` (seconds) an
    hour that is still missing while a later hour is ready is skipped after that long,
    so one lost hour does not stall training forever (the skip is logged).
    """
    stop = stop or threading.Event()
    hour = _as_hour(start)
    last = _as_hour(end) if end else None
    waiting_since: float | None = None
    while not stop.is_set():
        if last is not None and hour > last:
            return
        if is_ready(root, hour, hdfs_ugi):
            waiting_since = None
            yield partition(root, hour)
            hour += HOUR
            continue
        now = time.monotonic()
        if waiting_since is None:
            _explain_wait(root, hour, hdfs_ugi)
        waiting_since = waiting_since if waiting_since is not None else now
        if skip_missing_after is not None and now - waiting_since >= skip_missing_after:
            later = list_partitions(root, hour + HOUR, last, hdfs_ugi)
            if later:
                log.warning(
                    "partition %s still has no %s after %.0fs while %s is ready: skipping it",
                    format_date_hour(hour),
                    DONEFILE,
                    now - waiting_since,
                    later[0].id,
                )
                hour = later[0].hour
                waiting_since = None
                continue
        stop.wait(poll_interval)
