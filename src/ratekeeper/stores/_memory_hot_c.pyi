# The compiled twin of the algorithms' pure decide functions (_memory_hot_c.pyx), bound by
# ratekeeper.stores.memory, whose types its builders have.
from collections.abc import Sequence

from .._types import Decision
from ._base import Check
from .memory import AtBuilder, Bound, Builder

SOURCE_SHA256: str
HOT: dict[str, Builder]
AT: dict[str, AtBuilder]

def decide_all(hits: list[Bound], checks: Sequence[Check], now: float) -> list[Decision] | None: ...
