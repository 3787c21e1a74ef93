"""Which replay hot path runs: the compiled twin (`_replay_hot_c`, built at install time
where a C compiler is there) or the pure Python (`LogFormat.parse`, `_replay._remembering`),
which stays the reference the compiled one is tested against (tests/replay/
test_compiled_path.py). Selected at import as the memory store's is (`stores._memory_hot`):
not built, switched off (``RATEKEEPER_PURE_PYTHON=1``) or built from an older source (a
warning) -> the pure path.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from .._compiled import twin
from ._events import LogEvent
from ._formats import LineFormat, LogFormat

__all__ = ["COMPILED", "parser_of"]


def _compiled() -> ModuleType | None:
    """The compiled module, or None: not built, switched off, or older than its source."""
    return twin(f"{__package__}._replay_hot_c", Path(__file__).with_name("_replay_hot_c.pyx"))


#: The compiled module in use (None: the pure Python runs).
COMPILED = _compiled()


def parser_of(fmt: LineFormat) -> Callable[[str, int], LogEvent | None]:
    """`fmt.parse`, compiled where there is a twin (a `LogFormat`, exactly, whose time is
    not an Apache strftime time: the twin reads ``$time_local``, ``$msec`` and
    ``$time_iso8601``)."""
    if COMPILED is not None and type(fmt) is LogFormat and fmt._time_kind != "strftime":
        return COMPILED.Parser(fmt).parse  # type: ignore[no-any-return]
    return fmt.parse
