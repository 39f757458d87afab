"""One prefix and one home for ElasticCTR's environment variables (issue 27).

Every ELASTICCTR_* name the package and the chart use is a constant of
elasticctr.constants (ENV_NAMES); the names of ElasticCTR 0.1 (ECTL_*) are still read by
`ectl`, with a warning, and appear nowhere else."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from elasticctr import constants as C

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[2]
NAME = re.compile(r"(?<![A-Za-z0-9_])(?:ELASTICCTR|ECTL)_[A-Z0-9_]*[A-Z0-9]")


def names_in(paths) -> dict[str, list[str]]:
    """name -> files using it."""
    out: dict[str, list[str]] = {}
    for path in paths:
        for name in set(NAME.findall(path.read_text(errors="replace"))):
            out.setdefault(name, []).append(str(path.relative_to(REPO)))
    return out


def files(root: str, *globs: str) -> list[Path]:
    return sorted(p for g in globs for p in (REPO / root).rglob(g) if p.is_file())


PACKAGE = [p for p in files("tools/elasticctr", "*.py") if p.name != "constants.py"]
CHART = files("charts", "*.yaml", "*.tpl", "*.txt", "*.json")
# Harness, tests and benches read a few names of their own (a registry, a cache, the
# shared folder); they share the prefix but are not the product's contract.
DEV = files("scripts", "*.py", "*.sh") + files("tests", "*.py", "*.config") + files("bench", "*.py")
DEV = [p for p in DEV if p != Path(__file__).resolve()]
DEV += [REPO / "Makefile", REPO / ".ci" / "run", REPO / "images" / "Dockerfile"]


def test_every_name_the_package_and_chart_use_is_defined_once_in_constants():
    used = names_in(PACKAGE + CHART)
    unknown = {n: where for n, where in used.items() if n not in C.ENV_NAMES}
    assert not unknown, f"define these in elasticctr/constants.py (ENV_*): {unknown}"
    # ...and each is defined by exactly one constant of that module
    source = (REPO / "tools/elasticctr/constants.py").read_text()
    twice = [n for n in C.ENV_NAMES if len(re.findall(rf'= "{n}"', source)) != 1]
    assert not twice


def test_no_legacy_prefix_outside_the_adoption():
    legacy = {n: w for n, w in names_in(PACKAGE + CHART + DEV).items() if n.startswith("ECTL_")}
    assert not legacy, f"ECTL_* is read only through constants.adopt_legacy_env: {legacy}"


def test_names_in_docs_exist():
    pages = [REPO / "README.md", *files("docs", "*.md"), *files("bench", "*.md")]
    known = C.ENV_NAMES | set(names_in(DEV))

    def exists(name: str) -> bool:
        if name.startswith("ECTL_X_"):  # experiments of docs/training.md, switches removed
            return True
        if name.startswith(C.LEGACY_ENV_PREFIX):  # the old name of a current one
            name = C.ENV_PREFIX + name[len(C.LEGACY_ENV_PREFIX) :]
        return any(k == name or k.startswith(name + "_") for k in known)  # or `NAME_*`

    stale = {n: w for n, w in names_in(pages).items() if not exists(n)}
    assert not stale, f"docs name variables nothing reads: {stale}"


def test_adopt_legacy_env_copies_known_names_and_keeps_new_ones():
    env = {
        "ECTL_TRAIN_THREADS": "3",
        "ECTL_VERBOSE": "1",
        "ELASTICCTR_VERBOSE": "0",
        "ECTL_NOT_OURS": "x",
        "PATH": "/bin",
    }
    assert C.adopt_legacy_env(env) == ["ECTL_TRAIN_THREADS", "ECTL_VERBOSE"]
    assert env["ELASTICCTR_TRAIN_THREADS"] == "3"
    assert env["ELASTICCTR_VERBOSE"] == "0"  # a set new name wins
    assert "ELASTICCTR_NOT_OURS" not in env


def test_ectl_reads_a_legacy_name_and_warns(tmp_path):
    """ECTL_VERBOSE=1 still gives tracebacks, and says which name to use instead."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ECTL_", "ELASTICCTR_"))}
    env["ECTL_VERBOSE"] = "1"
    (tmp_path / "bad.yaml").write_text("cube:\n  shards: many\n")
    proc = subprocess.run(
        [sys.executable, "-m", "elasticctr.cli.main", "validate", str(tmp_path / "bad.yaml")],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    err = " ".join(proc.stderr.split())
    assert "ECTL_VERBOSE is deprecated: set ELASTICCTR_VERBOSE" in err
    assert "Traceback" in proc.stderr


# --- other contracts with one home (issue 27 item 5) -------------------------------------


def test_the_version_id_format_and_file_digest_are_defined_once():
    """`YYYYMMDD/HH` is parsed and printed by elasticctr.versions only, and files are
    hashed by versions.sha256_file only: a second copy fails here."""
    home = REPO / "tools/elasticctr/versions.py"
    copies = []
    for path in [*PACKAGE, *files("tools/elasticctr", "*.c")]:
        if path == home:
            continue
        text = path.read_text()
        for pattern in ("%Y%m%d/%H", '"%Y%m%d"', "def sha256_file", r"\d{8}/\d{2}"):
            if pattern in text:
                copies.append(f"{path.relative_to(REPO)}: {pattern}")
    assert not copies, f"use elasticctr.versions instead: {copies}"


def imported_modules(path: Path) -> set[str]:
    """Top-level names of the modules a source file imports (any depth in its tree:
    function-local imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_httpx_is_the_one_http_client():
    """The package talks HTTP through httpx only: `requests` is not a dependency of
    elasticctr (it may still be installed for kubernetes or MLflow)."""
    users = [str(p.relative_to(REPO)) for p in PACKAGE if "requests" in imported_modules(p)]
    assert not users, f"use httpx instead of requests: {users}"
    assert "httpx" in imported_modules(REPO / "tools/elasticctr/coordinator/client.py")


def code_strings(path: Path) -> list[str]:
    """The string constants of a source file's code, f-string pieces included; docstrings
    and other bare string statements (and comments) are not code."""
    tree = ast.parse(path.read_text(), filename=str(path))
    prose = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    strings = [n for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    return [n.value for n in strings if isinstance(n.value, str) and id(n) not in prose]


def test_the_sparse_part_file_names_are_typed_once():
    """`sparse/part-NNNNN.keys.npy` / `.values.npy` are named by
    versions.sparse_part_files only (SPARSE_PART agrees with it): every writer and
    reader of the package goes through it, so no module spells the suffixes."""
    from elasticctr import versions

    home = REPO / "tools/elasticctr/versions.py"
    copies = []
    for path in files("tools/elasticctr", "*.py"):
        if path == home:
            continue
        for text in code_strings(path):
            plain = text.replace("\\", "")  # a regex spells them `\.keys\.npy`
            if "keys.npy" in plain or "values.npy" in plain:
                copies.append(f"{path.relative_to(REPO)}: {text!r}")
    assert not copies, f"use elasticctr.versions.sparse_part_files instead: {copies}"

    for i in (0, 7, 12345, versions.MAX_SPARSE_PARTS - 1):
        keys, values = versions.sparse_part_files(i)
        m = versions.SPARSE_PART.match(keys)
        assert m and int(m.group(1)) == i, keys
        assert values == keys.removesuffix(".keys.npy") + ".values.npy"
        assert keys.startswith(versions.SPARSE_DIR + "/") and not versions.SPARSE_PART.match(values)
    assert versions.sparse_part_files(3) == (
        "sparse/part-00003.keys.npy",
        "sparse/part-00003.values.npy",
    )
    for bad in (-1, versions.MAX_SPARSE_PARTS, True, 1.0):
        with pytest.raises(ValueError, match="sparse part number"):
            versions.sparse_part_files(bad)
    manifest = {"files": {n: {} for i in (1, 0) for n in versions.sparse_part_files(i)}}
    assert versions.sparse_parts(manifest) == [versions.sparse_part_files(i) for i in (0, 1)]
