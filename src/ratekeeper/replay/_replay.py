"""Replay requests through a policies file, on the log's own clock.

`replay` takes `LogEvent`s (from `read_log`, in time order) and decides each exactly as the
middleware would have: the same ``[http]`` mapping and the same `Engine` plan
(`ratekeeper.policy.decide_request`), on a store of its own (a fresh `MemoryStore` unless
given one) whose clock is the event's time. A queued request is not slept: the next event
still finds the queue it left, as the real requests did.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from ..core import run
from ..policy._decide import HTTPDecision, decide_request
from ..policy._engine import Engine
from ..policy._model import Policies
from ..policy._request import RequestInfo
from ..stores.memory import MemoryStore
from ..testing import ManualClock
from ._events import LogEvent
from ._formats import JsonFormat

__all__ = ["REQUESTS_FORMAT", "Replayed", "replay", "request_of"]

#: The request trace format of ``ratekeeper simulate --policies``: JSON Lines such as
#: ``{"t": 0.25, "method": "POST", "path": "/login", "client": "203.0.113.7",
#: "headers": {"x-user": "ann"}}`` (``t``: seconds on the trace's clock).
REQUESTS_FORMAT = JsonFormat(time=("t", "time", "ts", "timestamp"), headers="headers",
                             time_unit="s")


class Replayed(NamedTuple):
    """One event and what the policies decided for it (None: not limited)."""

    event: LogEvent
    decision: HTTPDecision | None

    @property
    def verdict(self) -> str:
        return "not_limited" if self.decision is None else self.decision.verdict


def request_of(ev: LogEvent) -> RequestInfo:
    """The request a log line stands for, as the middleware would have seen it."""
    headers = dict(ev.headers)
    if ev.host and "host" not in headers:
        headers["host"] = ev.host
    return RequestInfo(ev.method or "GET", ev.path or "/", headers, ev.client or None)


def replay(policies: Policies, events: Iterable[LogEvent], *, store: Any = None
           ) -> Iterator[Replayed]:
    """Decide each of `events` under `policies` (its ``[http]`` part), in order."""
    if policies.http is None:
        raise ValueError(f"{policies.source}: the policies have no [http] part, so a request "
                         "cannot be mapped to descriptors; add [http] (docs/policies.md)")
    clock = ManualClock()
    engine = Engine(lambda: policies, MemoryStore() if store is None else store, clock=clock)
    for ev in events:
        if ev.t > clock.now:  # a clamped late line keeps the clock where it is
            clock.set(ev.t)
        yield Replayed(ev, run(decide_request(engine, policies, request_of(ev), clock.now)))
