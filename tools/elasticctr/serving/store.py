"""Serving's use of the model store: fetch a version (or just its dense part), verified,
and find the newest one.

Opening the store (fileserver token on reads too, HDFS user), listing and fetching are
`elasticctr.modelstore`; the version contract (ids, manifest, sha256) is
`elasticctr.versions` (docs/contracts.md, "Model store layout"). A version whose files
are missing, truncated or differ from the manifest's sha256 is rejected with an
EctlError; the caller keeps serving the version it has.

With cube, serving needs only `dense/`: the sparse files are cube-transfer's (which
verifies them), and hashing gigabytes of embeddings on a serving replica would only slow
it down, so `fetch(..., dense_only=True)` checks that folder alone.
"""

from __future__ import annotations

from pathlib import Path

from elasticctr.modelstore import open_store
from elasticctr.versions import DENSE_DIR, VERSIONS_DIR, check_version_id

__all__ = ["VERSIONS_DIR", "check_version_id", "fetch", "latest_version", "scenario_names"]


def fetch(store: str, version: str, cache: Path, *, dense_only: bool) -> Path:
    """A verified local directory of `version`: dense/ (+ sparse/ unless dense_only).

    A local store is read in place; a remote one (http fileserver, hdfs://) is copied into
    `cache` first. Raises EctlError if the version is absent, unfinished or corrupt.
    """
    return open_store(store).fetch(version, cache, only=DENSE_DIR if dense_only else None)


def latest_version(store: str) -> str | None:
    """Newest complete version (donefile present) in the store, or None when it has none.

    A store that cannot be read (refused token, unreachable) raises EctlError: it is
    never mistaken for an empty one.
    """
    return open_store(store).latest_version()


def scenario_names(store: str) -> list[str]:
    """The scenarios a platform store holds (folders under `scenarios/`)."""
    return open_store(store).list_scenarios()
