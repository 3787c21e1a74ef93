"""The algorithms: pure functions of (state, now, cost, limit), no I/O, no clock.

See `_common` for the rules every algorithm follows. Each algorithm is one module that owns
everything about itself: its math, its parameter rules (what a `Limit` of it accepts), its
Redis codec (how its parameters and state cross into Lua and back) and, beside it, its Lua
file; its docstring explains the math and the reference it mirrors. `ALGORITHMS` is the
registry, one line per module; `get(name)` returns an algorithm's record.

Building the registry registers each algorithm's rules with the values
(`ratekeeper._types.register`), in this order, which is the order `ratekeeper.ALGORITHMS`
lists: the values sit below this package and cannot import it. Any import of ratekeeper
(even of ``ratekeeper._types`` alone) runs the package's ``__init__`` first, which imports
this package, so the rules are in place before any `Limit` is built.
"""

from __future__ import annotations

from .._types import register
from . import (
    fixed_window,
    gcra,
    leaky_bucket,
    sliding_window_counter,
    sliding_window_log,
    token_bucket,
)
from ._common import Algorithm

__all__ = ["ALGORITHMS", "Algorithm", "get"]

ALGORITHMS: dict[str, Algorithm] = {
    m.ALGORITHM.name: m.ALGORITHM
    for m in (
        token_bucket,
        gcra,
        leaky_bucket,
        fixed_window,
        sliding_window_log,
        sliding_window_counter,
    )
}
for _algorithm in ALGORITHMS.values():
    register(_algorithm.name, _algorithm.rules)
del _algorithm


def get(name: str) -> Algorithm:
    """The algorithm called `name` (as in `Limit.algorithm`)."""
    return ALGORITHMS[name]
