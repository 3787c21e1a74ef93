"""The algorithms: pure functions of (state, now, cost, limit), no I/O, no clock.

See `_common` for the rules every algorithm follows. Each algorithm is one module that owns
everything about itself: its math, its Redis codec (how its parameters and state cross into
Lua and back) and, beside it, its Lua file; its docstring explains the math and the
reference it mirrors. `ALGORITHMS` is the registry, one line per module; `get(name)`
returns an algorithm's record. The names are exactly those `ratekeeper.ALGORITHMS` lists
(the values cannot import this package, so a test keeps the two in step).
"""

from __future__ import annotations

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


def get(name: str) -> Algorithm:
    """The algorithm called `name` (as in `Limit.algorithm`)."""
    return ALGORITHMS[name]
