"""Which replay hot path runs: the compiled twin (`_replay_hot_c`, built at install time
where a C compiler is there) or the pure Python (`LogFormat.parse`, `_replay._remembering`),
which stays the reference the compiled one is tested against (tests/replay/
test_compiled_path.py). Selected at import as the memory store's is (`stores._memory_hot`):
not built, switched off (``RATEKEEPER_PURE_PYTHON=1``) or built from an older source (a
warning) -> the pure path.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from ..stores._memory_hot import PURE_PYTHON_ENV
from ._events import LogEvent
from ._formats import LineFormat, LogFormat

__all__ = ["COMPILED", "parser_of"]


def _compiled() -> ModuleType | None:
    """The compiled module, or None: not built, switched off, or older than its source."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    try:
        from . import _replay_hot_c  # noqa: PLC0415  (optional: built where it can be)
    except ImportError:
        return None
    source = Path(__file__).with_name("_replay_hot_c.pyx")
    # A checkout edited since its last build would otherwise run the old code unnoticed.
    if source.exists() and hashlib.sha256(source.read_bytes()).hexdigest() \
            != _replay_hot_c.SOURCE_SHA256:
        warnings.warn(f"{_replay_hot_c.__file__} was built from an older {source.name}; "
                      "using the pure-Python replay path (rebuild: pip install -e .)",
                      RuntimeWarning, stacklevel=2)
        return None
    return _replay_hot_c


#: The compiled module in use (None: the pure Python runs).
COMPILED = _compiled()


def parser_of(fmt: LineFormat) -> Callable[[str, int], LogEvent | None]:
    """`fmt.parse`, compiled where there is a twin (a `LogFormat`, exactly)."""
    if COMPILED is not None and type(fmt) is LogFormat:
        return COMPILED.Parser(fmt).parse  # type: ignore[no-any-return]
    return fmt.parse
