"""How an HTTP request becomes descriptors: the ``[http]`` part of a policies file.

The middleware, ``ratekeeper serve``'s ``/v1/http`` endpoint and replay all map a request the
same way (`HTTPRules.map`), then decide the descriptors with the one `Engine` against the
file's domain rules (`_decide.decide_request`), so the same file gives the same decisions
everywhere. It is what
Envoy's ``rate_limits`` actions are to Envoy, for an in-process middleware:

1. **Coverage**: the request must match `paths` / `methods` / `hosts` (default: everything);
   then `exempt_paths` and `exempt_networks` (after trusted-proxy processing) pass it through.
2. **Route**: the first `HTTPRoute` whose path patterns, methods and hosts match (none: the
   defaults only). A route may be `exempt`; it has its own `descriptors`, which add to the
   default ones (``mode = "add"``, the default) or replace them (``mode = "replace"``); its
   own `cost` (per method too) and `dry_run` / `max_delay`.
3. **Descriptors**: each is a list of entries ``(key, value)``; a value comes from an
   `Attribute` of the request (a header, a JWT claim, a Python hook, or a built-in:
   ``client_ip``, ``method``, ``path``, ``host``, ``route``) or is a literal. A descriptor
   with an absent attribute is not sent (as Envoy skips an action whose header is missing):
   an anonymous request gets its per-IP limit but no per-user one.
4. **Exempt keys**: a request any of whose attributes has an exempt value passes through.

Attribute values are bounded here, because a client writes them: a value that is too long
or not printable becomes ``sha256:`` and a digest, and `values` (the tiers a plan attribute
may name) maps any other value to `default`, so that a client cannot invent a tier.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import json
import logging
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from .._types import Limit
from ._request import ClientIP, IPNetwork, RequestInfo
from ._rules import DescriptorRequest, PolicyLimit, Rule

__all__ = [
    "BUILTIN_ATTRIBUTES",
    "Attribute",
    "Entry",
    "HTTPCheck",
    "HTTPRoute",
    "HTTPRules",
    "LimitsHook",
    "PathPattern",
    "compile_path",
    "request_cost",
]

log = logging.getLogger("ratekeeper.policy")

#: Attributes every request has (a file may not redefine them).
BUILTIN_ATTRIBUTES = ("client_ip", "method", "path", "host", "route")

#: The longest attribute value sent as is; longer (or unprintable) ones are digested.
MAX_VALUE = 256

PathPattern = str | re.Pattern[str]
RouteMode = Literal["add", "replace"]

_PARAM = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*(?::path)?\}")


def compile_path(pattern: PathPattern) -> re.Pattern[str]:
    """A path pattern as an anchored regular expression.

    - ``"/health"``: exactly that path;
    - ``"/items/{id}"``: one segment per ``{name}`` (``{name:path}`` spans segments);
    - ``"/static/*"``: ``*`` is any run of characters within a segment, ``**`` any run at all
      (``"/api/**"`` is everything under /api/);
    - a compiled ``re.Pattern`` is used as is (with ``fullmatch``).
    """
    if isinstance(pattern, re.Pattern):
        return pattern
    if not isinstance(pattern, str) or not pattern.startswith("/"):
        raise ValueError(f"a path pattern must be a string starting with '/', got {pattern!r}")
    out = []
    i = 0
    while i < len(pattern):
        m = _PARAM.match(pattern, i)
        if m:
            out.append(".+" if m.group().endswith(":path}") else "[^/]+")
            i = m.end()
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out), re.DOTALL)


def compile_host(pattern: str) -> re.Pattern[str]:
    """A host pattern (``"api.example.com"``, ``"*.example.com"``), case-insensitive, any
    port."""
    if not pattern or not re.fullmatch(r"[A-Za-z0-9*.-]+", pattern):
        raise ValueError(f"a host pattern is a host name with optional '*' wildcards "
                         f"(e.g. '*.example.com'), got {pattern!r}")
    body = ".*".join(re.escape(p) for p in pattern.lower().split("*"))
    return re.compile(body + r"(?::\d+)?", re.IGNORECASE)


def bounded(value: str) -> str:
    """`value` as a descriptor value: itself if short and printable, else a digest."""
    if len(value) <= MAX_VALUE and value.isprintable():
        return value
    return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _jwt_claim(header_value: str, claim: str) -> str | None:
    """`claim` of a bearer JWT's payload, *unverified* (see `Attribute`), or None."""
    kind, _, token = header_value.partition(" ")
    if kind.lower() != "bearer":
        return None
    parts = token.strip().split(".")
    if len(parts) != 3 or len(parts[1]) > 8192:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    value = payload.get(claim) if isinstance(payload, dict) else None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    return str(value)


class _HookCache:
    """A hook's results, per value of another attribute, for `seconds` of the engine's clock;
    at most `size` entries (least recently used go first)."""

    def __init__(self, seconds: float, size: int) -> None:
        self.seconds = seconds
        self.size = size
        self._entries: OrderedDict[str, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, now: float) -> tuple[bool, Any]:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None or hit[0] <= now:
                return False, None
            self._entries.move_to_end(key)
            return True, hit[1]

    def put(self, key: str, value: Any, now: float) -> None:
        with self._lock:
            self._entries[key] = (now + self.seconds, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


#: The charge of a request whose cost function answered infinity, NaN or more than a store
#: counts: a whole number no limit's capacity reaches in practice, so the request is refused
#: as one that can never fit (``retry_after`` None), never admitted.
NEVER_FITS = float(2**62)


def request_cost(cost_fn: Callable[[RequestInfo], float], req: RequestInfo) -> float:
    """What a cost function's answer charges one request. A function often reads the cost
    from the request itself (slowapi's own example takes a header), so its answer is the
    client's to choose and must never be an error: 0 or less charges nothing (the request
    is not limited, as slowapi's ``cost=0``; a negative cost is no refund here), infinity,
    NaN or more than a store counts never fits (a 429 without Retry-After). An answer
    that is not a number is the function's bug: a TypeError naming it."""
    value = cost_fn(req)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"the cost function {getattr(cost_fn, '__qualname__', cost_fn)!r} "
                        f"returned {value!r}; it must return a number (the request's cost)")
    if value <= 0:
        return 0.0
    if not value <= NEVER_FITS:  # (`not <=`: NaN too)
        return NEVER_FITS
    return float(value)


@dataclass(frozen=True, slots=True, eq=False)
class Attribute:
    """A named value of a request, used as a descriptor entry's value.

    Exactly one source:

    - `header`: a request header (case-insensitive); ``hash = true`` sends a digest, never
      the value (API keys);
    - `claim` (with `header`, default ``authorization``): a claim of a bearer JWT's payload.
      The token is **not verified** here: use it only behind a layer that verified it (an
      authenticating proxy or middleware), or a client can name any claim value;
    - `hook`: a function of the `RequestInfo` returning a string or None (a database lookup:
      the user's plan). `cache_seconds` (with `cache_by`, the attribute whose value keys
      the cache, and `cache_size`) remembers its answers on the engine's clock.

    Then `values` (if given) lists what the attribute may be, e.g. the tiers ``["free",
    "pro"]``: anything else, or an absent value, is `default` (None: absent, so descriptors
    using it are not sent).
    """

    name: str
    header: str | None = None
    claim: str | None = None
    hook: Callable[[RequestInfo], object] | None = None
    hash: bool = False
    values: Collection[str] | None = None
    default: str | None = None
    cache_seconds: float = 0.0
    cache_by: str | None = None
    cache_size: int = 10_000
    _cache: _HookCache | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        where = f"attribute {self.name!r}"
        if not self.name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", self.name):
            raise ValueError(f"{where}: a name is letters, digits and _ . - (starting with a "
                             "letter or _)")
        if self.name in BUILTIN_ATTRIBUTES:
            raise ValueError(f"{where} is built in ({', '.join(BUILTIN_ATTRIBUTES)}); "
                             "choose another name")
        if self.claim is not None and self.header is None:
            set_(self, "header", "authorization")
        sources = [s for s in (self.header, self.hook) if s is not None]
        if len(sources) != 1:
            raise ValueError(f"{where} needs exactly one source: header = \"...\" "
                             "(optionally with claim = \"...\") or a hook")
        if self.header is not None:
            set_(self, "header", self.header.lower())
        if self.values is not None:
            if isinstance(self.values, str) or not self.values:
                raise ValueError(f"{where}: values must be a non-empty list of strings")
            set_(self, "values", frozenset(self.values))
        if self.default is not None and self.values is not None \
                and self.default not in self.values:
            raise ValueError(f"{where}: default {self.default!r} is not one of its values "
                             f"{sorted(self.values)}")
        if self.cache_seconds:
            if self.hook is None:
                raise ValueError(f"{where}: cache_seconds applies to a hook only")
            if not (0 < self.cache_seconds < math.inf):
                raise ValueError(f"{where}: cache_seconds must be a number above 0")
            if not self.cache_by:
                raise ValueError(f"{where}: a cached hook needs cache_by, the attribute "
                                 "whose value its answer depends on (e.g. \"user\")")
            if not (1 <= self.cache_size <= 10_000_000):
                raise ValueError(f"{where}: cache_size must be 1 to 10000000")
            set_(self, "_cache", _HookCache(float(self.cache_seconds), self.cache_size))

    def raw(self, req: RequestInfo) -> str | None:
        """The value before `values`/`default`, or None when absent."""
        if self.hook is not None:
            try:
                got = self.hook(req)
            except Exception:  # a broken hook must not break requests: logged, absent
                log.exception("attribute %r: its hook raised; the attribute is absent",
                              self.name)
                return None
            return None if got is None or got == "" else str(got)
        assert self.header is not None
        value = req.headers.get(self.header)
        if value is None:
            return None
        if self.claim is not None:
            return _jwt_claim(value, self.claim)
        value = value.strip()
        if not value:
            return None
        return self.digest(value) if self.hash else value

    def digest(self, value: str) -> str:
        """What a ``hash = true`` attribute sends for `value` (and how its exempt values are
        compared): never the secret itself."""
        return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")
                                          ).hexdigest()[:32]

    def resolve(self, raw: str | None) -> str | None:
        """`raw` after `values` and `default`, bounded."""
        if raw is None or (self.values is not None and raw not in self.values):
            return self.default
        return bounded(raw)


#: The most limits a `LimitsHook` may give one request (its answer is bounded: a database
#: row cannot make one request do unbounded work).
MAX_HOOK_LIMITS = 8


@dataclass(frozen=True, slots=True, eq=False)
class LimitsHook:
    """Limits that live elsewhere (a database of customer contracts): ``hook(request)``
    returns the request's own `Limit` objects (one, a list, or None), decided together with
    the file's descriptors, all-or-nothing, counted per value of the attribute `key`.

    Its answer is remembered per `key` value for `cache_seconds` of the engine's clock (at
    most `cache_size` of them) and bounded: at most `max_limits` limits; anything else it
    returns, or an exception it raises, is logged and means no extra limits.
    """

    hook: Callable[[RequestInfo], object]
    key: str = "client_ip"
    cache_seconds: float = 0.0
    cache_size: int = 10_000
    max_limits: int = MAX_HOOK_LIMITS
    _cache: _HookCache | None = field(init=False, repr=False, default=None)
    _rules: dict[tuple[Limit, ...], Rule] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        if not callable(self.hook):
            raise ValueError(f"limits_for: hook must be callable, got {self.hook!r}")
        if self.cache_seconds:
            if not (0 < self.cache_seconds < math.inf):
                raise ValueError("limits_for: cache_seconds must be a number above 0")
            if not (1 <= self.cache_size <= 10_000_000):
                raise ValueError("limits_for: cache_size must be 1 to 10000000")
            object.__setattr__(self, "_cache",
                               _HookCache(float(self.cache_seconds), self.cache_size))
        if not (1 <= self.max_limits <= 64):
            raise ValueError("limits_for: max_limits must be 1 to 64")

    def limits(self, req: RequestInfo, key: str, now: float) -> tuple[Limit, ...]:
        """The request's own limits (cached per `key`)."""
        cache = self._cache
        if cache is not None:
            hit, got = cache.get(key, now)
            if hit:
                return got  # type: ignore[no-any-return]
        out = self._call(req)
        if cache is not None:
            cache.put(key, out, now)
        return out

    def _call(self, req: RequestInfo) -> tuple[Limit, ...]:
        try:
            got = self.hook(req)
        except Exception:  # a broken lookup must not break requests: logged, no limits
            log.exception("limits_for hook raised; the request gets no limits of its own")
            return ()
        if got is None:
            return ()
        lims = (got,) if isinstance(got, Limit) else got
        if not isinstance(lims, (list, tuple)) or not all(isinstance(x, Limit) for x in lims):
            log.error("limits_for hook returned %r: expected a Limit, a list of them or None; "
                      "the request gets no limits of its own", got)
            return ()
        if len(lims) > self.max_limits:
            log.error("limits_for hook returned %d limits, more than max_limits=%d; the "
                      "request gets no limits of its own", len(lims), self.max_limits)
            return ()
        return tuple(lims)

    def rule(self, domain: str, limits: tuple[Limit, ...]) -> Rule:
        """A rule applying `limits` (one per distinct set; remembered, bounded)."""
        got = self._rules.get(limits)
        if got is None:
            if len(self._rules) >= 1024:
                self._rules.clear()
            got = self._rules[limits] = Rule(domain, "{limits_for}", (), tuple(
                PolicyLimit(lim) for lim in limits))
        return got


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of a descriptor: its `key`, and the `attribute` giving its value or a
    literal `value`."""

    key: str
    attribute: str | None = None
    value: str | None = None


@dataclass(frozen=True, slots=True, eq=False)
class HTTPRoute:
    """The requests whose path matches one of `paths` (and method, host): their descriptors,
    cost, dry run, queueing bound, or exemption."""

    name: str
    paths: tuple[PathPattern, ...]
    descriptors: tuple[tuple[Entry, ...], ...] = ()
    methods: frozenset[str] | None = None
    hosts: tuple[str, ...] | None = None
    mode: RouteMode = "add"
    cost: float | None = None
    method_costs: Mapping[str, float] = field(default_factory=dict)
    exempt: bool = False
    dry_run: bool | None = None
    max_delay: float | None = None
    #: The cost as a function of the request (a Python `HTTPPolicy`'s callable cost), over
    #: `cost` and `method_costs`.
    cost_fn: Callable[[RequestInfo], float] | None = None
    _paths: tuple[re.Pattern[str], ...] = field(init=False, repr=False)
    _hosts: tuple[re.Pattern[str], ...] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "_paths", tuple(compile_path(p) for p in self.paths))
        set_(self, "_hosts", None if self.hosts is None
             else tuple(compile_host(h) for h in self.hosts))

    def matches(self, method: str, path: str, host: str) -> bool:
        if self.methods is not None and method not in self.methods:
            return False
        if self._hosts is not None and not any(h.fullmatch(host) for h in self._hosts):
            return False
        return any(p.fullmatch(path) for p in self._paths)

    def cost_of(self, req: RequestInfo, default: float) -> float:
        if self.cost_fn is not None:
            return request_cost(self.cost_fn, req)
        c = self.method_costs.get(req.method)
        if c is not None:
            return c
        return default if self.cost is None else self.cost


class Extra(NamedTuple):
    """Limits a framework decorator adds to one endpoint (`ratekeeper.http.RouteLimit` in
    the terms of this mapping): `rule(domain)` gives its pre-matched rule, whose descriptor
    is ``[("route", endpoint), (key, value of `key`)]``."""

    endpoint: str
    rule: Callable[[str], Rule]
    key: str | Callable[[RequestInfo], object]
    mode: RouteMode
    cost: float | Callable[[RequestInfo], float] | None  # a function: of the request
    exempt: bool


class HTTPCheck(NamedTuple):
    """What to decide for one request: the `descriptors` of `domain`, `cost` hits each.
    (A NamedTuple: one is built per request.)"""

    domain: str
    descriptors: tuple[DescriptorRequest, ...]
    cost: float
    dry_run: bool
    max_delay: float | None
    route: str  # the matched route's name ("": none)
    request: RequestInfo

    def __repr__(self) -> str:
        return (f"HTTPCheck({self.domain!r}, route={self.route!r}, "
                f"{[d.entries for d in self.descriptors]}, cost={self.cost:g})")


@dataclass(frozen=True, slots=True, eq=False)
class HTTPRules:
    """The ``[http]`` part of a policies file (see the module docstring for the steps).

    Besides the mapping, the response settings the middleware applies: `status`,
    `legacy_headers`, `degraded_header`, `problem_type`, `websockets`; and the request
    defaults `cost`, `dry_run`, `max_delay` (a route may override each).
    """

    domain: str
    descriptors: tuple[tuple[Entry, ...], ...] = ()
    routes: tuple[HTTPRoute, ...] = ()
    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    client_ip: ClientIP = field(default_factory=ClientIP)
    paths: tuple[PathPattern, ...] = ()
    methods: frozenset[str] | None = None
    hosts: tuple[str, ...] | None = None
    exempt_paths: tuple[PathPattern, ...] = ()
    exempt_networks: tuple[str, ...] = ()
    exempt_keys: Mapping[str, frozenset[str]] = field(default_factory=dict)
    cost: float = 1.0
    dry_run: bool = False
    max_delay: float | None = None
    status: int = 429
    legacy_headers: bool = False
    degraded_header: str | None = "X-RateLimit-Degraded"
    problem_type: str = "about:blank"
    websockets: bool = False
    limits_for: LimitsHook | None = None
    #: The default cost as a function of the request (a Python `HTTPPolicy`'s), over `cost`.
    cost_fn: Callable[[RequestInfo], float] | None = None
    _cover: HTTPRoute | None = field(init=False, repr=False)
    _exempt_paths: tuple[re.Pattern[str], ...] = field(init=False, repr=False)
    _exempt_nets: tuple[IPNetwork, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        cover = None
        if self.paths or self.methods is not None or self.hosts is not None:
            cover = HTTPRoute("[http]", self.paths or ("/**",), methods=self.methods,
                              hosts=self.hosts)
        set_(self, "_cover", cover)
        set_(self, "_exempt_paths", tuple(compile_path(p) for p in self.exempt_paths))
        set_(self, "_exempt_nets", tuple(ipaddress.ip_network(n, strict=False)
                                         for n in self.exempt_networks))

    def map(self, req: RequestInfo, now: float, extras: tuple[Extra, ...] = ()
            ) -> HTTPCheck | None:
        """The descriptors to decide for `req` (None: not limited). Sets ``req.client_ip``.

        `now` is the engine's clock (for cached hooks); `extra`, an endpoint decorator's
        limits (added to the descriptors, or replacing them)."""
        if extras and any(e.exempt for e in extras):
            return None
        path, method = req.path, req.method
        host = req.headers.get("host", "")
        cover = self._cover
        if cover is not None and not cover.matches(method, path, host):
            return None
        for rx in self._exempt_paths:
            if rx.fullmatch(path):
                return None
        route: HTTPRoute | None = None
        for r in self.routes:
            if r.matches(method, path, host):
                route = r
                break
        if route is not None and route.exempt:
            return None
        req.client_ip = ip = self.client_ip.resolve(req)
        if ip is not None and self._exempt_nets and any(ip in n for n in self._exempt_nets):
            return None
        if route is None:
            groups = self.descriptors
        elif route.mode == "replace":
            groups = route.descriptors
        else:
            groups = self.descriptors + route.descriptors
        if extras and any(e.mode == "replace" for e in extras):
            groups = ()
        if not groups and not extras:
            return None
        route_name = "" if route is None else route.name
        values: dict[str, str | None] = {}
        exempt = self.exempt_keys
        for name, keys in exempt.items():
            v = self._value(name, req, route_name, values, now)
            if v is not None and v in keys:
                return None
        out: list[DescriptorRequest] = []
        for group in groups:
            entries: list[tuple[str, str]] = []
            for e in group:
                v = e.value if e.attribute is None else \
                    self._value(e.attribute, req, route_name, values, now)
                if v is None:
                    break
                entries.append((e.key, v))
            else:
                out.append(DescriptorRequest(tuple(entries)))
        for extra in extras:
            rule = extra.rule(self.domain)
            if callable(extra.key):
                got = extra.key(req)
                v = None if got is None else bounded(str(got))
                name = "key"
            else:
                name = extra.key
                if name not in self.attributes and name not in BUILTIN_ATTRIBUTES:
                    raise ValueError(f"a decorator on {extra.endpoint!r} counts by "
                                     f"{name!r}, which is not an attribute of the policies' "
                                     f"[http] part; known: {sorted(self.attribute_names())}")
                v = self._value(name, req, route_name, values, now)
            if v is None:  # no key: by the client's address, as a key function's None
                name, v = "client_ip", self._value("client_ip", req, route_name, values, now)
            assert v is not None
            out.append(DescriptorRequest((("route", extra.endpoint), (name, v)), rule=rule))
        lf = self.limits_for
        if lf is not None:
            who = self._value(lf.key, req, route_name, values, now)
            if who is not None:
                own = lf.limits(req, who, now)
                if own:
                    out.append(DescriptorRequest(((lf.key, who),), rule=lf.rule(self.domain,
                                                                                own)))
        if not out:
            return None
        extra_cost = None if not extras else \
            next((e.cost for e in extras if e.cost is not None), None)
        if extra_cost is not None:
            cost = request_cost(extra_cost, req) if callable(extra_cost) else extra_cost
            dry, max_delay = self.dry_run, self.max_delay
        elif route is None:
            cost = self.cost if self.cost_fn is None else request_cost(self.cost_fn, req)
            dry, max_delay = self.dry_run, self.max_delay
        else:
            cost = route.cost_of(req, self.cost if self.cost_fn is None
                                 else request_cost(self.cost_fn, req))
            dry = self.dry_run if route.dry_run is None else route.dry_run
            max_delay = self.max_delay if route.max_delay is None else route.max_delay
        if cost == 0:  # a cost function charged nothing: not limited
            return None
        return HTTPCheck(self.domain, tuple(out), cost, dry, max_delay, route_name, req)

    def _value(self, name: str, req: RequestInfo, route: str, values: dict[str, str | None],
               now: float) -> str | None:
        if name in values:
            return values[name]
        v: str | None
        if name == "client_ip":
            v = self.client_ip.key_of(req.client_ip)[3:]  # without the "ip:" of a key
        elif name == "method":
            v = bounded(req.method)
        elif name == "path":
            v = bounded(req.path)
        elif name == "host":
            host = req.headers.get("host", "").strip().lower()
            v = bounded(host) if host else None
        elif name == "route":
            v = route or None
        else:
            attr = self.attributes[name]
            cache = attr._cache
            if cache is not None:
                assert attr.cache_by is not None
                by = self._value(attr.cache_by, req, route, values, now)
                if by is None:
                    v = attr.resolve(attr.raw(req))
                else:
                    hit, got = cache.get(by, now)
                    if not hit:
                        got = attr.raw(req)
                        cache.put(by, got, now)
                    v = attr.resolve(got)
            else:
                v = attr.resolve(attr.raw(req))
        values[name] = v
        return v

    def attribute_names(self) -> set[str]:
        return {*BUILTIN_ATTRIBUTES, *self.attributes}
