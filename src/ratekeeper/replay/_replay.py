"""Replay requests through a policies file, on the log's own clock.

`replay` takes `LogEvent`s (from `read_log`, in time order) and decides each exactly as the
middleware would have: the same ``[http]`` mapping and the same `Engine` plan
(`ratekeeper.policy.decide_request`), on a store of its own (a fresh `MemoryStore` unless
given one) whose clock is the event's time. A queued request is not slept: the next event
still finds the queue it left, as the real requests did.

A log repeats itself: the same client asks for the same few paths all day. When the
``[http]`` part is a pure function of a request's method, path, host, peer and the headers it
reads (no hook attribute, no ``limits_for``, no cost function: `mapping_inputs`), `replay`
remembers `HTTPRules.map`'s answer per such tuple (at most `MAP_CACHE_SIZE` of them) and
decides a repeated request with `decide_mapped`, the second half of `decide_request`: the
same engine calls, so the same decisions (tests/replay/test_fast_path.py checks it event by
event); only the mapping is not recomputed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from ..core import run
from ..policy._decide import HTTPDecision, decide_mapped, decide_request
from ..policy._engine import Engine
from ..policy._http import HTTPCheck, HTTPRules
from ..policy._model import Policies
from ..policy._request import ClientIP, IPAddress, RequestInfo
from ..stores.memory import MemoryStore
from ..testing import ManualClock
from ._events import LogEvent
from ._formats import JsonFormat

__all__ = ["MAP_CACHE_SIZE", "REQUESTS_FORMAT", "MappingInputs", "Replayed", "mapping_inputs",
           "replay", "request_of"]

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


#: The most remembered mappings (distinct `MappingInputs` values of requests); the
#: memo is emptied when full, so memory stays bounded on any log.
MAP_CACHE_SIZE = 1 << 16

_new_check = tuple.__new__  # a named tuple from its fields, without its Python __new__


class MappingInputs(NamedTuple):
    """What `HTTPRules.map` reads of a request, when that is all its answer depends on."""

    method: bool  # routes, coverage or a descriptor look at the method
    path: bool  # ... at the path
    headers: tuple[str, ...]  # host, the forwarding header, each header attribute's


def mapping_inputs(rules: HTTPRules) -> MappingInputs | None:
    """What `rules.map` reads of a request (besides its peer, always read), when its answer
    depends on nothing else; None when it may (a hook attribute, ``limits_for``, a cost
    function, a subclass): such a request is mapped afresh every time."""
    if (type(rules) is not HTTPRules or type(rules.client_ip) is not ClientIP
            or rules.limits_for is not None or rules.cost_fn is not None
            or any(r.cost_fn is not None for r in rules.routes)):
        return None
    names = ["host", rules.client_ip.header]
    for a in rules.attributes.values():
        if a.hook is not None or a.header is None:
            return None
        names.append(a.header)
    used = set(rules.exempt_keys)
    for group in (*rules.descriptors, *(d for r in rules.routes for d in r.descriptors)):
        used.update(e.attribute for e in group if e.attribute is not None)
    routed = bool(rules.routes) or rules.paths != () or rules.methods is not None \
        or rules.hosts is not None
    return MappingInputs(routed or "method" in used,
                         routed or bool(rules.exempt_paths) or "path" in used,
                         tuple(dict.fromkeys(names)))


def replay(policies: Policies, events: Iterable[LogEvent], *, store: Any = None,
           remember: bool = True) -> Iterator[Replayed]:
    """Decide each of `events` under `policies` (its ``[http]`` part), in order.

    `remember=False` maps every request afresh (`decide_request` for each): the reference
    the remembered mappings are tested against."""
    rules = policies.http
    if rules is None:
        raise ValueError(f"{policies.source}: the policies have no [http] part, so a request "
                         "cannot be mapped to descriptors; add [http] (docs/policies.md)")
    clock = ManualClock()
    engine = Engine(lambda: policies, MemoryStore() if store is None else store, clock=clock)
    inputs = mapping_inputs(rules) if remember else None
    if inputs is None:
        for ev in events:
            if ev.t > clock.now:  # a clamped late line keeps the clock where it is
                clock.set(ev.t)
            yield Replayed(ev, run(decide_request(engine, policies, request_of(ev), clock.now)))
        return
    yield from _remembering(policies, rules, engine, clock, events, inputs=inputs)


def _remembering(policies: Policies, rules: HTTPRules, engine: Engine, clock: ManualClock,
                 events: Iterable[LogEvent], *, inputs: MappingInputs
                 ) -> Iterator[Replayed]:
    # (check fields but the request, the client's address) per mapping input tuple
    memo: dict[tuple[str | None, ...],
               tuple[tuple[object, ...] | None, IPAddress | None]] = {}
    get = memo.get
    by_method, by_path, (host_h, fwd_h, *more) = inputs
    rest = tuple(more)
    now = clock.now
    for ev in events:
        if ev.t > now:  # a clamped late line keeps the clock where it is
            now = ev.t
            clock.set(now)
        h = dict(ev.headers)  # request_of(ev), inline: this loop runs once per line
        if ev.host and "host" not in h:
            h["host"] = ev.host
        req = RequestInfo(ev.method or "GET", ev.path or "/", h, ev.client or None)
        key: tuple[str | None, ...] = (req.method if by_method else "",
                                       req.path if by_path else "", req.peer,
                                       h.get(host_h), h.get(fwd_h))
        if rest:
            key += tuple(h.get(n) for n in rest)
        hit = get(key)
        if hit is None:
            check = rules.map(req, now)
            if len(memo) >= MAP_CACHE_SIZE:
                memo.clear()
            memo[key] = (None if check is None else check[:6], req.client_ip)
        else:
            fields, req.client_ip = hit
            check = None if fields is None else _new_check(HTTPCheck, (*fields, req))
        yield _new_check(Replayed, (ev, None if check is None else
                                    run(decide_mapped(engine, policies, check, now))))
