"""Build hook: compile the hot paths where it can -- the twins (`SOURCES`: the memory store's
`_memory_hot_c.pyx`, replay's `_replay_hot_c.pyx`) and the plain modules listed in
`ratekeeper._compiled.MODULES`, compiled as they are (see that module).

The compiled modules are optional. Without Cython, a C compiler or Python's headers the build
says why and goes on: the package is then pure Python and decides the same (the pure code,
`_memory_hot.py` and replay's `LogFormat.parse` and loops, is the reference the compiled one is
tested against). Set ``RATEKEEPER_NO_EXTENSIONS=1`` to skip compiling;
``RATEKEEPER_REQUIRE_EXTENSIONS=1`` (CI) to make a failed compile fail the build.

Each module is built in place, beside its source, so an editable install uses it too. A twin
carries the sha256 of the source it was built from, and `ratekeeper._compiled.twin` ignores
(with a warning) a build older than its source; the plain modules are built under names only
`ratekeeper._compiled` loads, which checks them against the build's record
(`_compiled.<interpreter>.json`, each one's sha256): one edited since runs from its ``.py``.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCES = ["src/ratekeeper/stores/_memory_hot_c.pyx", "src/ratekeeper/replay/_replay_hot_c.pyx"]

#: Python semantics exactly: annotations never become C types (a ``float`` parameter would
#: coerce an int and refuse None), functions stay introspectable (signatures, ``__doc__``).
PLAIN_DIRECTIVES = {"binding": True, "annotation_typing": False}


def compiled_names(root: Path) -> Any:
    """`ratekeeper._compiled` (its `MODULES`, `build_name`, `MANIFEST`), loaded from its file
    without importing the package (it imports the standard library only)."""
    spec = importlib.util.spec_from_file_location("_ratekeeper_compiled_names",
                                                  root / "src/ratekeeper/_compiled.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


class CompiledHotPath(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name not in ("wheel", "editable") and version != "editable":
            return
        if _flag("RATEKEEPER_NO_EXTENSIONS"):
            self.app.display_info("ratekeeper: RATEKEEPER_NO_EXTENSIONS set, pure Python")
            return
        root = Path(self.root)
        try:
            built = [self._compile(root, source) for source in SOURCES]
            built += self._compile_plain(root, compiled_names(root))
        except Exception as e:  # no Cython, no compiler, no headers: pure Python it is
            if _flag("RATEKEEPER_REQUIRE_EXTENSIONS"):
                raise
            self.app.display_warning(
                f"ratekeeper: the compiled hot path was not built ({type(e).__name__}: {e}); "
                "the pure-Python one decides the same, somewhat slower")
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        for path in built:
            relative = path.relative_to(self.root).as_posix()
            build_data["artifacts"].append(relative)
            build_data["force_include"][str(path)] = relative.removeprefix("src/")

    def _compile_plain(self, root: Path, names: Any) -> list[Path]:
        """Compile `names.MODULES` (dotted names of plain modules) as they are, each to
        `names.build_name` beside its ``.py``; then record each source's sha256 in
        `names.MANIFEST` (returned last, with the builds)."""
        from Cython.Build import cythonize  # noqa: PLC0415
        from setuptools import Distribution, Extension  # noqa: PLC0415

        package = root / "src/ratekeeper"
        manifest = package / names.MANIFEST
        manifest.unlink(missing_ok=True)  # a failed build leaves no record: sources run
        # Extensions of the standard name beside a .py (an older layout's builds) would be
        # found by Python's own import: the package ignores them, and so they go.
        for py in package.rglob("*.py"):
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                py.with_name(py.stem + suffix).unlink(missing_ok=True)
        modules: list[str] = list(names.MODULES)
        sources = {m: root / "src" / (m.replace(".", "/") + ".py") for m in modules}
        digests = {m: hashlib.sha256(p.read_bytes()).hexdigest() for m, p in sources.items()}
        exts = [Extension(m, [str(p)]) for m, p in sources.items()]
        with tempfile.TemporaryDirectory() as tmp:
            exts_c = cythonize(exts, build_dir=tmp, quiet=True, force=True, language_level=3,
                               compiler_directives=PLAIN_DIRECTIVES,
                               nthreads=os.cpu_count() or 1)
            dist = Distribution({"ext_modules": exts_c, "package_dir": {"": "src"}})
            cmd = dist.get_command_obj("build_ext")
            cmd.inplace = True
            cmd.build_temp = tmp
            cmd.parallel = os.cpu_count() or 1
            cmd.ensure_finalized()
            cmd.run()
            outs = [Path(cmd.get_ext_fullpath(m)) for m in modules]
        builds = []
        for module, built in zip(modules, outs, strict=True):
            path = built if built.is_absolute() else root / built
            build = path.with_name(names.build_name(sources[module].stem))
            path.replace(build)  # the name only ratekeeper._compiled loads
            builds.append(build)
        manifest.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
        self.app.display_info(f"ratekeeper: compiled {len(modules)} plain modules")
        return [*builds, manifest]

    def _compile(self, root: Path, source: str) -> Path:
        # Imported here: a build without them is still a (pure-Python) build.
        from Cython.Build import cythonize  # noqa: PLC0415
        from setuptools import Distribution, Extension  # noqa: PLC0415

        pyx = root / source
        module = ".".join(Path(source).with_suffix("").parts[1:])  # src/a/b.pyx -> a.b
        digest = hashlib.sha256(pyx.read_bytes()).hexdigest()
        ext = Extension(module, [str(pyx)],
                        define_macros=[("RK_SOURCE_SHA256", f'"{digest}"')])
        with tempfile.TemporaryDirectory() as tmp:
            (ext_c,) = cythonize([ext], build_dir=tmp, quiet=True, force=True)
            dist = Distribution({"ext_modules": [ext_c], "package_dir": {"": "src"}})
            cmd = dist.get_command_obj("build_ext")
            cmd.inplace = True
            cmd.build_temp = tmp
            cmd.ensure_finalized()
            cmd.run()
            out = Path(cmd.get_ext_fullpath(module))
        path = out if out.is_absolute() else root / out
        self.app.display_info(f"ratekeeper: built {path.name} ({sys.implementation.name})")
        return path
