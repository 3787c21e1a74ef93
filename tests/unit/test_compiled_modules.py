"""The plain modules compiled as they are (`ratekeeper._compiled.MODULES`): where the install
built them they run compiled; a source edited since its build, ``RATEKEEPER_PURE_PYTHON``
or a missing build record runs the ``.py`` instead; and the pure modules still pass the
service's tests (the rest of the suite runs on the compiled ones where they are built)."""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ratekeeper import _compiled

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "ratekeeper"

#: Imports every compiled module in a fresh interpreter; prints each one's file and status.
_PROBE = """
import importlib, json, ratekeeper
from ratekeeper import _compiled
files = {m: importlib.import_module(m).__file__ for m in _compiled.MODULES}
print(json.dumps({"files": files, "status": _compiled.status(),
                  "edited": getattr(importlib.import_module("ratekeeper.core"), "EDITED", 0)}))
"""


def _require_build() -> None:
    if _compiled._pure():
        pytest.skip(f"{_compiled.PURE_PYTHON_ENV} is set: the compiled modules are off")
    if not (PACKAGE / _compiled.MANIFEST).exists():
        if os.environ.get("CI"):  # CI builds them (RATEKEEPER_REQUIRE_EXTENSIONS in .ci/run)
            pytest.fail("the compiled modules are not built (pip install -e .)")
        pytest.skip("the compiled modules are not built here")


def _probe(package_parent: Path, **env: str) -> dict[str, dict[str, str]]:
    environ = {k: v for k, v in os.environ.items() if k != _compiled.PURE_PYTHON_ENV}
    environ.update(env, PYTHONPATH=str(package_parent))
    out = subprocess.run([sys.executable, "-c", _PROBE], env=environ, cwd=package_parent,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    got: dict[str, dict[str, str]] = json.loads(out)
    return got


def _copy_package(tmp_path: Path) -> Path:
    shutil.copytree(PACKAGE, tmp_path / "ratekeeper",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "ratekeeper"


def test_every_compiled_module_runs_its_build_here() -> None:
    _require_build()
    for name in _compiled.MODULES:
        importlib.import_module(name)
    stale = {m: s for m, s in _compiled.status().items() if s != "compiled"}
    assert not stale, f"running from source: {stale}; rebuild with `pip install -e .`"
    assert all(sys.modules[m].__file__.endswith(_compiled.build_name(m.rpartition(".")[2]))  # type: ignore[union-attr]
               for m in _compiled.MODULES)


def test_a_module_edited_since_its_build_runs_from_its_source(tmp_path: Path) -> None:
    _require_build()
    package = _copy_package(tmp_path)
    with (package / "core.py").open("a") as f:
        f.write("\nEDITED = 1\n")
    got = _probe(tmp_path)
    assert got["edited"] == 1
    assert got["files"]["ratekeeper.core"] == str(package / "core.py")
    assert got["status"]["ratekeeper.core"] == "source: stale"
    others = [m for m in _compiled.MODULES if m != "ratekeeper.core"]
    assert all(got["status"][m] == "compiled" for m in others), got["status"]
    assert all(got["files"][m].endswith(".so") for m in others)


def test_an_extension_of_the_standard_name_beside_a_source_is_not_loaded(
        tmp_path: Path) -> None:
    # Python's own import prefers core.cpython-3xx.so to core.py: an older build of that
    # name (or a stray copy) must not run in place of the source.
    _require_build()
    package = _copy_package(tmp_path)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    shutil.copy(package / _compiled.build_name("core"), package / f"core{suffix}")
    with (package / "core.py").open("a") as f:
        f.write("\nEDITED = 1\n")
    (package / f"_errors{suffix}").write_bytes(b"not an extension")  # a module not listed
    got = _probe(tmp_path)
    assert got["edited"] == 1 and got["status"]["ratekeeper.core"] == "source: stale"
    assert got["files"]["ratekeeper.core"] == str(package / "core.py")


def test_without_the_build_record_every_module_runs_from_its_source(tmp_path: Path) -> None:
    _require_build()
    package = _copy_package(tmp_path)
    (package / _compiled.MANIFEST).unlink()  # the .so files are still there
    got = _probe(tmp_path)
    assert set(got["status"].values()) == {"source: not built"}
    assert all(f.endswith(".py") for f in got["files"].values())


def test_the_pure_python_switch_runs_every_module_from_its_source() -> None:
    _require_build()
    got = _probe(ROOT / "src", **{_compiled.PURE_PYTHON_ENV: "1"})
    assert set(got["status"].values()) == {"source: pure"}
    assert got["files"] == {m: str(PACKAGE / (m.removeprefix("ratekeeper.").replace(".", "/")
                                              + ".py")) for m in _compiled.MODULES}


def test_the_build_hook_compiles_the_listed_modules() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        hatch_build = importlib.import_module("hatch_build")
    finally:
        sys.path.remove(str(ROOT))
    names = hatch_build.compiled_names(ROOT)
    assert names.MODULES == _compiled.MODULES and names.MANIFEST == _compiled.MANIFEST
    assert names.build_name("core") == _compiled.build_name("core")
    if (PACKAGE / _compiled.MANIFEST).exists():
        assert sorted(json.loads((PACKAGE / _compiled.MANIFEST).read_text())) \
            == sorted(_compiled.MODULES)


def test_the_service_tests_pass_on_the_pure_modules() -> None:
    # The suite runs on the compiled modules where they are built; these run the same
    # source as plain Python, as on a machine without a compiler.
    _require_build()
    tests = [f"tests/service/test_{name}.py"
             for name in ("engine", "fast_paths", "grpc", "http", "plan_memo")]
    environ = dict(os.environ, **{_compiled.PURE_PYTHON_ENV: "1"})
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *tests], check=False, cwd=ROOT, env=environ, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    passed = int(done.stdout.splitlines()[-1].split(" passed")[0].split()[-1])
    assert passed >= 100, done.stdout[-500:]  # the five files' tests ran
