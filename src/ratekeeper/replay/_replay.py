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
event); only the mapping is not recomputed. On a `MemoryStore`, a remembered request whose
decision is one limit's (`decide_mapped`'s single ``decide_one``) skips the plan too: it
is that one call, through the store's bound hot path (`MemoryStore.bind_hit`, bound once
per limit, its clock the event's time) for a whole cost (tests/replay/test_one_limit_path.py
compares it with the plan on random traces at Unix-time magnitudes).

A log's client need not be an address: Common Log Format written with ``HostnameLookups``
holds host names (``piweba3y.prodigy.com``), an anonymised log invalid addresses. A live
TCP peer is always an address, so the live `ClientIP` keys a peer it cannot read as
``ip:unknown`` (garbage never widens a limit); in a log, each such name is one client, so
`replay` reads the policies through `log_policies`: the same ``[http]`` part with a
`LogClientIP`, which keys each name as a client of its own (``client_ip=piweba3y.prodigy.com``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import ipaddress
import operator
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple, cast

from .._errors import StoreError
from .._types import Decision, Limit
from ..core import run
from ..policy._decide import HTTPDecision, decide_mapped, decide_request, verdict_of
from ..policy._engine import Engine
from ..policy._http import HTTPCheck, HTTPRules
from ..policy._model import Policies
from ..policy._request import ClientIP, IPAddress, RequestInfo, safe_key
from ..stores._base import HitHooks
from ..stores.memory import MemoryStore
from ..testing import ManualClock
from . import _hot
from ._events import LogEvent
from ._formats import JsonFormat

__all__ = ["BOUND_ALGORITHMS", "MAP_CACHE_SIZE", "REQUESTS_FORMAT", "LogClientIP",
           "MappingInputs", "PeerName", "Replayed", "log_policies", "mapping_inputs",
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


class PeerName(ipaddress.IPv6Address):
    """A log's client that is not an address (a host name, an anonymised address), as
    `LogClientIP.resolve` gives it: `name` is the log's text. Its address is a stand-in in
    the discard-only block ``100::/64`` (RFC 6666, no client's address), one per name (a
    hash of it), so two names are never equal; an ``exempt_networks`` entry exempts it only
    if it covers that block."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        low = int.from_bytes(hashlib.blake2b(name.encode("utf-8", "surrogatepass"),
                                             digest_size=8).digest(), "big")
        super().__init__((0x100 << 112) | low)
        self.name = name

    def __repr__(self) -> str:
        return f"PeerName({self.name!r})"


#: Texts that say "no client" in a log (Apache's and nginx's empty field): still unknown.
NO_CLIENT = frozenset({"", "-"})


class LogClientIP(ClientIP):
    """`ClientIP` for a log: a peer that is not an address (and not ``-``) is a client of
    its own, keyed ``ip:<its text>`` (`safe_key`'d: an unprintable or overlong one is
    hashed), where the live `ClientIP` keys it ``ip:unknown``. Everything else (trusted
    proxies, the forwarding header, prefixes) is the `ClientIP` it was made from."""

    __slots__ = ()

    @classmethod
    def of(cls, live: ClientIP) -> LogClientIP:
        """`live`'s settings, in a `LogClientIP` (with a fresh key memo)."""
        new = cls.__new__(cls)
        for slot in ClientIP.__slots__:
            setattr(new, slot, getattr(live, slot))
        new._keys = {}
        return new

    def resolve(self, request: RequestInfo) -> IPAddress | None:
        addr = super().resolve(request)
        peer = request.peer
        if addr is None and peer is not None and peer not in NO_CLIENT:
            return _peer_name(peer)
        return addr

    def key_of(self, addr: IPAddress | None) -> str:
        if type(addr) is PeerName:
            return "ip:" + safe_key(addr.name)
        return super().key_of(addr)


def _peer_name(text: str) -> PeerName:
    """One `PeerName` per text while it is remembered (a log repeats its clients)."""
    got = _NAMES.get(text)
    if got is None:
        if len(_NAMES) >= _NAMES_SIZE:
            _NAMES.clear()
        got = _NAMES[text] = PeerName(text)
    return got


_NAMES: dict[str, PeerName] = {}
_NAMES_SIZE = 8192


def log_policies(policies: Policies) -> Policies:
    """`policies` as a log is replayed under them: their ``[http]`` part's `ClientIP` a
    `LogClientIP` (a client named by something other than an address is one of its own).
    The same object when it already is, or when there is no ``[http]`` part."""
    rules = policies.http
    if rules is None or type(rules.client_ip) is not ClientIP:
        return policies
    return dataclasses.replace(policies, http=dataclasses.replace(
        rules, client_ip=LogClientIP.of(rules.client_ip)))


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
    if (type(rules) is not HTTPRules or type(rules.client_ip) not in (ClientIP, LogClientIP)
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
    the remembered mappings are tested against. A client the log names by something that is
    not an address is a client of its own (`log_policies`)."""
    policies = log_policies(policies)
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
    if _hot.COMPILED is not None:  # the same loop, compiled (_replay_hot_c.pyx)
        box = [clock.now]
        yield from _hot.COMPILED.remembering(
            policies, rules, engine, clock, events, inputs, _one_limit(policies, engine, box),
            box, Replayed, MAP_CACHE_SIZE)
        return
    yield from _remembering(policies, rules, engine, clock, events, inputs=inputs)


def _remembering(policies: Policies, rules: HTTPRules, engine: Engine, clock: ManualClock,
                 events: Iterable[LogEvent], *, inputs: MappingInputs
                 ) -> Iterator[Replayed]:
    # (check fields but the request, the client's address, its one-limit decider or None)
    # per mapping input tuple
    memo: dict[tuple[str | None, ...],
               tuple[tuple[object, ...] | None, IPAddress | None, _OneLimit | None]] = {}
    get = memo.get
    by_method, by_path, (host_h, fwd_h, *more) = inputs
    rest = tuple(more)
    now = clock.now
    box = [now]  # the bound hits' clock: the event's time (see `_one_limit`)
    one = _one_limit(policies, engine, box)
    store: Any = engine.store
    decide_one: Any = getattr(store, "decide_one", None)  # used on a MemoryStore only
    for ev in events:
        if ev.t > now:  # a clamped late line keeps the clock where it is
            now = ev.t
            clock.set(now)
            box[0] = now
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
            fast = None if check is None or one is None else one(check)
            if len(memo) >= MAP_CACHE_SIZE:
                memo.clear()
            memo[key] = (None if check is None else check[:6], req.client_ip, fast)
        else:
            fields, req.client_ip, fast = hit
            # a concatenation: cheaper per line than unpacking into a new tuple
            check = None if fields is None else _new_check(HTTPCheck,
                                                           fields + (req,))  # noqa: RUF005
        if check is None:
            decision = None
        elif fast is None:
            decision = run(decide_mapped(engine, policies, check, now))
        else:  # decide_mapped's one-limit core.hit: decide_one, or the store's bound hit
            bound, lim, ckey, cost, limits, failure = fast
            d = decide_one(lim, ckey, cost, now) if bound is None else bound(ckey, cost)
            if d.allowed and d.delay == 0.0:  # the common case, as verdict_of decides it
                decision = _new_check(HTTPDecision, (check, d, "allowed", limits, failure,
                                                     None))
            else:  # no ticket on this path, so no refund (as in decide_mapped)
                d, verdict, _ = verdict_of(d, dry_run=check.dry_run,
                                           max_delay=check.max_delay)
                decision = HTTPDecision(check, d, verdict, limits, failure, None)
        yield _new_check(Replayed, (ev, decision))


#: A mapped request's whole decision when it is one limit's, as `decide_mapped` makes it
#: with one ``decide_one(limit, key, cost, now)``: (the store's bound hit for that limit or
#: None for ``decide_one`` itself, the limit, the counter key, the cost (an int for the
#: bound hit), the limits consulted, the failure policy).
_OneLimit = tuple[Callable[[str, float], Decision] | None, Limit, str, float,
                  tuple[Limit, ...], str]

#: The algorithms whose `MemoryStore.bind_hit` replay decides through (any other goes to
#: ``decide_one``): each decides exactly as ``decide_one`` on a MemoryStore, on random
#: traces at Unix-time magnitudes (tests/replay/test_one_limit_path.py, which failed for
#: gcra before the hot path had the pure function's FLOAT_DRIFT tolerance).
BOUND_ALGORITHMS = frozenset({"gcra", "token-bucket", "fixed-window", "sliding-window-counter",
                              "sliding-window-log", "leaky-bucket"})


def _no_key_check(key: str) -> None:
    """`decide_one` stores any key the engine made (`counter_key`); so does the bound hit."""


def _one_limit(policies: Policies, engine: Engine, box: list[float]
               ) -> Callable[[HTTPCheck], _OneLimit | None] | None:
    """For a `MemoryStore` exactly (it cannot fail, so the failure policy never answers):
    `check` -> its `_OneLimit` when `decide_mapped` would decide it with one
    ``decide_one`` call (plain rules, one store check, no queue to refund), else None
    (`decide_mapped` decides it).

    A bound hit (`MemoryStore.bind_hit`, bound once per limit of `BOUND_ALGORITHMS`, for a
    whole cost) reads its clock, ``box[0]``, the event's time, where ``decide_one`` is
    passed ``now``; what its own hot path does not take goes to ``hooks.slow``, which here
    is ``decide_one`` itself."""
    store = engine.store
    if type(store) is not MemoryStore:
        return None
    # box[0] with no Python frame (a bound hit reads its clock on every call)
    clock = cast(Callable[[], float], functools.partial(operator.getitem, box, 0))
    bound: dict[int, Callable[[str, float], Decision] | None] = {}
    idents: dict[tuple[str, str], Limit] = {}
    failure, policy = engine.failure, policies.settings.failure

    def bind(lim: Limit) -> Callable[[str, float], Decision] | None:
        ident = (lim.name, lim.algorithm)
        if lim.algorithm not in BOUND_ALGORITHMS or idents.setdefault(ident, lim) != lim:
            return None  # (two limits on one table: their shared counter of inserts)

        def slow(key: str, cost: float) -> Decision:
            return store.decide_one(lim, key, float(cost), box[0])

        def failed(exc: StoreError, key: str, cost: float) -> Decision:
            raise exc  # pragma: no cover (a MemoryStore does not fail)

        return store.bind_hit(lim, HitHooks(clock, _no_key_check, sys.maxsize, failure,
                                            failed, slow))

    def of(check: HTTPCheck) -> _OneLimit | None:
        simple = engine.simple_checks(policies, check.domain, check.descriptors, check.cost)
        if simple is None or len(simple[0]) != 1:
            return None
        (lim, key, cost), limits = simple[0][0], simple[1]
        if (check.max_delay is not None and not check.dry_run
                and lim.algorithm == "leaky-bucket" and not lim.nodelay):
            return None  # decide_mapped keeps a ticket for its refund: core.decide
        if cost.is_integer():  # a bound hit takes a whole cost as an int
            hit = bound[id(lim)] if id(lim) in bound else bound.setdefault(id(lim), bind(lim))
            if hit is not None:
                return hit, lim, key, int(cost), limits, policy
        return None, lim, key, cost, limits, policy

    return of
