"""`Memo`: the bounded memo of pure answers (parses, plans, rendered answers).

When it is full it keeps what it has and stores nothing new, until `size * 4` answers were
refused; then it starts afresh. Clearing on every fill, as it did before, made a memo with
more active keys than its size refill without end: every entry stored is a long-lived object
for Python's cyclic GC, and each full collection over them took 40-70 ms (16 of them in 8 s
of a service with 50,000 active descriptors: a pause longer than Envoy's 20 ms rate-limit
timeout, and twice the CPU per decision). Kept full, the memo answers the keys it holds and
creates no garbage for the ones it does not; a population that moves on still gets a fresh
memo after a bounded number of misses.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

__all__ = ["Memo"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(dict[K, V]):
    """A dict of at most `size` entries, filled with `put` (reads are the dict's own)."""

    __slots__ = ("_refused", "size")

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size
        self._refused = 0

    def clear(self) -> None:
        super().clear()
        self._refused = 0

    def put(self, key: K, value: V) -> None:
        """Store `value` for `key` if there is room (see the module's docstring)."""
        if len(self) >= self.size:
            self._refused += 1
            if self._refused < 4 * self.size:
                return
            self.clear()
        self[key] = value
