"""`Memo`: the bounded memo of pure answers (parses, plans, rendered answers).

It is bounded twice: by the count of its entries and by the bytes they hold, as each
`put` states them (an estimate its caller makes from what it stores: the keys and values
are the caller's). A bound by count alone let 10,000 distinct 53 KB requests keep 1 GB of
packed commands (issue 28): entries are as large as the requests the limits allow.

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
    """A dict of at most `size` entries holding at most `max_bytes` (as `put` was told;
    None: bounded by count alone, for entries of a bounded size), filled with `put` (reads
    are the dict's own)."""

    __slots__ = ("_refused", "held", "max_bytes", "size")

    def __init__(self, size: int, max_bytes: int | None = None) -> None:
        super().__init__()
        self.size = size
        self.max_bytes = max_bytes
        #: The bytes of the entries held, as their `put`s stated them.
        self.held = 0
        self._refused = 0

    def clear(self) -> None:
        super().clear()
        self.held = 0
        self._refused = 0

    def put(self, key: K, value: V, nbytes: int = 0) -> None:
        """Store `value` for `key` if there is room for one more entry of `nbytes` (what
        the key and the value hold, estimated by the caller; see the module's docstring).
        An entry larger than `max_bytes` / 16 is never stored: a few such would fill the
        memo, and a request that large costs its packing or planning many times over in
        its own I/O anyway."""
        max_bytes = self.max_bytes
        if max_bytes is not None and nbytes * 16 > max_bytes:
            return
        if len(self) >= self.size or (max_bytes is not None
                                      and self.held + nbytes > max_bytes):
            self._refused += 1
            if self._refused < 4 * self.size:
                return
            self.clear()
        if key not in self:
            self.held += nbytes
        self[key] = value
