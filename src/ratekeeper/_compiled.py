"""Loading a compiled twin: a Cython module built at install time beside the pure-Python code
it mirrors (`hatch_build.py`), which stays the reference it is tested against.

`twin(module, source)` returns the module, or None -- the pure path runs -- when it is not
built, when ``RATEKEEPER_PURE_PYTHON`` is set, or when it was built from an older `source`
(the sha256 compiled into it differs: a checkout edited since its last build would otherwise
run the old code unnoticed; it warns, rebuild with ``pip install -e .``).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import warnings
from pathlib import Path
from types import ModuleType

__all__ = ["PURE_PYTHON_ENV", "twin"]

#: Set this environment variable (to anything but ``""`` or ``"0"``) to run the pure-Python
#: hot paths even where the compiled ones are built.
PURE_PYTHON_ENV = "RATEKEEPER_PURE_PYTHON"


def twin(module: str, source: Path) -> ModuleType | None:
    """The compiled module `module` (dotted), built from `source` (its ``.pyx``), or None."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
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
