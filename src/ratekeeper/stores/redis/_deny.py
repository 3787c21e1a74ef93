"""The deny cache of the Redis stores: rejections remembered until they could pass."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..._types import Decision

#: A state's identity in the deny cache: (limit name, algorithm, key).
_Ident = tuple[str, str, str]


class _DenyCache:
    """Rejections remembered until the earliest time the same check could pass.

    Keyed by the checks' ``(limit name, algorithm, key)``: the state's identity, as in its
    Redis key. An entry made at local time ``t0``
    answers a later check at ``t`` with costs each >= the cached ones while
    ``t < t0 + min(retry_after of the rejecting limits)``: until then every limit that
    rejected still rejects (a larger cost can only wait longer), so the whole check is
    rejected. Entries with a ``None`` retry (cost above capacity) are not cached.
    """

    def __init__(self, size: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        #: Local time (seconds) for a store on the server's clock; tests pass a ManualClock.
        self.clock = clock
        self._data: dict[tuple[_Ident, ...], tuple[float, float, tuple[float, ...],
                                                                list[Decision]]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._data)

    def get(self, ck: tuple[_Ident, ...], costs: tuple[float, ...],
            t: float) -> list[Decision] | None:
        entry = self._data.get(ck)
        if entry is None:
            return None
        until, t0, cached, decisions = entry
        if not t < until:
            with self._lock:
                if self._data.get(ck) is entry:
                    del self._data[ck]
            return None
        if t < t0 or any(c < cc for c, cc in zip(costs, cached, strict=True)):
            return None
        elapsed = t - t0
        return [
            d if d.allowed else d._replace(
                retry_after=None if d.retry_after is None else d.retry_after - elapsed,
                reset_after=max(0.0, d.reset_after - elapsed),
            )
            for d in decisions
        ]

    def put(self, ck: tuple[_Ident, ...], costs: tuple[float, ...], t0: float,
            decisions: list[Decision]) -> None:
        waits = [d.retry_after for d in decisions if not d.allowed]
        if not waits or any(w is None for w in waits):
            return
        wait = min(w for w in waits if w is not None)
        if not wait > 0:
            return
        with self._lock:
            data = self._data
            data.pop(ck, None)
            while len(data) >= self.size:
                del data[next(iter(data))]  # oldest first
            data[ck] = (t0 + wait, t0, costs, decisions)

    def forget(self, pairs: set[_Ident]) -> None:
        """Drop every entry that involves one of `pairs` (after a refund or reset)."""
        with self._lock:
            for ck in [ck for ck in self._data if any(p in pairs for p in ck)]:
                del self._data[ck]

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
