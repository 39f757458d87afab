"""The model store: open it (URL, fileserver token, HDFS user, HDFS base address), list
its versions, read and fetch them verified, publish new ones atomically.

Every part that touches the store goes through `open_store`: the training export
(publish), cube-transfer and `ectl cube build` (fetch sparse), serving (fetch dense or
whole, newest version), `ectl status`/quickstart (list, read the manifest). What a
version *is* (id, manifest, sha256, verify) is `elasticctr.versions`.

Opening reads, when not passed explicitly:

- ``ELASTICCTR_MODEL_STORE`` the store URL (global.modelStore): a path, ``file://``,
  ``http(s)://`` (the fileserver), ``hdfs://`` or ``s3://bucket/prefix``; ``hdfs:///path``
  takes the namenode from the HDFS base address (global.data.hdfsAddress / data.config's
  HDFS_ADDRESS); an s3:// store is reached as `elasticctr.data.storage.S3Settings` says
  (AWS_ENDPOINT_URL, AWS_REGION, ELASTICCTR_S3_PATH_STYLE and the AWS credentials);
- ``ELASTICCTR_FILESERVER_TOKEN`` the bearer token sent on every http(s) request, reads
  included (a fileserver may protect reads);
- ``HDFS_UGI`` (``user,password``) whose user is the HDFS user.

Failures are `EctlError`s that name the URL and the HTTP status or HDFS error, with a
hint about the token where it helps; an unreadable store is never mistaken for an
empty one.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticctr import versions
from elasticctr.constants import (
    DONEFILE,
    ENV_FILESERVER_TOKEN,
    ENV_HDFS_UGI,
    ENV_MODEL_STORE,
)
from elasticctr.data import storage
from elasticctr.errors import EctlError


def redact_url(text: str, url: str | None = None) -> str:
    """`text` without the credentials a store URL may carry: the password of its
    userinfo (``http://user:***@host``) and its query string (``?***``, e.g. a presigned
    signature). `url` is the URL whose secrets to hide in `text` (an error message
    naming it); by default `text` is that URL itself."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url if url is not None else text)
    except ValueError:
        return text
    if "://" not in (url if url is not None else text):
        return text
    secrets = []
    if parts.password:
        secrets.append(f":{parts.password}@")
    if parts.query:
        secrets.append(f"?{parts.query}")
    for secret in secrets:
        text = text.replace(secret, ":***@" if secret.endswith("@") else "?***")
    return text


def with_hdfs_address(url: str, hdfs_address: str | None) -> str:
    """``hdfs:///models`` + ``hdfs://nn:9000`` -> ``hdfs://nn:9000/models``."""
    if url.startswith("hdfs:///") and hdfs_address:
        from elasticctr.data.config import normalize_hdfs_address

        return normalize_hdfs_address(hdfs_address) + "/" + url[len("hdfs:///") :]
    return url


@dataclass(frozen=True)
class ModelStore:
    """An opened model store; `url` is its root (the folder that holds versions/)."""

    url: str
    token: str | None = None
    hdfs_ugi: str | None = None

    # --- addressing -------------------------------------------------------------------

    def local_root(self) -> Path | None:
        """The store's folder when it is local (a path or file://), else None."""
        if self.url.startswith("file://"):
            return Path(self.url[len("file://") :])
        if "://" not in self.url:
            return Path(self.url)
        return None

    def url_of(self, *parts: str) -> str:
        return storage.join(self.url, *parts) if parts else self.url

    def version_url(self, version: str) -> str:
        return self.url_of(versions.version_path(version))

    def _fs(self, url: str):
        return storage.url_to_fs(url, self.hdfs_ugi, token=self.token or "")

    def _call(self, url: str, fn, *args):
        try:
            return fn(*args)
        except EctlError:
            raise
        except Exception as exc:  # fsspec/aiohttp/hdfs-native raise many unrelated types
            raise storage.wrap_error(url, exc) from exc

    # --- listing ----------------------------------------------------------------------

    def _names(self, url: str) -> list[str]:
        """Entry names directly under `url`; [] when it does not exist."""
        if storage.is_s3(url):  # a missing bucket is an error there, not an empty store
            return [name for name, _ in storage.list_names(url)]
        fs, path = self._fs(url)

        def ls() -> list[str]:
            try:
                entries = fs.ls(path, detail=False)
            except FileNotFoundError:
                return []
            names = []
            for entry in entries:
                name = str(entry).rstrip("/")
                if name == path.rstrip("/"):
                    continue
                leaf = posixpath.basename(name.split("://", 1)[-1])
                if not leaf.startswith(".tmp-"):
                    names.append(leaf)
            return names

        return self._call(url, ls)

    def list_versions(self) -> list[str]:
        """Complete versions (valid id and donefile present), oldest first."""
        found: list[str] = []
        local = self.local_root()
        if local is not None:
            base = local / versions.VERSIONS_DIR
            if not base.is_dir():
                return []
            for day in sorted(p for p in base.iterdir() if p.is_dir()):
                for hour in sorted(p for p in day.iterdir() if p.is_dir()):
                    vid = f"{day.name}/{hour.name}"
                    if versions.is_version_id(vid) and (hour / DONEFILE).is_file():
                        found.append(vid)
            return found
        base_url = self.url_of(versions.VERSIONS_DIR)
        for day in sorted(self._names(base_url)):
            if not (len(day) == 8 and day.isdigit()):
                continue
            for hour in sorted(self._names(storage.join(base_url, day))):
                vid = f"{day}/{hour}"
                if versions.is_version_id(vid) and DONEFILE in self._names(
                    storage.join(base_url, day, hour)
                ):
                    found.append(vid)
        return found

    def list_scenarios(self) -> list[str]:
        """Scenarios with a folder under this (platform) store's `scenarios/`, sorted."""
        from elasticctr import scenarios

        names = self._names(self.url_of(scenarios.SCENARIOS_DIR))
        return sorted(n for n in names if n != scenarios.DEFAULT and _is_scenario(n))

    def latest_version(self) -> str | None:
        """Newest complete version, or None when the store has none (errors raise)."""
        found = self.list_versions()
        return found[-1] if found else None

    def has_version(self, version: str) -> bool:
        """Whether the version is published (its donefile exists)."""
        # A listing, not fs.exists: fsspec's HTTP exists() answers False on a 401.
        return DONEFILE in self._names(self.version_url(version))

    # --- reading ----------------------------------------------------------------------

    def read_bytes(self, version: str, rel: str) -> bytes:
        """One file of a version (e.g. its manifest.json)."""
        problem = versions.relpath_problem(rel)
        if problem:
            raise EctlError(f"model version {version}: {problem}")
        url = storage.join(self.version_url(version), rel)
        fs, path = self._fs(url)
        return self._call(url, fs.cat_file, path)

    def read_manifest(self, version: str) -> dict[str, Any]:
        import json

        raw = self.read_bytes(version, versions.MANIFEST)
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise EctlError(
                f"model version {version}: {versions.MANIFEST} unreadable: {exc}"
            ) from None
        if not isinstance(data, dict):
            raise EctlError(f"model version {version}: {versions.MANIFEST} is not an object")
        return data

    def fetch(self, version: str, cache: str | Path, *, only: str | None = None) -> Path:
        """A verified local folder of `version` (just `only`/, e.g. "dense", if given).

        A local store is verified and read in place; a remote one is copied into
        `cache/<version>` (replaced atomically) and verified there. Raises EctlError when
        the version is absent, unfinished or differs from its manifest.
        """
        versions.check_version_id(version)
        where = f"model version {version}"
        local = self.local_root()
        if local is not None:
            vdir = local / versions.VERSIONS_DIR / version
            if not (vdir / DONEFILE).is_file():
                raise EctlError(f"{where}: not in {self.url} (no {vdir / DONEFILE})")
            versions.verify_version(vdir, only=only, where=where)
            return vdir
        if not self.has_version(version):
            raise EctlError(f"{where}: not in {self.url} (no {DONEFILE})")
        dest = Path(cache) / version
        tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}")
        tmp.mkdir(parents=True)
        try:
            (tmp / versions.MANIFEST).write_bytes(self.read_bytes(version, versions.MANIFEST))
            manifest = versions.read_manifest(tmp, where)
            files = manifest.get("files")
            for rel in files if isinstance(files, dict) else ():
                if versions.relpath_problem(rel) or (only and not rel.startswith(only + "/")):
                    continue  # verify_version reports unsafe paths
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                url = storage.join(self.version_url(version), rel)
                fs, path = self._fs(url)
                self._call(url, fs.get_file, path, str(tmp / rel))
            (tmp / DONEFILE).write_text(version + "\n")
            versions.verify_version(tmp, only=only, where=where)
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return dest

    # --- writing ----------------------------------------------------------------------

    def publish(self, local_dir: str | Path, version: str) -> str:
        """Copy a built, verified version into the store, donefile last; return its URL.

        Every file is written atomically (temp + rename on local/HDFS; the fileserver
        renames uploads; an S3 object appears only once uploaded whole), and the donefile
        only after all the others, so a reader never
        sees a version whose donefile exists while files are missing.
        """
        local_dir = Path(local_dir)
        versions.verify_version(local_dir, where=f"model version {version} (local build)")
        target = self.version_url(version)
        if self.has_version(version):
            raise EctlError(f"model version {version} already exists at {target}")
        files = [p for p in sorted(local_dir.rglob("*")) if p.is_file() and p.name != DONEFILE]
        for path in [*files, local_dir / DONEFILE]:  # the donefile makes the version exist
            rel = path.relative_to(local_dir).as_posix()
            storage.put_file(path, storage.join(target, rel), self.hdfs_ugi, token=self.token or "")
        return target

    # --- deleting ---------------------------------------------------------------------

    def delete_all(self) -> bool:
        """Delete this store's root folder with every version in it; False when it did
        not exist. Meant for a scenario's own prefix (`ectl scenario remove --purge`);
        the caller makes sure the URL is one (a platform root is never passed).

        Every version's donefile goes first, so a delete that fails part-way leaves only
        versions that no reader takes for complete."""
        url = self.url
        for version in self.list_versions():
            self._delete(storage.join(self.version_url(version), DONEFILE), folder=False)
        return self._delete(url, folder=True)

    def _delete(self, url: str, *, folder: bool) -> bool:
        local = ModelStore(url).local_root()
        if local is not None:
            if not local.exists():
                return False
            self._call(url, shutil.rmtree if folder else os.unlink, local)
            return True
        if url.startswith(("http://", "https://")):
            return self._call(url, self._delete_http, url)
        fs, path = self._fs(url)
        if not folder:
            self._call(url, fs.rm, path)
            fs.invalidate_cache(path)  # s3fs lists from a cache otherwise
            return True
        if not self._names(url):
            return False
        # Files, not folders, say whether anything was there: an S3 gateway with a
        # filer (SeaweedFS) keeps empty folder entries after their objects are deleted.
        files = [f for f in self._call(url, fs.find, path) if f.rstrip("/") != path.rstrip("/")]
        if files:
            self._call(url, fs.rm, path, True)
        elif not storage.is_s3(url):
            self._call(url, fs.rm, path, True)  # empty folders only
        fs.invalidate_cache(path)
        return bool(files)

    def _delete_http(self, url: str) -> bool:
        """The fileserver deletes a folder with one DELETE (writes need the token)."""
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        resp = httpx.delete(url.rstrip("/"), headers=headers, timeout=60)
        if resp.status_code == 404:
            return False
        if resp.status_code in (401, 403):
            raise EctlError(
                f"{redact_url(url)}: the fileserver refused the delete (HTTP {resp.status_code})",
                hint=f"set {ENV_FILESERVER_TOKEN} to the fileserver's token",
            )
        if resp.status_code >= 300:
            raise EctlError(f"{redact_url(url)}: HTTP {resp.status_code} {resp.text[:200]}")
        return True


def _is_scenario(name: str) -> bool:
    from elasticctr import scenarios

    try:
        scenarios.check_name(name)
    except EctlError:
        return False
    return True


def open_store(
    url: str | None = None,
    *,
    token: str | None = None,
    hdfs_ugi: str | None = None,
    hdfs_address: str | None = None,
) -> ModelStore:
    """Open the model store at `url` (else $ELASTICCTR_MODEL_STORE).

    `token` defaults to $ELASTICCTR_FILESERVER_TOKEN and `hdfs_ugi` to $HDFS_UGI; pass ""
    to send none. `hdfs_address` completes an ``hdfs:///path`` URL.
    """
    url = (url or os.environ.get(ENV_MODEL_STORE) or "").strip()
    if not url:
        raise EctlError(
            "no model store given",
            hint=f"set global.modelStore (or {ENV_MODEL_STORE}) to a path, http(s)://, "
            "hdfs:// or s3://",
        )
    if token is None:
        token = os.environ.get(ENV_FILESERVER_TOKEN) or None
    if hdfs_ugi is None:
        hdfs_ugi = os.environ.get(ENV_HDFS_UGI) or None
    return ModelStore(
        with_hdfs_address(url.rstrip("/") or url, hdfs_address),
        token=token or None,
        hdfs_ugi=hdfs_ugi or None,
    )
