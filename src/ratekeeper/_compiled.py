"""Loading compiled code, built at install time where a C compiler is there (`hatch_build.py`).

Two kinds. A *twin* is a Cython module written beside the pure-Python code it mirrors, which
stays the reference it is tested against (the memory store's and replay's hot paths). The
*compiled modules* (`MODULES`) are plain modules compiled as they are: the same source, so
there is nothing to hold equal but Cython's fidelity to Python, which the whole test suite
checks by running on them.

`twin(module, source)` returns the module, or None -- the pure path runs -- when it is not
built, when ``RATEKEEPER_PURE_PYTHON`` is set, or when it was built from an older `source`
(the sha256 compiled into it differs: a checkout edited since its last build would otherwise
run the old code unnoticed; it warns, rebuild with ``pip install -e .``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["MANIFEST", "MODULES", "PURE_PYTHON_ENV", "build_name", "status", "twin"]

#: Set this environment variable (to anything but ``""`` or ``"0"``) to run the pure-Python
#: hot paths even where the compiled ones are built.
PURE_PYTHON_ENV = "RATEKEEPER_PURE_PYTHON"


def _pure() -> bool:
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def twin(module: str, source: Path) -> ModuleType | None:
    """The compiled module `module` (dotted), built from `source` (its ``.pyx``), or None."""
    if _pure():
        return None
    try:
        compiled = importlib.import_module(module)
    except ImportError:
        return None
    if source.exists() and hashlib.sha256(source.read_bytes()).hexdigest() \
            != compiled.SOURCE_SHA256:
        warnings.warn(f"{compiled.__file__} was built from an older {source.name}; "
                      f"using the pure-Python path instead (rebuild: pip install -e .)",
                      RuntimeWarning, stacklevel=3)
        return None
    return compiled


# ----------------------------------------------------------------- compiled plain modules

#: Plain modules on the service's per-decision path that the install also compiles as they
#: are (Cython, `hatch_build.py`): one source, which runs compiled where it was built. Listed
#: here, read by `hatch_build.py` and the tests; keep them few and hot.
MODULES = (
    "ratekeeper._memo",
    "ratekeeper.core",
    "ratekeeper.http.headers",
    "ratekeeper.stores.memory",
    "ratekeeper.stores.redis._breaker",
    "ratekeeper.stores.redis._client",
    "ratekeeper.stores.redis._core",
    "ratekeeper.stores.redis._store",
    "ratekeeper.policy._engine",
    "ratekeeper.service._service",
    "ratekeeper.service._stats",
    "ratekeeper.service._http",
    "ratekeeper.service._grpc",
)

#: This interpreter's extension-module suffix (".cpython-311-x86_64-linux-gnu.so").
_SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]

#: A module's build, beside its ``.py`` under a name Python's own import never looks for
#: (``core.compiled.cpython-311-x86_64-linux-gnu.so``): only `_finder` loads it, and only
#: once it checked it (an old commit, or another interpreter, simply runs the ``.py``).
BUILD_INFIX = ".compiled"

#: The build's record for this interpreter, beside this file (``{module: sha256 of the
#: .py it was built from}``): each interpreter's builds have their own.
MANIFEST = "_compiled" + _SUFFIX.removesuffix(".so").removesuffix(".pyd") + ".json"


def build_name(stem: str) -> str:
    """The file name of the build of the module whose ``.py`` is ``<stem>.py``."""
    return stem + BUILD_INFIX + _SUFFIX


def _built() -> dict[str, str]:
    try:
        got = json.loads(Path(__file__).with_name(MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class _BuildIfCurrent(importlib.abc.MetaPathFinder):
    """Loads each of the `MODULES` from its build when the build was made from the very
    ``.py`` there now (the manifest's sha256) and ``RATEKEEPER_PURE_PYTHON`` was unset at
    import; from its ``.py`` otherwise. Any other plain module of the package whose ``.py``
    has an extension module of the standard name beside it (a stray build) loads from its
    ``.py`` too: Python's import would prefer the extension."""

    def __init__(self, built: dict[str, str], pure: bool) -> None:
        self.built, self.pure = built, pure
        #: Why each of the `MODULES` that loads from source does ("stale", "not built",
        #: "pure").
        self.sources: dict[str, str] = {}

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not path or not fullname.startswith("ratekeeper."):
            return None
        stem = fullname.rpartition(".")[2]
        for entry in path:
            source = os.path.join(entry, stem + ".py")
            if os.path.isfile(source):
                break
        else:
            return None  # a package, or a module with no .py (the twins)
        if fullname in MODULES:
            digest = self.built.get(fullname)
            build = os.path.join(entry, build_name(stem))
            why = ("pure" if self.pure else "not built"
                   if digest is None or not os.path.isfile(build)
                   else None if _sha256(source) == digest else "stale")
            if why is None:
                return importlib.util.spec_from_file_location(
                    fullname, build, loader=importlib.machinery.ExtensionFileLoader(
                        fullname, build))
            self.sources[fullname] = why
        elif not any(os.path.exists(os.path.join(entry, stem + suffix))
                     for suffix in importlib.machinery.EXTENSION_SUFFIXES):
            return None  # the usual case: Python's own import finds the same .py
        return importlib.util.spec_from_file_location(fullname, source)


def _install() -> _BuildIfCurrent:
    for f in list(sys.meta_path):  # a reload of this module: replace its finder
        if type(f).__name__ == _BuildIfCurrent.__name__:
            sys.meta_path.remove(f)
    finder = _BuildIfCurrent(_built(), _pure())
    sys.meta_path.insert(0, finder)
    return finder


#: Installed on import, before any of the `MODULES` is (``ratekeeper/__init__.py`` imports
#: this module first); not when `hatch_build.py` reads this file for its names.
_finder = _install() if __name__ == "ratekeeper._compiled" else _BuildIfCurrent({}, True)


def status() -> dict[str, str]:
    """How each imported module of `MODULES` runs: ``"compiled"``, or ``"source: <why>"``
    (``stale``: its ``.py`` was edited since the build, rebuild with ``pip install -e .``;
    ``not built``; ``pure``: ``RATEKEEPER_PURE_PYTHON`` was set when it was imported)."""
    out = {}
    for name in MODULES:
        module = sys.modules.get(name)
        if module is None:
            continue
        spec = getattr(module, "__spec__", None)
        compiled = isinstance(getattr(spec, "loader", None),
                              importlib.machinery.ExtensionFileLoader)
        out[name] = "compiled" if compiled \
            else f"source: {_finder.sources.get(name, 'not built')}"
    return out
