"""Route policies and the request -> decision -> response plan shared by every adapter.

Theory of operation (no I/O here; the adapters in asgi.py, wsgi.py, django.py and
fastapi.py do it). `_Engine.handle(request)` is one core plan (`ratekeeper.core`), run by a
synchronous adapter with `core.run` and by an asyncio one with `core.arun`:

1. `_Engine.plan(request)` matches the request against the policy: exempt paths and
   networks pass through untouched (``None``); otherwise it picks the first `Route` whose
   pattern and methods match (or the policy's default limits), works out the key and the
   cost, and returns a `Plan` naming the set of limits to decide.
2. The core decides those limits on the store, all-or-nothing: `core.hit`, or `core.decide`
   keeping the charge's ticket when the route can queue and a maximum delay may force a
   refund. A store failure never reaches the adapter: the one `core.Failure` of the engine
   (open, closed or local; never "raise" here) answers instead.
3. `_Engine.outcome(plan, decision)` turns that single decision into what to do: pass
   (with the RateLimit fields to add to the response), wait `delay` seconds first (nginx
   queueing), or reject with the configured status, headers and problem+json body. Dry run
   turns every reject and delay into a pass but keeps headers, logs and counters.
4. The plan refunds a reservation rejected for a delay past ``max_delay``, or sleeps the
   queueing delay (an ``Op`` with method ``"sleep"``: the adapter's sleep, awaited by
   `core.arun`), and returns the `Outcome` for the adapter to write.
"""

from __future__ import annotations

import http
import ipaddress
import logging
import math
import os
import re
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Generic,
    Literal,
    Protocol,
    TypedDict,
    TypeVar,
    cast,
)

from .. import core
from .._errors import StoreError
from .._types import Decision, Limit
from ..core import Failure, Limits, Op, Ticket, merge_decisions
from ..policy._decide import Verdict, decide_request, verdict_of
from ..policy._engine import Engine
from ..policy._holder import PolicyHolder, Watcher
from ..policy._http import (
    Attribute,
    Entry,
    Extra,
    HTTPCheck,
    HTTPRoute,
    HTTPRules,
    PathPattern,
    compile_path,
    request_cost,
)
from ..policy._loader import load_policies
from ..policy._model import (
    ConfigIssue,
    Domain,
    Node,
    Policies,
    PolicyError,
    PolicyLimit,
    Rule,
    Settings,
    make_level,
)
from ..policy._request import ClientIP, IPNetwork, KeyFunc, RequestInfo, safe_key
from ..stores import MemoryStore
from ..stores._base import Check
from .headers import (
    problem_body,
    ratelimit_headers,
    rejection_headers,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "HTTP_FAILURE_POLICIES",
    "HTTPFailurePolicy",
    "HTTPPolicy",
    "Outcome",
    "Plan",
    "Route",
    "compile_path",
]

#: The limiter failure policies a middleware can apply (``"raise"`` cannot answer a request).
HTTPFailurePolicy = Literal["open", "closed", "local"]
HTTP_FAILURE_POLICIES: tuple[HTTPFailurePolicy, ...] = ("open", "closed", "local")

log = logging.getLogger("ratekeeper.http")

Cost = float | Callable[[RequestInfo], float]


def _limits(limits: Limit | Sequence[Limit], where: str) -> tuple[Limit, ...]:
    """`limits` as a tuple, validated by the core's rule (`core.Limits`); ``()`` is allowed
    here (an exempt route, a policy without default limits)."""
    lims = (limits,) if isinstance(limits, Limit) else tuple(limits)
    for lim in lims:
        if not isinstance(lim, Limit):
            raise TypeError(f"{where}: expected Limit objects, got {lim!r}")
    return Limits(lims, where=where).all if lims else ()


def _check_cost(cost: object, where: str, limits: Sequence[Limit] = ()) -> None:
    if callable(cost):
        return
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not (0 < cost < math.inf):
        raise ValueError(f"{where}: cost must be a number above 0 or a function, got {cost!r}")
    for lim in limits:
        if cost > lim.capacity:
            # Such a request could never be admitted: every one would get a 429 for ever.
            raise ValueError(
                f"{where}: cost {cost!r} exceeds the capacity of limit {lim.name!r} "
                f"({lim.capacity:g}); raise that limit's burst (or rate amount for a window "
                "algorithm) or lower the cost"
            )


@dataclass(frozen=True, slots=True)
class Route:
    """Limits for the requests whose path matches `pattern` (and method is in `methods`).

    - `limits`: one `Limit` or several, decided all-or-nothing (mix ``scope="key"`` and
      ``scope="global"`` limits for "10/s per client and 1000/s in total"). Limits with the
      same name share state across routes.
    - `methods`: e.g. ``("POST", "PUT")``; ``None`` (default) matches every method.
    - `cost`: units charged per request, or a function of the `RequestInfo` ("charge more for
      expensive operations"); ``None`` (default): the policy's `cost`.
    - `key`: a key function for this route only (default: the policy's).
    - `exempt`: matching requests are not limited at all.
    - `dry_run`: ``None`` follows the policy; ``True`` shadows just this route's limits.
    - `mode`: ``"replace"`` (the default, for compatibility): only the route's limits apply
      to its requests; ``"add"``: the policy's default limits apply too, decided with the
      route's as one, all-or-nothing.
    """

    pattern: PathPattern
    limits: Limit | Sequence[Limit] = ()
    methods: Collection[str] | None = None
    cost: Cost | None = None
    key: KeyFunc | None = None
    exempt: bool = False
    dry_run: bool | None = None
    mode: Literal["add", "replace"] = "replace"
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "regex", compile_path(self.pattern))
        where = f"Route({self.pattern!r})"
        lims = _limits(self.limits, where)
        if not lims and not self.exempt:
            raise ValueError(f"{where} has no limits; give limits=[...] or exempt=True")
        set_(self, "limits", lims)
        if self.methods is not None:
            if isinstance(self.methods, str):
                raise TypeError(f"{where}: methods must be a collection, got {self.methods!r}")
            set_(self, "methods", frozenset(m.upper() for m in self.methods))
        if self.cost is not None:
            _check_cost(self.cost, where, lims)
        if self.mode not in ("add", "replace"):
            raise ValueError(f"{where}: mode must be 'add' (with the policy's default limits) "
                             f"or 'replace' (instead of them), got {self.mode!r}")

    def matches(self, method: str, path: str) -> bool:
        if self.methods is not None and method not in self.methods:
            return False
        return self.regex.fullmatch(path) is not None


@dataclass(frozen=True, slots=True)
class HTTPPolicy:
    """Everything the middleware does that is not I/O. Immutable; share one between apps.

    - `limits`: the default limits for requests no route matches (``()``: not limited).
    - `routes`: `Route`\\ s tried in order; the first match wins.
    - `client_ip`: a `ClientIP` (trusted proxies, IPv6 prefix); the fallback key.
    - `key`: the key function (``APIKey(...)``, ``User(...)``, any function of a
      `RequestInfo`); ``None`` or a ``None`` result means the client-IP key.
    - `cost`: the cost per request, for the default limits and every route that does not
      give its own.
    - `exempt_paths`: path patterns never limited (health checks, metrics).
    - `exempt_keys`: keys never limited (e.g. ``APIKey.key_for(secret)``, ``"ip:10.0.0.5"``).
    - `exempt_networks`: CIDRs of clients never limited (checked after proxy processing).
    - `status`: the rejection status (429).
    - `legacy_headers`: also send ``X-RateLimit-Limit/-Remaining/-Reset``.
    - `dry_run`: shadow mode: decide, send headers, log and count, but never reject or delay.
    - `max_delay`: seconds; a queued request (leaky bucket without nodelay) that would wait
      longer is rejected instead and its charge refunded (``None``: burst is the only bound).
    - `degraded_header`: response field naming the failure policy when the store was
      unavailable (``None`` to only log).
    - `websockets`: limit websocket handshakes too (ASGI only; default: pass through).
    - `problem_type`: the problem+json ``type`` URI.
    - `on_decision`: called with (request, decision, outcome) after every decision, where
      outcome is ``"allowed"``, ``"delayed"``, ``"rejected"``, ``"shadow-rejected"`` or
      ``"shadow-delayed"``; for metrics. Exceptions it raises are logged and ignored.
    """

    limits: Limit | Sequence[Limit] = ()
    routes: Sequence[Route] = ()
    client_ip: ClientIP = field(default_factory=ClientIP)
    key: KeyFunc | None = None
    cost: Cost = 1
    exempt_paths: Sequence[PathPattern] = ()
    exempt_keys: Collection[str] = ()
    exempt_networks: Sequence[str] = ()
    status: int = 429
    legacy_headers: bool = False
    dry_run: bool = False
    max_delay: float | None = None
    degraded_header: str | None = "X-RateLimit-Degraded"
    websockets: bool = False
    problem_type: str = "about:blank"
    on_decision: Callable[[RequestInfo, Decision, str], None] | None = None
    _exempt_paths: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _exempt_nets: tuple[IPNetwork, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "limits", _limits(self.limits, "HTTPPolicy.limits"))
        routes = tuple(self.routes)
        for r in routes:
            if not isinstance(r, Route):
                raise TypeError(f"HTTPPolicy.routes: expected Route objects, got {r!r}")
        set_(self, "routes", routes)
        by_name: dict[str, Limit] = {}
        every = [*_limits(self.limits, "limits")]
        for r in routes:
            every += _limits(r.limits, "route")
        for lim in every:
            other = by_name.setdefault(lim.name, lim)
            if other != lim:
                raise ValueError(
                    f"limit name {lim.name!r} names two different limits ({other!r} and "
                    f"{lim!r}); limits with one name share state: give them distinct names"
                )
        if not isinstance(self.client_ip, ClientIP):
            raise TypeError(f"client_ip must be a ClientIP, got {self.client_ip!r}")
        _check_cost(self.cost, "HTTPPolicy", _limits(self.limits, "HTTPPolicy.limits"))
        for r in routes:
            if r.cost is None:  # the route charges the policy's cost: it must fit there too
                _check_cost(self.cost, f"HTTPPolicy cost for Route({r.pattern!r})",
                            _limits(r.limits, "route"))
        if isinstance(self.exempt_paths, str) or isinstance(self.exempt_networks, str):
            raise TypeError("exempt_paths and exempt_networks must be lists, not one string")
        set_(self, "_exempt_paths", tuple(compile_path(p) for p in self.exempt_paths))
        nets = []
        for n in self.exempt_networks:
            try:
                nets.append(ipaddress.ip_network(n, strict=False))
            except ValueError:
                raise ValueError(f"exempt network {n!r} is not an IP address or CIDR") from None
        set_(self, "_exempt_nets", tuple(nets))
        set_(self, "exempt_keys", frozenset(self.exempt_keys))
        if isinstance(self.status, bool) or not isinstance(self.status, int) or not (
            400 <= self.status <= 599
        ):
            raise ValueError(f"status must be a 4xx or 5xx code, got {self.status!r}")
        if self.max_delay is not None and not (self.max_delay >= 0):
            raise ValueError(f"max_delay must be >= 0 seconds or None, got {self.max_delay!r}")

    @classmethod
    def of(cls, policy: HTTPPolicy | Limit | Sequence[Limit]) -> HTTPPolicy:
        """`policy` itself, or a policy with these default limits."""
        if isinstance(policy, HTTPPolicy):
            return policy
        return cls(limits=policy)

    def to_policies(self, *, failure: HTTPFailurePolicy = "open",
                    fallback_share: float = 1.0) -> Policies:
        """This policy as policies data (the model a policies file loads into): an
        ``[http]`` part and one domain, ``http``, deciding exactly as the middleware decides
        this policy. `ratekeeper serve`, replay and the middleware's file path can then run
        a policy built in Python. Counter keys differ (``key=<key>`` in place of
        ``<key>``), so the two do not share counters. `on_decision` is a middleware hook,
        not part of the model.

        Each distinct set of limits (a route's, or the defaults) is a rule of descriptor
        ``[set=<n>, key=<key>]``; the key is the route's key function, else the policy's,
        else the client's address, exactly as the middleware works it out.
        """
        return _policies_of(self, failure, fallback_share)


def _policies_of(p: HTTPPolicy, failure: HTTPFailurePolicy, fallback_share: float
                 ) -> Policies:
    """`HTTPPolicy.to_policies`."""
    default = _limits(p.limits, "limits")
    sets: list[tuple[Limit, ...]] = []

    def index_of(lims: tuple[Limit, ...]) -> int:
        if lims not in sets:
            sets.append(lims)
        return sets.index(lims)

    routes = p.routes

    def key_of(req: RequestInfo) -> str:
        # The middleware's key: the matched route's key function, else the policy's, else
        # (or when it says None) the client's address.
        fn = p.key
        for r in routes:
            if r.matches(req.method, req.path):
                fn = r.key if r.key is not None else p.key
                break
        got = fn(req) if fn is not None else None
        return p.client_ip.key_of(req.client_ip) if got is None else safe_key(str(got))

    def cost_fn(c: Cost) -> Callable[[RequestInfo], float] | None:
        return c if callable(c) else None

    http_routes: list[HTTPRoute] = []
    for j, r in enumerate(routes):
        lims = _limits(r.limits, "route")
        if r.mode == "add" and lims and not r.exempt:
            names = {lim.name for lim in lims}
            lims = (*(d for d in default if d.name not in names), *lims)
        cost = r.cost if r.cost is not None else p.cost
        desc: tuple[tuple[Entry, ...], ...] = ()
        if lims and not r.exempt:
            desc = ((Entry("set", value=str(index_of(lims))), Entry("key", "key")),)
        http_routes.append(HTTPRoute(
            f"route{j}", (r.pattern,), desc,
            None if r.methods is None else frozenset(r.methods), mode="replace",
            cost=None if callable(cost) else float(cost), exempt=r.exempt or not lims,
            dry_run=r.dry_run, cost_fn=cost_fn(cost)))
    defaults: tuple[tuple[Entry, ...], ...] = ()
    if default:
        defaults = ((Entry("set", value=str(index_of(default))), Entry("key", "key")),)
    nodes = []
    rules = []
    for i, lims in enumerate(sets):
        path = (("set", str(i)), ("key", None))
        rule = Rule("http", f"set{i}", path, tuple(
            PolicyLimit(lim, () if lim.scope == "global" else ("key",)) for lim in lims))
        rules.append(rule)
        leaf = Node("key", None, rule, make_level(()))
        nodes.append(Node("set", str(i), None, make_level((leaf,))))
    domain = Domain("http", make_level(nodes), tuple(rules), MappingProxyType({}))
    rules_http = HTTPRules(
        domain="http", descriptors=defaults, routes=tuple(http_routes),
        attributes={"key": Attribute("key", hook=key_of)}, client_ip=p.client_ip,
        exempt_paths=tuple(p.exempt_paths), exempt_networks=tuple(p.exempt_networks),
        exempt_keys={"key": frozenset(p.exempt_keys)} if p.exempt_keys else {},
        cost=1.0 if callable(p.cost) else float(p.cost), cost_fn=cost_fn(p.cost),
        dry_run=p.dry_run, max_delay=p.max_delay, status=p.status,
        legacy_headers=p.legacy_headers, degraded_header=p.degraded_header,
        problem_type=p.problem_type, websockets=p.websockets)
    settings = Settings(failure=failure, fallback_share=fallback_share,
                        legacy_headers=p.legacy_headers)
    return Policies(MappingProxyType({"http": domain}), settings, source=repr(p),
                    http=rules_http)


@dataclass(frozen=True, slots=True, eq=False)
class RouteLimit:
    """Limits a framework decorator puts on one endpoint (``@limiter.limit("5/minute")``).

    - `limits`: decided together with the policy's limits for the request, all-or-nothing;
    - `endpoint`: the endpoint's name (the ``route`` of its counters);
    - `key`: what counts separately: an attribute name (``"client_ip"``, the default; with
      a policies file any of its ``[http.attributes]``) or a function of the `RequestInfo`
      (None: fall back to the client IP);
    - `mode`: ``"add"`` (the default): the policy's limits still apply, these add to them;
      ``"replace"``: only these apply to the endpoint;
    - `cost`: units per request, or a function of the `RequestInfo` (None: the policy's);
    - `exempt`: the endpoint is not limited at all (flask-limiter's ``exempt``);
    - `refundable`: the `Outcome` of an admitted request keeps its `Ticket`, so that these
      limits' charge can be given back once the response is known (flask-limiter's
      ``deduct_when``).
    """

    limits: tuple[Limit, ...]
    endpoint: str
    key: str | KeyFunc = "client_ip"
    mode: Literal["add", "replace"] = "add"
    cost: Cost | None = None
    exempt: bool = False
    refundable: bool = False
    checker: Limits | None = field(init=False, repr=False, default=None)
    _rules: dict[str, Rule] = field(init=False, repr=False, default_factory=dict)
    _extra: list[Extra] = field(init=False, repr=False, default_factory=list)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        where = f"limits of {self.endpoint!r}"
        lims = _limits(self.limits, where)
        if not lims and not self.exempt:
            raise ValueError(f"{where}: give at least one Limit, or exempt=True")
        set_(self, "limits", lims)
        if self.mode not in ("add", "replace"):
            raise ValueError(f"{where}: mode must be 'add' (with the policy's limits) or "
                             f"'replace' (instead of them), got {self.mode!r}")
        if self.cost is not None:
            _check_cost(self.cost, where, lims)
        if lims:
            set_(self, "checker", Limits(lims, where=where))

    def rule(self, domain: str) -> Rule:
        """These limits as a policies rule of `domain` (made once per domain)."""
        got = self._rules.get(domain)
        if got is None:
            got = self._rules[domain] = Rule(
                domain, f"@{self.endpoint}", (("route", self.endpoint),),
                tuple(PolicyLimit(lim) for lim in self.limits))
        return got


#: What an adapter hands `handle` for an endpoint: its decorators' limits, one `RouteLimit`
#: per key (a login counted per username *and* per address), or None.
RouteLimits = RouteLimit | Sequence[RouteLimit] | None


def _route_limits(routes: RouteLimits) -> tuple[RouteLimit, ...]:
    if routes is None:
        return ()
    return (routes,) if isinstance(routes, RouteLimit) else tuple(routes)


@dataclass(frozen=True, slots=True)
class Plan:
    """What to ask the limiter for one request."""

    index: int  # which limiter (one per distinct set of limits)
    key: str
    cost: float
    dry_run: bool
    reserve: bool  # use reserve() so a too-long delay can be refunded
    request: RequestInfo
    limits: tuple[Limit, ...]
    extra: tuple[Check, ...] = ()  # a route decorator's checks (`RouteLimit`)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the adapter does with a decision.

    - ``action == "pass"``: wait `delay` seconds (if > 0), call the app, add `headers`.
    - ``action == "reject"``: send `status`, `headers` and `body` without calling the app;
      with `refund`, first cancel the reservation (its delay exceeded `max_delay`).
    - `ticket`: what an admitted request was charged, when a `RouteLimit` is `refundable`.
    """

    action: Literal["pass", "reject"]
    decision: Decision
    headers: list[tuple[str, str]]
    delay: float = 0.0
    status: int = 200
    body: bytes = b""
    refund: bool = False
    ticket: Ticket | None = None


class _Engine:
    """A policy bound to a store, a clock and one failure policy: the core's HTTP driver.

    `handle(request)` is the whole of one request short of the framework's I/O, as a core
    plan; an adapter runs it with `core.run` (WSGI, Django) or `core.arun` (ASGI, FastAPI)
    and does nothing else but read the request and write the response.
    """

    def __init__(
        self,
        policy: HTTPPolicy,
        store: Any,
        *,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Any],
        failure: str = "open",
        fallback_share: float = 1.0,
    ) -> None:
        self.policy = policy
        if failure not in HTTP_FAILURE_POLICIES:
            raise ValueError(
                f"failure={failure!r}: the HTTP middleware must answer every request, so it "
                "takes 'open' (admit), 'closed' (reject) or 'local' (decide on an in-process "
                "share of each limit); store errors are logged, counted in stats['degraded'] "
                "and named by the policy's degraded_header"
            )
        # One failure policy for the one store: one warning per outage, one local fallback
        # (limits with one name share its state across routes, as they do in the store).
        self.failure = Failure(failure, fallback_share)
        self.store = store
        self.clock: Callable[[], float] = clock or store.default_clock
        self.sleep = sleep
        sets: list[tuple[Limit, ...]] = []
        self._route_index: list[int] = []
        default = _limits(policy.limits, "limits")
        for r in policy.routes:
            lims = _limits(r.limits, "route")
            if r.mode == "add" and lims and not r.exempt:
                names = {lim.name for lim in lims}
                lims = (*(d for d in default if d.name not in names), *lims)
            if lims and lims not in sets:
                sets.append(lims)
            self._route_index.append(sets.index(lims) if lims else -1)
        if default and default not in sets:
            sets.append(default)
        self._default_index = sets.index(default) if default else -1
        self.limit_sets: list[tuple[Limit, ...]] = sets
        self.limits: list[Limits] = [Limits(s, where="an HTTP policy") for s in sets]
        self.stats: dict[str, int] = dict.fromkeys(
            ("exempt", "allowed", "delayed", "rejected", "shadow-rejected", "shadow-delayed",
             "degraded"),
            0,
        )

    def __repr__(self) -> str:
        return f"_Engine({self.policy!r}, store={self.store!r}, {self.failure!r})"

    # -- 0. the whole request -----------------------------------------------------------

    def handle(self, req: RequestInfo, route: RouteLimits = None
               ) -> core.Plan[Outcome | None]:
        """Plan: `req`'s `Outcome` (None: not limited), its queueing delay already slept
        and a reservation rejected for waiting too long already refunded. `route`: the
        endpoint's decorator limits, decided with the policy's."""
        extras = _route_limits(route)
        plan = self.plan(req, extras)
        if plan is None:
            return None
        checks = [*(self.limits[plan.index].checks(plan.key, plan.cost)
                    if plan.index >= 0 and plan.cost > 0 else ()), *plan.extra]
        ticket: Ticket | None = None
        keep = any(e.refundable for e in extras)  # the adapter may give a charge back
        if plan.reserve or keep:  # a delay past max_delay gives the charge back: keep its ticket
            decisions, ticket = yield from core.decide(self.store, checks, self.clock(),
                                                       self.failure)
            d = merge_decisions(decisions)
        else:
            d = yield from core.hit(self.store, checks, self.clock(), self.failure)
        out = self.outcome(plan, d)
        if out.refund:
            if ticket is not None:
                try:
                    yield from core.refund(ticket, self.clock())
                except StoreError as e:  # the charge stays and expires as usual
                    log.warning("could not refund a rejected reservation: %s", e)
        elif out.delay > 0:
            yield Op(self.sleep, "sleep", (out.delay,))
        if keep and ticket is not None and out.action == "pass":
            out = Outcome(out.action, out.decision, out.headers, out.delay, out.status,
                          out.body, out.refund, ticket)
        return out

    # -- 1. plan ------------------------------------------------------------------------

    def plan(self, req: RequestInfo, extras: tuple[RouteLimit, ...] = ()) -> Plan | None:
        """The limiter call for `req`, or None when the request is not limited. `extras`:
        the endpoint's decorator limits."""
        p = self.policy
        if any(e.exempt for e in extras):
            self.stats["exempt"] += 1
            return None
        path = req.path
        for rx in p._exempt_paths:
            if rx.fullmatch(path):
                self.stats["exempt"] += 1
                return None
        route: Route | None = None
        index = self._default_index
        for i, r in enumerate(p.routes):
            if r.matches(req.method, path):
                route = r
                index = self._route_index[i]
                break
        if any(e.mode == "replace" for e in extras):
            index = -1
        if route is not None:
            if route.exempt or (index < 0 and not extras):
                self.stats["exempt"] += 1
                return None
        elif index < 0 and not extras:
            return None
        req.client_ip = ip = p.client_ip.resolve(req)
        if ip is not None and any(ip in n for n in p._exempt_nets):
            self.stats["exempt"] += 1
            return None
        keyfn = route.key if route is not None and route.key is not None else p.key
        key = keyfn(req) if keyfn is not None else None
        # Either form is a key the core accepts, so Limits.checks below never refuses it.
        key = p.client_ip.key_of(ip) if key is None else safe_key(str(key))
        if key in p.exempt_keys:
            self.stats["exempt"] += 1
            return None
        cost_of = route.cost if route is not None and route.cost is not None else p.cost
        cost = request_cost(cost_of, req) if callable(cost_of) else float(cost_of)
        dry = p.dry_run if route is None or route.dry_run is None else route.dry_run
        limits = self.limit_sets[index] if index >= 0 else ()
        checks: tuple[Check, ...] = ()
        for extra in extras:
            if extra.checker is None:
                continue
            if callable(extra.key):
                got = extra.key(req)
                ekey = p.client_ip.key_of(ip) if got is None else safe_key(str(got))
            elif extra.key == "client_ip":
                ekey = p.client_ip.key_of(ip)
            else:
                ekey = key
            ecost = cost if extra.cost is None else request_cost(extra.cost, req) \
                if callable(extra.cost) else float(extra.cost)
            if ecost == 0:  # its cost function charged nothing
                continue
            checks = (*checks, *extra.checker.checks(ekey, ecost))
            limits = (*limits, *extra.limits)
        if not checks and (index < 0 or cost == 0):  # cost functions charged nothing
            return None
        queues = any(lim.algorithm == "leaky-bucket" and not lim.nodelay for lim in limits)
        reserve = queues and p.max_delay is not None and not dry
        return Plan(index, key, cost, dry, reserve, req, limits, checks)

    # -- 2. outcome ---------------------------------------------------------------------

    def outcome(self, plan: Plan, d: Decision) -> Outcome:
        p = self.policy
        d, verdict, refund = verdict_of(d, dry_run=plan.dry_run, max_delay=p.max_delay)
        return respond(p, self.stats, plan.request, d, verdict, key=plan.key, limits=plan.limits,
                       failure=self.failure.policy, refund=refund and plan.reserve,
                       on_decision=p.on_decision)


class _PoliciesEngine:
    """A policies file (its ``[http]`` part and domain rules) bound to a store: the same
    `Engine` plan the decision service runs, driven per request.

    `source` gives the live snapshot (a `PolicyHolder`, reloaded by `reload()` or a
    `Watcher` ticked at the start of each request: no thread); each request reads it once,
    so no request sees half of one policy and half of another. The store failure policy is
    the file's (``[service] failure``, and a rule's own ``failure``).
    """

    def __init__(self, source: Callable[[], Policies], store: Any, *,
                 clock: Callable[[], float] | None = None, sleep: Callable[[float], Any],
                 watcher: Watcher | None = None) -> None:
        first = source()
        if first.http is None:
            raise ValueError(f"{first.source}: the policies have no [http] part, so the "
                             "middleware cannot tell how a request becomes descriptors; add "
                             "[http] with domain = \"...\" and descriptors (docs/policies.md)")
        self.source = source
        self.store = store
        self.clock: Callable[[], float] = clock or store.default_clock
        self.decider = Engine(source, store, clock=self.clock)
        self.sleep = sleep
        self.watcher = watcher
        self.stats: dict[str, int] = dict.fromkeys(
            ("exempt", "allowed", "delayed", "rejected", "shadow-rejected", "shadow-delayed",
             "degraded"),
            0,
        )

    def __repr__(self) -> str:
        return f"_PoliciesEngine({self.source()!r}, store={self.store!r})"

    @property
    def rules(self) -> HTTPRules:
        rules = self.source().http
        assert rules is not None  # a reload keeps a snapshot without one out (see reload)
        return rules

    def check(self, req: RequestInfo) -> HTTPCheck | None:
        """`req`'s descriptors under the live policies, without deciding them (None: not
        limited): what a request becomes, for a test or a curious operator."""
        return self.rules.map(req, self.clock())

    def handle(self, req: RequestInfo, route: RouteLimits = None
               ) -> core.Plan[Outcome | None]:
        """Plan: as `_Engine.handle`, for a policies file (`ratekeeper.policy.decide_request`,
        rendered as a response)."""
        if self.watcher is not None:
            self.watcher.tick()
        snap = self.source()
        hd = yield from decide_request(self.decider, snap, req, self.clock(), () if route is None
                                       else tuple(_extra_of(r) for r in _route_limits(route)))
        if hd is None:
            self.stats["exempt"] += 1
            return None
        rules = snap.http
        assert rules is not None  # decide_request answered None otherwise
        # The key a log line names: only rejections and dry runs log one.
        key = "" if hd.decision.allowed and hd.verdict != "shadow-rejected" else ";".join(
            ",".join(f"{k}={v}" for k, v in desc.entries) for desc in hd.check.descriptors)
        out = respond(rules, self.stats, req, hd.decision, hd.verdict, key=key,
                      limits=hd.limits, failure=hd.failure)
        if out.delay > 0:
            yield Op(self.sleep, "sleep", (out.delay,))
        return out


def _extra_of(route: RouteLimit) -> Extra:
    """A decorator's limits as the policies mapping takes them (made once per route)."""
    if not route._extra:
        route._extra.append(Extra(route.endpoint, route.rule, route.key, route.mode,
                                  route.cost, route.exempt))
    return route._extra[0]


class _Response(Protocol):
    """The response settings `respond` reads: an `HTTPPolicy`'s or a file's `HTTPRules`."""

    @property
    def status(self) -> int: ...
    @property
    def legacy_headers(self) -> bool: ...
    @property
    def degraded_header(self) -> str | None: ...
    @property
    def problem_type(self) -> str: ...


def respond(p: _Response, stats: dict[str, int], req: RequestInfo, d: Decision,
            verdict: Verdict, *, key: str, limits: Sequence[Limit], failure: str,
            refund: bool = False,
            on_decision: Callable[[RequestInfo, Decision, str], None] | None = None
            ) -> Outcome:
    """The response for one request's `verdict` (`ratekeeper.policy.verdict_of`), counted
    in `stats`: pass (with its RateLimit fields, after a queueing delay), or reject."""
    if d.degraded:
        stats["degraded"] += 1
    if d.allowed or verdict == "shadow-rejected":
        headers = ratelimit_headers(d, legacy=p.legacy_headers, policies=limits)
        if d.degraded and p.degraded_header:
            headers.append((p.degraded_header, failure))
        if verdict == "shadow-rejected":
            log.info("dry run: would reject %s %s for key %r: %r", req.method, req.path, key, d)
        out = Outcome("pass", d, headers, delay=d.delay if verdict == "delayed" else 0.0)
    else:
        log.debug("rejecting %s %s for key %r: %r", req.method, req.path, key, d)
        hdrs = rejection_headers(d, legacy=p.legacy_headers, policies=limits)
        if d.degraded and p.degraded_header:
            hdrs.append((p.degraded_header, failure))
        body = b"" if req.method == "HEAD" else problem_body(
            d, status=p.status, title=_phrase(p.status), type_=p.problem_type,
            instance=req.path if req.path.isprintable() and len(req.path) <= 256 else None,
        )
        out = Outcome("reject", d, hdrs, status=p.status, body=body, refund=refund)
    stats[verdict] += 1
    if on_decision is not None:
        try:
            on_decision(req, d, verdict)
        except Exception:
            log.exception("on_decision hook raised")
    return out


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Request Rejected"


def status_line(status: int) -> str:
    """``"429 Too Many Requests"`` for WSGI's start_response."""
    return f"{status} {_phrase(status)}"


S = TypeVar("S")  # the store type of an adapter: `Store` (sync) or `AsyncStore`
#: Its sleep: ``(seconds) -> None`` (sync) or ``(seconds) -> Awaitable[None]`` (asyncio).
Z = TypeVar("Z", bound=Callable[[float], Any])

if TYPE_CHECKING:  # a generic TypedDict needs Python 3.11 at run time; only mypy reads it

    class AdapterOptions(TypedDict, Generic[S, Z], total=False):
        """The keyword arguments of every adapter (see `RateLimitMiddleware`).

        - `store`: where state lives (default: a new in-process `MemoryStore`);
        - `clock` / `sleep`: injected time (default: the store's clock, the blocking or
          awaited sleep of the adapter's kind);
        - `failure`, `fallback_share`: the store failure policy (``"open"``, ``"closed"``
          or ``"local"`` with a share of each limit).
        """

        store: S | None
        clock: Callable[[], float] | None
        sleep: Z | None
        failure: HTTPFailurePolicy
        fallback_share: float
        watch: float | None
        watch_clock: Callable[[], float] | None


#: The keyword arguments every adapter takes (`AdapterOptions`), for the unknown-name check.
ADAPTER_OPTIONS = ("store", "clock", "sleep", "failure", "fallback_share", "watch",
                   "watch_clock")


def check_options(where: str, options: Collection[str], accepted: Collection[str] = ()
                  ) -> None:
    """Refuse an adapter keyword argument no adapter takes (a typo such as ``stroe=``
    would otherwise be dropped unseen), naming it and the ones `where` takes: the adapter
    options and its own `accepted`."""
    unknown = sorted(set(options) - set(ADAPTER_OPTIONS))
    if unknown:
        raise TypeError(f"{where}: unexpected keyword argument {unknown[0]!r}; it takes "
                        f"{', '.join(sorted({*ADAPTER_OPTIONS, *accepted}))}")


@dataclass(frozen=True, slots=True)
class _Kind:
    """Sync or asyncio: the store protocol an adapter takes and its default sleep (which
    driver runs the plans is the adapter's own one line: `core.run` or `core.arun`)."""

    store_type: type
    default_sleep: Callable[[float], Any]
    other: str  # what to use with a store of the other kind


class _Adapter(Generic[S, Z]):
    """What every adapter shares: the policy, the store, the engine and its counters.

    A subclass names its `_Kind` and runs `engine.handle` around its framework's I/O.
    """

    _kind: ClassVar[_Kind]

    def __init__(self, policy: PolicySpec, **options: Unpack[AdapterOptions[S, Z]]) -> None:
        check_options(type(self).__name__, options)
        kind = self._kind
        store: Any = options.get("store")
        store = MemoryStore() if store is None else store
        if not isinstance(store, kind.store_type):
            raise TypeError(f"{type(self).__name__} needs a {kind.store_type.__name__}, "
                            f"got {store!r}; {kind.other}")
        self.store: S = cast(S, store)
        given_sleep = options.get("sleep")
        sleep: Callable[[float], Any] = kind.default_sleep if given_sleep is None \
            else given_sleep
        self.holder: PolicyHolder | None = None
        self.engine: _Engine | _PoliciesEngine
        if isinstance(policy, (str, os.PathLike, PolicyHolder, Policies)):
            for name in ("failure", "fallback_share"):
                if name in options:
                    raise TypeError(f"{name}= is for a Python policy; with a policies file, "
                                    "its [service] failure (and each rule's own) decides")
            source: Callable[[], Policies]
            watcher = None
            if isinstance(policy, Policies):
                if options.get("watch") is not None:
                    raise TypeError("watch= needs a policies file, not a Policies value")
                snap = policy
                source = lambda: snap  # noqa: E731
            else:
                holder = policy if isinstance(policy, PolicyHolder) else PolicyHolder(
                    Path(policy), loader=_load_http_policies)
                self.holder = holder
                source = holder
                watch = options.get("watch")
                if watch is not None:
                    # Polls on the watch clock, else the adapter's clock (a test's
                    # ManualClock steps both), else the monotonic clock.
                    watcher = Watcher(holder, watch, clock=options.get("watch_clock")
                                      or options.get("clock") or time.monotonic)
            self.engine = _PoliciesEngine(source, store, clock=options.get("clock"),
                                          sleep=sleep, watcher=watcher)
            self.policy: HTTPPolicy | None = None
        else:
            if options.get("watch") is not None:
                raise TypeError("watch= needs a policies file")
            self.policy = HTTPPolicy.of(policy)
            self.engine = _Engine(self.policy, store, clock=options.get("clock"),
                                  sleep=sleep, failure=options.get("failure", "open"),
                                  fallback_share=options.get("fallback_share", 1.0))

    def __repr__(self) -> str:
        what = self.policy if self.holder is None else self.holder
        return f"{type(self).__name__}({what!r})"

    @property
    def stats(self) -> dict[str, int]:
        """Counters: exempt, allowed, delayed, rejected, shadow-*, degraded."""
        return self.engine.stats

    @property
    def websockets(self) -> bool:
        """Whether websocket handshakes are limited too (the policy's `websockets`)."""
        e = self.engine
        return e.policy.websockets if isinstance(e, _Engine) else e.rules.websockets

    def reload(self) -> bool:
        """Read the policies file again: True if the new policies are live (or the file is
        unchanged); False if it has errors (each logged; the old policies stay)."""
        if self.holder is None:
            raise TypeError(f"{type(self).__name__} was given a Python policy, not a file: "
                            "there is nothing to reload")
        return self.holder.reload()


def _load_http_policies(path: Path) -> Policies:
    """`load_policies`, refusing a file without an ``[http]`` part (so that a reload never
    takes a middleware's mapping away)."""
    snap = load_policies(path)
    if snap.http is None:
        raise PolicyError([ConfigIssue("http", "missing: a middleware needs the [http] part "
                                               "(how a request becomes descriptors)")],
                          str(path))
    return snap


#: What an adapter takes as its policy: a Python `HTTPPolicy` (or its default limits), or a
#: policies file (a path, a `PolicyHolder`, or a `Policies` snapshot) with an ``[http]`` part.
PolicySpec = HTTPPolicy | Limit | Sequence[Limit] | Policies | PolicyHolder | str | os.PathLike[str]


A = TypeVar("A")  # the application a middleware wraps


class _Middleware(_Adapter[S, Z], Generic[A, S, Z]):
    """An adapter around an application: ``Middleware(app, policy, **options)``."""

    def __init__(self, app: A, policy: PolicySpec = (),
                 **options: Unpack[AdapterOptions[S, Z]]) -> None:
        self.app = app
        super().__init__(policy, **options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.app!r}, {self.policy!r})"
