# The compiled twin of LogFormat.parse and _replay._remembering (_replay_hot_c.pyx).
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..policy._engine import Engine
from ..policy._http import HTTPCheck, HTTPRules
from ..policy._model import Policies
from ..testing import ManualClock
from ._events import LogEvent, ReadStats
from ._formats import LogFormat

SOURCE_SHA256: str

class Parser:
    def __init__(self, fmt: LogFormat) -> None: ...
    def parse(self, line: str, lineno: int) -> LogEvent | None: ...

def remembering(policies: Policies, rules: HTTPRules, engine: Engine, clock: ManualClock,
                events: Iterable[LogEvent], inputs: Any,
                one: Callable[[HTTPCheck], Any] | None, box: list[float], replayed: type,
                cache_size: int) -> Iterator[Any]: ...
def parsed(lines: Iterable[str], parse: Callable[[str, int], LogEvent | None],
           stats: ReadStats, too_long: str, too_long_why: str,
           blanks: str) -> Iterator[LogEvent]: ...
def reorder(events: Iterable[LogEvent], stats: ReadStats, window: float, drop: bool,
            max_pending: int) -> Iterator[LogEvent]: ...
