"""Storage URLs over fsspec: local paths / ``file://``, ``hdfs://host:port/path``, ``http(s)://``.

Why a layer at all: every part names data and artifacts by URL (DATASET_PATH, the model
store), and three details must be the same everywhere: how an HDFS_UGI becomes the HDFS
user, how the fileserver's bearer token is sent, and that writes are atomic (a reader
never sees half a file).

- ``hdfs://`` goes through the ``hdfs-native`` package's fsspec filesystem (pure Rust
  client, no JVM). The user is the first field of HDFS_UGI (``user,group``); hdfs-native
  reads it from ``HADOOP_USER_NAME``, so this module sets that variable for the process.
- ``http(s)://`` is fsspec's HTTP filesystem (the fileserver serves fsspec-compatible
  listings). Writes send ``Authorization: Bearer $ELASTICCTR_FILESERVER_TOKEN``; the
  fileserver itself stores uploads atomically.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import IO

import fsspec
from fsspec.implementations.local import LocalFileSystem

from elasticctr.constants import ENV_FILESERVER_TOKEN
from elasticctr.errors import EctlError

_SCHEMES = ("file", "hdfs", "http", "https")


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
        raise EctlError("empty storage URL", hint="use a path, file://, hdfs:// or http(s)://")
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


def exists(url: str, hdfs_ugi: str | None = None) -> bool:
    fs, path = url_to_fs(url, hdfs_ugi)
    try:
        return bool(fs.exists(path))
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise wrap_error(url, exc) from exc


def list_names(url: str, hdfs_ugi: str | None = None) -> list[tuple[str, bool]]:
    """Entries directly under ``url`` as sorted (name, is_dir); [] if it does not exist."""
    fs, path = url_to_fs(url, hdfs_ugi)
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return []
    except OSError as exc:
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
        if not compression:
            head = raw.read(4)
            raw.seek(0)
            compression = sniff_compression(head)
            sniffed = compression is not None
    except (OSError, RuntimeError) as exc:
        raise wrap_error(url, exc) from exc
    fh = raw
    if compression:
        from fsspec.compression import compr

        fh = compr[compression](raw, mode="rb")
    fh.ectl_compression = compression
    fh.ectl_sniffed = sniffed
    return fh


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
            if getattr(exc, "status", None) != 416:  # HTTP: the range starts past the end
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
    """
    fs, path = url_to_fs(url, hdfs_ugi, token=token)
    parent, name = posixpath.split(path.rstrip("/"))
    if _scheme(url) in ("http", "https"):
        import io

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


def write_bytes(
    url: str, data: bytes, hdfs_ugi: str | None = None, *, token: str | None = None
) -> None:
    with open_atomic(url, hdfs_ugi, token=token) as fh:
        fh.write(data)


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

    with open(local, "rb") as src, open_atomic(url, hdfs_ugi, token=token) as dst:
        shutil.copyfileobj(src, dst, 4 << 20)


def write_text(url: str, text: str, hdfs_ugi: str | None = None) -> None:
    write_bytes(url, text.encode("utf-8"), hdfs_ugi)


def makedirs(url: str, hdfs_ugi: str | None = None) -> None:
    fs, path = url_to_fs(url, hdfs_ugi)
    if _scheme(url) in ("http", "https"):
        return  # the fileserver creates parents on upload
    try:
        fs.makedirs(path, exist_ok=True)
    except (OSError, RuntimeError) as exc:
        raise wrap_error(url, exc) from exc
