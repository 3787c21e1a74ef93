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

__all__ = ["MODULES", "PURE_PYTHON_ENV", "status", "twin"]

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
#: are (Cython, `hatch_build.py`): one source, which runs compiled where it was built. A
#: compiled module is an extension module of the same name beside its ``.py``, which Python's
#: import finds first; `_finder` makes the ``.py`` load instead when the build is not to
#: be used. Listed here, read by `hatch_build.py` and the tests; keep them few and hot.
MODULES = (
    "ratekeeper._memo",
    "ratekeeper.core",
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

#: The build's record of what it compiled, beside this file: ``{module: sha256 of its .py}``.
MANIFEST = "_compiled.json"


def _built() -> dict[str, str]:
    try:
        got = json.loads(Path(__file__).with_name(MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class _SourceUnlessBuilt(importlib.abc.MetaPathFinder):
    """For the `MODULES`: their ``.py`` (a plain source spec) unless their build is to be
    used -- built from the very source there now (the manifest's sha256), and
    ``RATEKEEPER_PURE_PYTHON`` unset. Otherwise no answer, and the path finder finds the
    build (extension modules come first in its search)."""

    def __init__(self, built: dict[str, str], pure: bool) -> None:
        self.built, self.pure = built, pure
        #: Why each module that loads from source does ("stale", "not built", "pure").
        self.sources: dict[str, str] = {}

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES or not path:
            return None
        name = fullname.rpartition(".")[2] + ".py"
        for entry in path:
            source = os.path.join(entry, name)
            if os.path.isfile(source):
                break
        else:
            return None
        digest = self.built.get(fullname)
        why = ("pure" if self.pure else "not built" if digest is None
               else None if _sha256(source) == digest else "stale")
        if why is None:
            return None
        self.sources[fullname] = why
        return importlib.util.spec_from_file_location(fullname, source)


#: Installed on import, before any of the `MODULES` is (``ratekeeper/__init__.py`` imports
#: this module first).
_finder = _SourceUnlessBuilt(_built(), _pure())
sys.meta_path.insert(0, _finder)


def status() -> dict[str, str]:
    """How each imported module of `MODULES` runs: ``"compiled"``, or ``"source: <why>"``
    (``stale``: its ``.py`` was edited since the build, rebuild with ``pip install -e .``;
    ``not built``; ``pure``: ``RATEKEEPER_PURE_PYTHON`` is set)."""
    out = {}
    for name in MODULES:
        module = sys.modules.get(name)
        if module is None:
            continue
        why = _finder.sources.get(name)
        if why is None and str(getattr(module, "__file__", "")).endswith(".py"):
            why = "not built"
        out[name] = "compiled" if why is None else f"source: {why}"
    return out
