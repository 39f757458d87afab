"""Storage URLs over fsspec: local paths / ``file://``, ``hdfs://host:port/path``, ``http(s)://``,
``s3://bucket/prefix``.

Why a layer at all: every part names data and artifacts by URL (DATASET_PATH, the model
store), and four details must be the same everywhere: how an HDFS_UGI becomes the HDFS
user, how the fileserver's bearer token is sent, how an S3 store is addressed (endpoint,
region, path style, credentials), and that writes are atomic (a reader never sees half a
file).

- ``hdfs://`` goes through the ``hdfs-native`` package's fsspec filesystem (pure Rust
  client, no JVM). The user is the first field of HDFS_UGI (``user,group``); hdfs-native
  reads it from ``HADOOP_USER_NAME``, so this module sets that variable for the process.
- ``http(s)://`` is fsspec's HTTP filesystem (the fileserver serves fsspec-compatible
  listings). Writes send ``Authorization: Bearer $ELASTICCTR_FILESERVER_TOKEN``; the
  fileserver itself stores uploads atomically.
- ``s3://`` is fsspec's s3fs (aiobotocore). Its settings come from the environment only
  (`S3Settings.from_env`: AWS_ENDPOINT_URL, AWS_REGION, ELASTICCTR_S3_PATH_STYLE,
  AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; the chart sets them from global.s3). An
  object appears only when its upload completes, so writes go straight to the key (no
  rename, which S3 does not have); a failed write aborts the upload. Listings are not
  cached (partitions are polled), and a missing bucket is an error, never an empty
  folder. See docs/storage.md.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import re
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from elasticctr.constants import (
    ENV_FILESERVER_TOKEN,
    ENV_S3_ACCESS_KEY_ID,
    ENV_S3_ENDPOINT,
    ENV_S3_PATH_STYLE,
    ENV_S3_REGION,
    ENV_S3_SECRET_ACCESS_KEY,
    ENV_S3_SESSION_TOKEN,
)
from elasticctr.errors import EctlError

_SCHEMES = ("file", "hdfs", "http", "https", "s3")

S3_BLOCK_BYTES = 8 << 20
"""Ranged GETs and multipart parts of s3:// files (s3fs's default is 50 MiB): a reader
holds at most about one block, and a partial part never becomes visible."""
S3_CONNECT_TIMEOUT = 10
S3_READ_TIMEOUT = 60
S3_MAX_ATTEMPTS = 3
"""botocore's "standard" retry mode, attempts per request (throttling, 5xx, resets)."""
_S3_CREDENTIAL_CODES = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "403",
    "401",
}


@dataclass(frozen=True)
class S3Settings:
    """How s3:// URLs reach their store; one place, read from the environment."""

    endpoint: str = ""
    region: str = ""
    path_style: bool | None = None
    access_key_id: str = field(default="", repr=False)
    secret_access_key: str = field(default="", repr=False)
    session_token: str = field(default="", repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> S3Settings:
        env = os.environ if env is None else env
        raw = (env.get(ENV_S3_PATH_STYLE) or "").strip().lower()
        if raw in ("", "auto"):
            path_style = None
        elif raw in ("1", "true", "yes", "path"):
            path_style = True
        elif raw in ("0", "false", "no", "virtual"):
            path_style = False
        else:
            raise EctlError(
                f"{ENV_S3_PATH_STYLE}={raw!r} is not true or false",
                hint="true for path-style requests (SeaweedFS, MinIO), false for virtual-hosted",
            )
        return cls(
            endpoint=(env.get(ENV_S3_ENDPOINT) or "").strip().rstrip("/"),
            region=(env.get(ENV_S3_REGION) or "").strip(),
            path_style=path_style,
            access_key_id=(env.get(ENV_S3_ACCESS_KEY_ID) or "").strip(),
            secret_access_key=(env.get(ENV_S3_SECRET_ACCESS_KEY) or "").strip(),
            session_token=(env.get(ENV_S3_SESSION_TOKEN) or "").strip(),
        )

    @property
    def where(self) -> str:
        """The endpoint as users named it, for messages."""
        return self.endpoint or "AWS S3 (no endpoint set)"

    def fs_kwargs(self) -> dict[str, Any]:
        """Arguments of s3fs.S3FileSystem (fsspec caches one instance per distinct set)."""
        config: dict[str, Any] = {
            "connect_timeout": S3_CONNECT_TIMEOUT,
            "read_timeout": S3_READ_TIMEOUT,
            "retries": {"max_attempts": S3_MAX_ATTEMPTS, "mode": "standard"},
        }
        if self.path_style is not None:
            config["s3"] = {"addressing_style": "path" if self.path_style else "virtual"}
        kwargs: dict[str, Any] = {
            "use_listings_cache": False,  # partitions and versions are polled
            "default_block_size": S3_BLOCK_BYTES,
            "fixed_upload_size": True,  # every multipart part is one block (the last less)
            "config_kwargs": config,
        }
        if self.endpoint:
            kwargs["endpoint_url"] = self.endpoint
        if self.region:
            kwargs["client_kwargs"] = {"region_name": self.region}
        if self.access_key_id or self.secret_access_key:
            kwargs["key"] = self.access_key_id
            kwargs["secret"] = self.secret_access_key
            if self.session_token:
                kwargs["token"] = self.session_token
        return kwargs


def s3_env_from_values(values: Mapping[str, Any]) -> dict[str, str]:
    """`global.s3` of a values file as the environment the chart gives pods (endpoint,
    region, path style; never credentials, which come from a Secret or the shell)."""
    s3 = ((values or {}).get("global") or {}).get("s3") or {}
    if not isinstance(s3, Mapping):
        return {}
    env = {}
    if s3.get("endpoint"):
        env[ENV_S3_ENDPOINT] = str(s3["endpoint"])
    if s3.get("region"):
        env[ENV_S3_REGION] = str(s3["region"])
    if isinstance(s3.get("pathStyle"), bool):
        env[ENV_S3_PATH_STYLE] = "true" if s3["pathStyle"] else "false"
    return env


def apply_s3_values(values: Mapping[str, Any]) -> None:
    """Local runs read the same values file as pods: set what `global.s3` says where the
    environment does not set it already (in a pod the chart has set it from the same
    values), so this process and the processes it starts reach the same store."""
    for name, value in s3_env_from_values(values).items():
        os.environ.setdefault(name, value)


def is_s3(url: str) -> bool:
    return _scheme(url) == "s3"


def hdfs_user(hdfs_ugi: str | None) -> str | None:
    """The user of an ElasticCTR HDFS_UGI (``user,password`` or ``user,group``) or None."""
    if not hdfs_ugi or not hdfs_ugi.strip():
        return None
    user = hdfs_ugi.split(",", 1)[0].strip()
    if not user:
        raise EctlError(f"HDFS_UGI {hdfs_ugi!r} has no user name before the comma")
    return user


def _scheme(url: str) -> str:
    parsed = urllib.parse.urlparse(url)
    # A Windows-style drive letter or a bare path has no (or a one-letter) scheme.
    return parsed.scheme.lower() if len(parsed.scheme) > 1 else ""


def url_to_fs(
    url: str, hdfs_ugi: str | None = None, *, token: str | None = None
) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and the path inside it for a storage URL (or a bare local path).

    `token` is the fileserver's bearer token for http(s):// (sent on reads and writes);
    None means $ELASTICCTR_FILESERVER_TOKEN.
    """
    if not url:
        raise EctlError(
            "empty storage URL", hint="use a path, file://, hdfs://, s3:// or http(s)://"
        )
    scheme = _scheme(url)
    if scheme in ("", "file"):
        path = urllib.parse.urlparse(url).path if scheme else url
        return LocalFileSystem(), os.path.abspath(os.path.expanduser(path))
    if scheme == "hdfs":
        parsed = urllib.parse.urlparse(url)
        if not parsed.hostname:
            raise EctlError(
                f"{url}: an hdfs:// URL needs the namenode, e.g. hdfs://namenode:9000/path"
            )
        user = hdfs_user(hdfs_ugi)
        if user:
            os.environ["HADOOP_USER_NAME"] = user
        from hdfs_native.fsspec import HdfsFileSystem

        try:
            port = parsed.port
        except ValueError as exc:
            raise EctlError(f"{url}: bad port ({exc})") from None
        # One instance per (host, port, user): fsspec caches by constructor arguments.
        fs = HdfsFileSystem(host=parsed.hostname, port=port, hdfs_user=user or "")
        return fs, parsed.path or "/"
    if scheme in ("http", "https"):
        from fsspec.implementations.http import HTTPFileSystem

        headers = {}
        if token is None:
            token = os.environ.get(ENV_FILESERVER_TOKEN)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        fs = HTTPFileSystem(client_kwargs={"headers": headers} if headers else None)
        return fs, url
    if scheme == "s3":
        parsed = urllib.parse.urlparse(url)
        if not parsed.netloc:
            raise EctlError(f"{url}: an s3:// URL needs the bucket, e.g. s3://bucket/prefix")
        from s3fs import S3FileSystem

        fs = S3FileSystem(**S3Settings.from_env().fs_kwargs())
        return fs, (parsed.netloc + "/" + parsed.path.strip("/")).rstrip("/")
    raise EctlError(
        f"unsupported storage URL scheme {scheme!r} in {url}",
        hint=f"use a path or one of {', '.join(s + '://' for s in _SCHEMES)}",
    )


def join(url: str, *parts: str) -> str:
    """Append path parts to a URL or path with '/' (never the OS separator for URLs)."""
    out = url
    for part in parts:
        out = out.rstrip("/") + "/" + part.strip("/")
    return out


def wrap_error(url: str, exc: BaseException) -> EctlError:
    """A storage failure as a user-facing error: the URL, the HTTP status or HDFS class,
    and a hint (token, HDFS_UGI) where one helps."""
    if isinstance(exc, EctlError):
        return exc
    if _scheme(url) == "s3":
        s3_error = _s3_error(url, exc)
        if s3_error is not None:
            return s3_error
    if isinstance(exc, FileNotFoundError):
        return EctlError(f"{url}: not found")
    if isinstance(exc, IsADirectoryError):
        return EctlError(f"{url}: is a directory, not a file")
    if isinstance(exc, RuntimeError):
        # hdfs-native reports namenode errors as RuntimeError('RPCError("<java class>",
        # "<message>\\n\\tat ...")') with an escaped Java stack: keep class and first line.
        text = str(exc).replace("\\n", "\n").replace('\\"', '"')
        match = re.match(r'\s*RPCError\("([^"]+)", "(.*)', text, re.S)
        java_class, detail = match.groups() if match else ("", text)
        detail = (detail.strip().splitlines() or [type(exc).__name__])[0].rstrip('")')[:300]
        if "AccessControlException" in java_class or "Permission denied" in detail:
            return EctlError(
                f"{url}: permission denied on HDFS ({detail})",
                hint="check HDFS_UGI (the user) and the folder's owner and mode",
            )
        return EctlError(f"{url}: HDFS error: {java_class.rsplit('.', 1)[-1]} {detail}".strip())
    status = getattr(exc, "status", None)
    if status in (401, 403):
        return EctlError(
            f"{url}: the fileserver refused the request (HTTP {status})",
            hint=f"set {ENV_FILESERVER_TOKEN} to the fileserver's token",
        )
    if isinstance(status, int):
        reason = getattr(exc, "message", "") or ""
        return EctlError(f"{url}: HTTP {status} {reason}".rstrip())
    if type(exc).__module__.startswith("aiohttp"):
        return EctlError(
            f"{url}: cannot reach the server ({type(exc).__name__}: {exc})",
            hint="check the URL and that the fileserver is running",
        )
    return EctlError(f"{url}: {type(exc).__name__}: {exc}")


def _s3_code(exc: BaseException) -> tuple[str, str]:
    """(error code, message) of an S3 error response behind `exc` (s3fs translates
    botocore's ClientError into OSErrors and keeps it as the cause), else ("", "")."""
    for err in (exc, exc.__cause__, exc.__context__):
        response = getattr(err, "response", None)
        if isinstance(response, dict) and isinstance(response.get("Error"), dict):
            error = response["Error"]
            return str(error.get("Code") or ""), str(error.get("Message") or "")
    return "", ""


def _no_bucket(url: str, settings: S3Settings) -> EctlError:
    return EctlError(
        f"{url}: bucket {urllib.parse.urlparse(url).netloc!r} does not exist at {settings.where}",
        hint="create the bucket (ectl never creates buckets) or fix the URL and "
        f"{ENV_S3_ENDPOINT} (global.s3.endpoint)",
    )


def _s3_error(url: str, exc: BaseException) -> EctlError | None:
    """An S3 failure in one line: missing bucket, refused credentials, unreachable
    endpoint, missing credentials, an object gone mid-read. None: not S3-specific."""
    settings = S3Settings.from_env()
    code, message = _s3_code(exc)
    detail = f"{code}: {message}" if message and message != code else code
    if code == "NoSuchBucket":
        return _no_bucket(url, settings)
    if isinstance(exc, FileNotFoundError) and code != "NoSuchKey":
        # A HEAD on a key of a missing bucket is a bare 404: ask the bucket itself.
        fs, path = url_to_fs(url)
        _s3_require_bucket(fs, url, path)
        return None
    if code in _S3_CREDENTIAL_CODES:
        return EctlError(
            f"{url}: {settings.where} refused the request ({detail})",
            hint=f"check {ENV_S3_ACCESS_KEY_ID} / {ENV_S3_SECRET_ACCESS_KEY} "
            "(global.s3.existingSecret) and the bucket's policy",
        )
    name = type(exc).__name__
    if name == "NoCredentialsError":
        return EctlError(
            f"{url}: no S3 credentials",
            hint=f"set {ENV_S3_ACCESS_KEY_ID} and {ENV_S3_SECRET_ACCESS_KEY} "
            "(global.s3.existingSecret) or give the pod an IAM role",
        )
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError"):
        return EctlError(
            f"{url}: cannot reach the S3 endpoint {settings.where} ({exc})",
            hint=f"check {ENV_S3_ENDPOINT} (global.s3.endpoint) and that the store is running",
        )
    if name == "FileExpired" or code == "PreconditionFailed":
        return EctlError(
            f"{url}: the object changed while being read",
            hint="objects of a partition must not change after its donefile is written",
        )
    if code:
        return EctlError(f"{url}: S3 error {detail}".rstrip())
    return None


def _s3_require_bucket(fs, url: str, path: str) -> None:
    """Raise when the bucket of `url` does not exist (or cannot be reached); S3 answers
    a missing bucket like a missing key, which must not read as "nothing there yet"."""
    try:
        fs.call_s3("head_bucket", Bucket=path.split("/", 1)[0])
    except Exception as exc:  # botocore/aiohttp/s3fs raise many unrelated types
        if isinstance(exc, FileNotFoundError) or _s3_code(exc)[0] in ("404", "NoSuchBucket"):
            raise _no_bucket(url, S3Settings.from_env()) from None
        raise wrap_error(url, exc) from exc


def exists(url: str, hdfs_ugi: str | None = None) -> bool:
    fs, path = url_to_fs(url, hdfs_ugi)
    try:
        found = bool(fs.exists(path))
    except FileNotFoundError:
        found = False
    except Exception as exc:  # botocore/aiohttp/hdfs-native raise many unrelated types
        raise wrap_error(url, exc) from exc
    if not found and is_s3(url):
        _s3_require_bucket(fs, url, path)
    return found


def list_names(url: str, hdfs_ugi: str | None = None) -> list[tuple[str, bool]]:
    """Entries directly under ``url`` as sorted (name, is_dir); [] if it does not exist."""
    fs, path = url_to_fs(url, hdfs_ugi)
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        if is_s3(url):
            _s3_require_bucket(fs, url, path)
        return []
    except Exception as exc:  # botocore/aiohttp/hdfs-native raise many unrelated types
        raise wrap_error(url, exc) from exc
    out = []
    base = path.rstrip("/")
    for entry in entries:
        name = entry["name"].rstrip("/")
        if name.rstrip("/") == base:
            continue  # some filesystems list the directory itself
        leaf = posixpath.basename(urllib.parse.urlparse(name).path.rstrip("/") or name)
        leaf = urllib.parse.unquote(leaf)
        if leaf.startswith(".tmp-"):
            continue  # an atomic write in progress
        out.append((leaf, entry.get("type") == "directory"))
    return sorted(set(out))


_MAGIC = ((b"\x1f\x8b", "gzip"), (b"BZh", "bz2"))
"""Leading bytes of compressed files, for files whose name has no .gz/.bz2 suffix."""


def sniff_compression(head: bytes) -> str | None:
    """'gzip'/'bz2' when `head` (the first bytes of a file) starts like one, else None."""
    for magic, name in _MAGIC:
        if head.startswith(magic) and (name != "bz2" or head[3:4].isdigit()):
            return name
    return None


def open_input(url: str, hdfs_ugi: str | None = None) -> IO[bytes]:
    """Open for binary reading; compressed files are decompressed transparently.

    The compression comes from the suffix (``.gz``, ``.bz2``, ...) or, without one, from
    the file's first bytes (gzip/bz2 magic), so ``part-00000`` holding gzip data is read
    as text too. The returned object has ``ectl_compression`` (None or the codec) and
    ``ectl_sniffed`` (True when the codec came from the bytes, not the name).
    """
    fs, path = url_to_fs(url, hdfs_ugi)
    compression = fsspec.utils.infer_compression(path)
    sniffed = False
    try:
        raw = fs.open(path, "rb")
        if is_s3(url):
            raw = _GuardedReader(raw, url)
        if not compression:
            head = raw.read(4)
            raw.seek(0)
            compression = sniff_compression(head)
            sniffed = compression is not None
    except EctlError:
        raise
    except Exception as exc:  # botocore/aiohttp/hdfs-native raise many unrelated types
        raise wrap_error(url, exc) from exc
    fh = raw
    if compression:
        from fsspec.compression import compr

        fh = compr[compression](raw, mode="rb")
    fh.ectl_compression = compression
    fh.ectl_sniffed = sniffed
    return fh


class _GuardedReader(io.RawIOBase):
    """A remote file whose read errors (an object deleted or replaced after it was
    opened, a dropped connection) are EctlErrors naming the URL, like open errors."""

    def __init__(self, raw, url: str) -> None:
        super().__init__()
        self._raw, self._url = raw, url

    def _guard(self, fn, *args):
        try:
            return fn(*args)
        except EctlError:
            raise
        except FileNotFoundError as exc:
            raise EctlError(
                f"{self._url}: removed while being read (at byte {self._raw.tell()})",
                hint="objects of a partition must not change or go away after its "
                "donefile is written",
            ) from exc
        except Exception as exc:  # botocore/aiohttp/s3fs raise many unrelated types
            raise wrap_error(self._url, exc) from exc

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return self._guard(self._raw.read, size)

    def readinto(self, buf) -> int:
        data = self.read(len(buf))
        buf[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._guard(self._raw.seek, offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    @property
    def size(self) -> int:
        return self._raw.size

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def open_range(
    url: str,
    start: int = 0,
    end: int | None = None,
    hdfs_ugi: str | None = None,
    *,
    block_bytes: int = 4 << 20,
) -> Iterator[bytes]:
    """Bytes ``[start, end)`` of a stored file (``end`` None: to the file's end), as it is
    stored (no decompression), in blocks of at most ``block_bytes``.

    Each block is one ranged read of the filesystem (``cat_file``: an HTTP ``Range`` GET
    with the fileserver's token, an HDFS read at an offset, an object store's ranged GET),
    so a consumer can stop after any block and resume at any offset with a new call. A
    file that ends before ``end`` raises (it was truncated or replaced while read): the
    range is never returned short. Errors are `EctlError`s naming the URL (`wrap_error`)
    and keep the filesystem's exception as ``__cause__``.
    """
    if start < 0 or (end is not None and end < start) or block_bytes <= 0:
        raise EctlError(f"{url}: bad byte range [{start}, {end}) or block size {block_bytes}")
    fs, path = url_to_fs(url, hdfs_ugi)
    pos = start
    while end is None or pos < end:
        want = block_bytes if end is None else min(block_bytes, end - pos)
        try:
            block = fs.cat_file(path, start=pos, end=pos + want)
        except Exception as exc:  # fsspec backends raise unrelated types
            if not _past_end(exc):
                raise wrap_error(url, exc) from exc
            block = b""
        if block:
            pos += len(block)
            yield bytes(block)
        if len(block) < want:
            if end is not None and pos < end:
                raise EctlError(
                    f"{url}: the file ends at or before byte {pos}, inside the range "
                    f"[{start}, {end}) being read (truncated or replaced while read?)"
                )
            return


def _past_end(exc: BaseException) -> bool:
    """A ranged read refused because it starts at or past the file's end (HTTP 416, S3
    InvalidRange): the file ends exactly where the previous block did."""
    return getattr(exc, "status", None) == 416 or _s3_code(exc)[0] == "InvalidRange"


def connect(url: str, hdfs_ugi: str | None = None) -> None:
    """Make the client of `url`'s store now -- its imports, session and connection
    settings -- so the first read does not pay for them (s3fs and botocore: about 0.5
    CPU-s). Sends no request: a store that is down is reported by the first read."""
    fs, _ = url_to_fs(url, hdfs_ugi)
    if is_s3(url):
        try:
            fs.connect()  # the aiobotocore client; fsspec keeps this instance cached
        except Exception as exc:  # botocore's configuration errors have several types
            raise wrap_error(url, exc) from exc


def read_bytes(url: str, hdfs_ugi: str | None = None) -> bytes:
    with open_input(url, hdfs_ugi) as fh:
        return fh.read()


def read_text(url: str, hdfs_ugi: str | None = None) -> str:
    data = read_bytes(url, hdfs_ugi)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EctlError(f"{url}: not UTF-8 text ({exc})") from None


@contextlib.contextmanager
def open_atomic(
    url: str, hdfs_ugi: str | None = None, *, token: str | None = None
) -> Iterator[IO[bytes]]:
    """Write a file so readers see either nothing or all of it.

    Local and HDFS: write ``.tmp-<name>-<uuid>`` beside the target, then rename over it
    (a failed write removes the temp file). HTTP: one upload; the fileserver renames.
    S3: straight to the key (an object appears only when its upload completes); a failed
    write aborts the upload and leaves the old object.
    """
    fs, path = url_to_fs(url, hdfs_ugi, token=token)
    parent, name = posixpath.split(path.rstrip("/"))
    if is_s3(url):
        yield from _s3_write(fs, path, url)
        return
    if _scheme(url) in ("http", "https"):
        buf = io.BytesIO()
        yield buf
        try:
            fs.pipe_file(path, buf.getvalue())
        except Exception as exc:  # aiohttp/fsspec raise several unrelated types
            raise wrap_error(url, exc) from exc
        return
    if isinstance(fs, LocalFileSystem):
        parent = os.path.dirname(path)
    try:
        fs.makedirs(parent, exist_ok=True)
    except (OSError, RuntimeError) as exc:
        raise wrap_error(url, exc) from exc
    tmp = posixpath.join(parent, f".tmp-{name}-{uuid.uuid4().hex[:12]}")
    if isinstance(fs, LocalFileSystem):
        tmp = os.path.join(parent, f".tmp-{name}-{uuid.uuid4().hex[:12]}")
    try:
        fh = fs.open(tmp, "wb")
    except (OSError, RuntimeError) as exc:
        raise wrap_error(url, exc) from exc
    try:
        yield fh
        fh.close()
        if isinstance(fs, LocalFileSystem):
            os.replace(tmp, path)
        elif _scheme(url) == "hdfs":
            fs.mv(tmp, path, overwrite=True)  # HDFS rename2(OVERWRITE): one atomic step
        else:
            if fs.exists(path):
                fs.rm(path)
            fs.mv(tmp, path)
    except BaseException:
        with contextlib.suppress(Exception):
            fh.close()
        with contextlib.suppress(Exception):
            fs.rm(tmp)
        raise


def _s3_write(fs, path: str, url: str) -> Iterator[IO[bytes]]:
    try:
        fh = fs.open(path, "wb")
    except Exception as exc:  # botocore/aiohttp/s3fs raise many unrelated types
        raise wrap_error(url, exc) from exc
    try:
        yield fh
    except BaseException:
        with contextlib.suppress(Exception):
            fh.discard()  # aborts a multipart upload; nothing was put
        fh.closed = True
        raise
    try:
        fh.close()  # the PUT (or the multipart completion): the object appears now
    except Exception as exc:
        with contextlib.suppress(Exception):
            fh.discard()
        raise wrap_error(url, exc) from exc


HDFS_WRITE_ATTEMPTS = 6
"""Attempts of one atomic HDFS write refused with NotReplicatedYetException, 0.4 s apart
doubling (the namenode's answer while a datanode has not yet reported the file's previous
block; Hadoop's own client retries addBlock the same way, hdfs-native does not)."""


def _not_replicated_yet(exc: BaseException) -> bool:
    while exc is not None:
        if "NotReplicatedYetException" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _retry_hdfs_write(url: str, write: Callable[[], None]) -> None:
    """`write()` (one whole atomic write: a failed one leaves nothing), again while HDFS
    answers NotReplicatedYetException."""
    if _scheme(url) != "hdfs":
        return write()
    for attempt in range(HDFS_WRITE_ATTEMPTS):
        try:
            return write()
        except Exception as exc:  # noqa: BLE001 - re-raised unless it is that answer
            if attempt == HDFS_WRITE_ATTEMPTS - 1 or not _not_replicated_yet(exc):
                raise
            time.sleep(0.4 * 2**attempt)


def write_bytes(
    url: str, data: bytes, hdfs_ugi: str | None = None, *, token: str | None = None
) -> None:
    def write() -> None:
        with open_atomic(url, hdfs_ugi, token=token) as fh:
            fh.write(data)

    _retry_hdfs_write(url, write)


def put_file(
    local: str | os.PathLike, url: str, hdfs_ugi: str | None = None, *, token: str | None = None
) -> None:
    """Upload a local file atomically, streaming (no whole-file copy in memory)."""
    if _scheme(url) in ("http", "https"):
        fs, path = url_to_fs(url, hdfs_ugi, token=token)
        try:
            fs.put_file(os.fspath(local), path)  # the fileserver stores uploads atomically
        except Exception as exc:  # aiohttp/fsspec raise several unrelated types
            raise wrap_error(url, exc) from exc
        return
    import shutil

    def write() -> None:
        with open(local, "rb") as src, open_atomic(url, hdfs_ugi, token=token) as dst:
            shutil.copyfileobj(src, dst, 4 << 20)

    _retry_hdfs_write(url, write)


def write_text(url: str, text: str, hdfs_ugi: str | None = None) -> None:
    write_bytes(url, text.encode("utf-8"), hdfs_ugi)


def makedirs(url: str, hdfs_ugi: str | None = None) -> None:
    fs, path = url_to_fs(url, hdfs_ugi)
    if _scheme(url) in ("http", "https", "s3"):
        return  # the fileserver creates parents on upload; S3 has no folders
    try:
        fs.makedirs(path, exist_ok=True)
    except (OSError, RuntimeError) as exc:
        raise wrap_error(url, exc) from exc
