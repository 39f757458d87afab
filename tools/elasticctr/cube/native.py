"""The cube shard's native lookup path: cubefast.c, a CPython extension.

Built on first use with gcc/cc -O2 against this interpreter's headers and cached by the
source's hash and the interpreter's ABI in ~/.cache/elasticctr/native (like the training
reader, elasticctr.train.native); images ship it prebuilt (ELASTICCTR_CUBEFAST names the
file). Without a compiler or headers, or with ELASTICCTR_CUBE_NATIVE=0, `module()` is None
and the shard serves from the numpy path (format.ShardFile.lookup), which gives the same
answers byte for byte (tests/unit/test_cube_native.py); the reason is logged once.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path
from types import ModuleType

from elasticctr import constants as C
from elasticctr.errors import EctlError

log = logging.getLogger("elasticctr.cube.native")

SOURCE = Path(__file__).with_name("cubefast.c")
MODULE_NAME = "_cubefast"


def cache_dir() -> Path:
    """The native cache folder (elasticctr.train.native's; not imported: cube never loads
    the training code)."""
    return Path(os.environ.get(C.ENV_NATIVE_CACHE) or Path.home() / ".cache/elasticctr/native")


def _target(out_dir: Path) -> Path:
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return out_dir / f"cubefast-{digest}{suffix}"


def build(out_dir: Path | None = None) -> Path:
    """Compile cubefast.c into the cache (once per source version and interpreter ABI)."""
    out_dir = Path(out_dir or cache_dir())
    target = _target(out_dir)
    if target.is_file():
        return target
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise EctlError("no C compiler to build the cube lookup extension (gcc or cc, or $CC)")
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        raise EctlError(f"no Python headers in {include} (python3-dev) to build cubefast.c")
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{target.name}.{os.getpid()}"
    done = subprocess.run(
        [cc, "-O2", "-std=gnu11", "-shared", "-fPIC", f"-I{include}", "-o", str(tmp), str(SOURCE)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise EctlError(f"building cubefast.c failed:\n{done.stderr.strip()}")
    os.replace(tmp, target)  # atomic: concurrent builders end with the same file
    return target


def load(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


_MODULE: ModuleType | None = None
_ERROR: str | None = None


def module() -> ModuleType | None:
    """The extension, built on first use; None (reason in `unavailable()`) if it cannot be."""
    global _MODULE, _ERROR
    if _MODULE is None and _ERROR is None:
        if os.environ.get(C.ENV_CUBE_NATIVE, "1").strip().lower() in ("0", "false", "no", "off"):
            _ERROR = f"disabled by {C.ENV_CUBE_NATIVE}"
        else:
            explicit = os.environ.get(C.ENV_CUBEFAST)
            try:
                _MODULE = load(Path(explicit) if explicit else build())
            except (EctlError, ImportError, OSError) as exc:
                _ERROR = str(exc)
        if _ERROR:
            log.warning("cube native lookup unavailable (%s): serving from the numpy path", _ERROR)
    return _MODULE


def unavailable() -> str | None:
    module()
    return _ERROR
