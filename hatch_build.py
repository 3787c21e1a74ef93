"""Build hook: compile the hot paths' twins where it can (`SOURCES`: the memory store's
`_memory_hot_c.pyx`, replay's `_replay_hot_c.pyx`).

The compiled modules are optional. Without Cython, a C compiler or Python's headers the build
says why and goes on: the package is then pure Python and decides the same (the pure code,
`_memory_hot.py` and replay's `LogFormat.parse` and loops, is the reference the compiled one is
tested against). Set ``RATEKEEPER_NO_EXTENSIONS=1`` to skip compiling;
``RATEKEEPER_REQUIRE_EXTENSIONS=1`` (CI) to make a failed compile fail the build.

Each module is built in place, beside its source, so an editable install uses it too; it
carries the sha256 of the source it was built from, and `ratekeeper._compiled.twin` ignores
(with a warning) a build older than its source.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCES = ["src/ratekeeper/stores/_memory_hot_c.pyx", "src/ratekeeper/replay/_replay_hot_c.pyx"]


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
        try:
            built = [self._compile(Path(self.root), source) for source in SOURCES]
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
