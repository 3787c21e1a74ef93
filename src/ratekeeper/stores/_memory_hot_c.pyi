# The compiled twin of _memory_hot (_memory_hot_c.pyx): its builders have the same shape.
from collections.abc import Sequence

from .._types import Decision
from ._base import Check
from ._memory_hot import AtBuilder, Bound, Builder

SOURCE_SHA256: str
HOT: dict[str, Builder]
AT: dict[str, AtBuilder]

def decide_all(hits: list[Bound], checks: Sequence[Check], now: float) -> list[Decision] | None: ...
