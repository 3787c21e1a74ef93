"""The algorithms: pure functions of (state, now, cost, limit), no I/O, no clock.

See `_common` for the rules every algorithm follows. `get(name)` returns an algorithm's
three functions; each module's docstring explains its math and the reference it mirrors.
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
