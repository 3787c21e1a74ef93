"""The ``[http]`` part of a policies file to `HTTPRules`, every error located.

Called by `_loader` once the domains are built (the mapping refers to them): it reports into
the same list of issues, with key paths such as ``http.routes[2].descriptors[0][1]``. What
cannot work is an error, never silently accepted: an unknown key or attribute, a domain
that is not defined, a route no request can reach (an earlier route takes all of its
requests, or it is outside ``[http] paths``), a hook that cannot be imported, a tier value
(an attribute's `values`) that matches no rule of the domain.
"""

from __future__ import annotations

import importlib
import ipaddress
import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, cast

from ._build import Issues
from ._http import (
    BUILTIN_ATTRIBUTES,
    Attribute,
    Entry,
    HTTPRoute,
    HTTPRules,
    LimitsHook,
    RouteMode,
    compile_host,
    compile_path,
)
from ._model import Domain
from ._names import _closest
from ._request import ClientIP, RequestInfo

__all__ = ["HTTP_KEYS", "UnimportedHook", "build_http"]

HTTP_KEYS = ("domain", "descriptors", "routes", "attributes", "paths", "methods", "hosts",
             "exempt", "client_ip", "cost", "dry_run", "max_delay", "status",
             "legacy_headers", "degraded_header", "problem_type", "websockets", "limits_for")
_LIMITS_FOR_KEYS = ("hook", "key", "cache_seconds", "cache_size", "max_limits")
_ROUTE_KEYS = ("name", "path", "methods", "hosts", "descriptors", "mode", "cost",
               "exempt", "dry_run", "max_delay")
_ATTRIBUTE_KEYS = ("header", "claim", "hook", "hash", "values", "default", "cache_seconds",
                   "cache_by", "cache_size")
_EXEMPT_KEYS = ("paths", "networks", "keys")
_CLIENT_IP_KEYS = ("trusted_proxies", "header", "ipv6_prefix", "ipv4_prefix")
_ENTRY_KEYS = ("key", "attribute", "value")
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT",
           "WEBSOCKET")


#: A hook reference's module and attribute: dotted Python identifiers.
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def build_http(b: Issues, raw: object, domains: Mapping[str, Domain],
               domain_names: Collection[str], *, import_hooks: bool = True,
               unchecked: list[str] | None = None) -> HTTPRules | None:
    """`HTTPRules` from the ``[http]`` table, or None after reporting its problems to `b`.

    `import_hooks` False: the hooks named are not imported (no code of the file's runs);
    each is an `UnimportedHook`, and its reference is appended to `unchecked`."""
    return _HTTPBuilder(b, import_hooks, unchecked).build(raw, domains, domain_names)


class UnimportedHook:
    """A hook a file names, not imported (the file was checked, not loaded): calling it
    raises, so policies checked this way cannot decide requests by mistake."""

    __slots__ = ("ref",)

    def __init__(self, ref: str) -> None:
        self.ref = ref

    def __repr__(self) -> str:
        return f"UnimportedHook({self.ref!r})"

    def __call__(self, request: RequestInfo) -> object:
        raise RuntimeError(f"hook {self.ref!r} was not imported: these policies were checked "
                           "with import_hooks=False; load them with load_policies to decide")


class _HTTPBuilder:
    def __init__(self, b: Issues, import_hooks: bool = True,
                 unchecked: list[str] | None = None) -> None:
        self.b = b
        self.import_hooks = import_hooks
        self.unchecked = [] if unchecked is None else unchecked
        self.ok = True
        #: Attributes whose own errors were reported: entries naming them say nothing more.
        self.broken_attributes: set[str] = set()
        self.broken: set[str] = set()

    def err(self, loc: str, msg: str) -> None:
        self.ok = False
        self.b.err(loc, msg)

    # -- helpers ---------------------------------------------------------------------

    def _strings(self, loc: str, v: object, what: str) -> list[str] | None:
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            self.err(loc, f"must be {what} or an array of them, got {v!r:.60}")
            return None
        return cast(list[str], v)

    def _paths(self, loc: str, v: object) -> tuple[str, ...] | None:
        got = self._strings(loc, v, "a path pattern such as \"/api/**\"")
        if got is None:
            return None
        if not got:
            self.err(loc, "is empty: give at least one path pattern")
            return None
        for i, p in enumerate(got):
            try:
                compile_path(p)
            except ValueError as e:
                self.err(f"{loc}[{i}]" if isinstance(v, list) else loc, str(e))
                return None
        return tuple(got)

    def _methods(self, loc: str, v: object) -> frozenset[str] | None:
        got = self._strings(loc, v, "an HTTP method such as \"POST\"")
        if got is None:
            return None
        if not got:
            self.err(loc, "is empty, so no request could match: list methods or leave it out")
            return None
        out = set()
        for m in got:
            if m.upper() not in METHODS:
                hint = _closest(m.upper(), list(METHODS))
                self.err(loc, f"unknown method {m!r}" + (f" (did you mean {hint!r}?)"
                                                         if hint else "")
                         + f"; known: {', '.join(METHODS)}")
                return None
            out.add(m.upper())
        return frozenset(out)

    def _hosts(self, loc: str, v: object) -> tuple[str, ...] | None:
        got = self._strings(loc, v, "a host pattern such as \"*.example.com\"")
        if got is None:
            return None
        for h in got:
            try:
                compile_host(h)
            except ValueError as e:
                self.err(loc, str(e))
                return None
        return tuple(got)

    def _max_delay(self, loc: str, v: object) -> float | None:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v < math.inf):
            self.err(loc, f"must be a number of seconds, 0 or more, got {v!r}")
            return None
        return float(v)

    def _cost(self, loc: str, v: object) -> tuple[float | None, dict[str, float]]:
        """A cost: a number, or a table of numbers by method (and ``default``)."""
        if isinstance(v, dict):
            per: dict[str, float] = {}
            default = None
            for k, c in v.items():
                got = self.b._positive(f"{loc}.{k}", c, "a cost")
                if got is None:
                    continue
                if k == "default":
                    default = got
                elif k.upper() in METHODS:
                    per[k.upper()] = got
                else:
                    hint = _closest(k.upper(), [*METHODS, "DEFAULT"])
                    self.err(f"{loc}.{k}", f"a cost table's keys are methods or 'default', "
                                           f"got {k!r}"
                             + (f" (did you mean {hint.lower() if hint == 'DEFAULT' else hint!r}?)"
                                if hint else ""))
            return default, per
        return self.b._positive(loc, v, "a cost"), {}

    # -- the table -------------------------------------------------------------------

    def build(self, raw: object, domains: Mapping[str, Domain],
              domain_names: Collection[str]) -> HTTPRules | None:
        b = self.b
        tbl = b._table("http", raw)
        if tbl is None:
            return None
        b._unknown("http", tbl, HTTP_KEYS)
        domain = b._str("http", tbl, "domain", required=True)
        if domain is not None and domain not in domain_names:
            hint = _closest(domain, list(domain_names))
            self.err("http.domain", f"no domain {domain!r} in [domains]"
                     + (f" (did you mean {hint!r}?)" if hint else "")
                     + f"; defined: {', '.join(domain_names) or 'none'}")
            domain = None
        attributes = self._attributes(tbl.get("attributes", {}))
        names = {*BUILTIN_ATTRIBUTES, *attributes}
        self.broken = self.broken_attributes
        client_ip = self._client_ip(tbl.get("client_ip", {}))
        paths = self._paths("http.paths", tbl["paths"]) if "paths" in tbl else ()
        methods = self._methods("http.methods", tbl["methods"]) if "methods" in tbl else None
        hosts = self._hosts("http.hosts", tbl["hosts"]) if "hosts" in tbl else None
        exempt_paths, exempt_nets, exempt_keys = self._exempt(tbl.get("exempt", {}), names)
        for attr_name, keys in list(exempt_keys.items()):
            a = attributes.get(attr_name)
            if a is not None and a.hash:  # compared as the attribute sends them: digested
                exempt_keys[attr_name] = frozenset(a.digest(k) for k in keys)
        defaults = self._descriptor_list("http.descriptors", tbl.get("descriptors", []), names)
        cost = 1.0
        if "cost" in tbl:
            cost = b._positive("http.cost", tbl["cost"], "a cost") or 1.0
        max_delay = self._max_delay("http.max_delay", tbl["max_delay"]) \
            if "max_delay" in tbl else None
        status = tbl.get("status", 429)
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            self.err("http.status", f"must be a 4xx or 5xx status code, got {status!r}")
            status = 429
        degraded = tbl.get("degraded_header", "X-RateLimit-Degraded")
        if not isinstance(degraded, str):
            self.err("http.degraded_header", "must be a header name, or \"\" for none")
            degraded = ""
        routes = self._routes(tbl.get("routes", []), names, paths, methods)
        limits_for = self._limits_for(tbl["limits_for"], names) if "limits_for" in tbl else None
        if not tbl.get("descriptors") and not tbl.get("routes") and "limits_for" not in tbl \
                and domain is not None:
            self.err("http", "gives no descriptors: add `descriptors = [[\"client_ip\"]]` "
                             "(every request) or [[http.routes]] with descriptors")
        if not self.ok or domain is None or paths is None:
            return None
        rules = HTTPRules(
            domain=domain, descriptors=defaults, routes=routes,
            attributes=attributes, client_ip=client_ip, paths=paths, methods=methods,
            hosts=hosts, exempt_paths=exempt_paths, exempt_networks=exempt_nets,
            exempt_keys=exempt_keys, cost=cost,
            dry_run=b._bool("http", tbl, "dry_run"), max_delay=max_delay, status=status,
            legacy_headers=b._bool("http", tbl, "legacy_headers"),
            degraded_header=degraded or None,
            problem_type=b._str("http", tbl, "problem_type", default="about:blank")
            or "about:blank",
            websockets=b._bool("http", tbl, "websockets"),
            limits_for=limits_for,
        )
        dom = domains.get(domain)
        if dom is not None:
            self._check_tiers(rules, dom)
        return rules if self.ok else None

    def _limits_for(self, raw: object, names: set[str]) -> LimitsHook | None:
        loc = "http.limits_for"
        tbl = self.b._table(loc, raw)
        if tbl is None:
            return None
        self.b._unknown(loc, tbl, _LIMITS_FOR_KEYS)
        if "hook" not in tbl:
            self.err(loc, "missing 'hook': \"package.module:function\", called with the "
                          "request, returning its own Limit objects (or None)")
            return None
        hook = self._import_hook(f"{loc}.hook", tbl["hook"])
        key = tbl.get("key", "client_ip")
        if key not in names:
            hint = _closest(str(key), sorted(names))
            self.err(f"{loc}.key", f"no attribute {key!r}" + (f" (did you mean {hint!r}?)"
                                                              if hint else ""))
            return None
        if hook is None:
            return None
        kwargs = {k: tbl[k] for k in ("cache_seconds", "cache_size", "max_limits") if k in tbl}
        try:
            return LimitsHook(hook, key, **kwargs)
        except (ValueError, TypeError) as e:
            self.err(loc, str(e).removeprefix("limits_for: "))
            return None

    def _client_ip(self, raw: object) -> ClientIP:
        tbl = self.b._table("http.client_ip", raw)
        if tbl is None:
            return ClientIP()
        self.b._unknown("http.client_ip", tbl, _CLIENT_IP_KEYS)
        kwargs: dict[str, Any] = {k: tbl[k] for k in _CLIENT_IP_KEYS[1:] if k in tbl}
        try:
            return ClientIP(tbl.get("trusted_proxies", ()), **kwargs)
        except (ValueError, TypeError) as e:
            self.err("http.client_ip", str(e))
            return ClientIP()

    def _attributes(self, raw: object) -> dict[str, Attribute]:
        tbl = self.b._table("http.attributes", raw)
        out: dict[str, Attribute] = {}
        if tbl is None:
            return out
        for name, araw in tbl.items():
            loc = f"http.attributes.{name}"
            self.broken_attributes.add(name)  # until it is built
            a = self.b._table(loc, araw)
            if a is None:
                continue
            self.b._unknown(loc, a, _ATTRIBUTE_KEYS)
            kwargs: dict[str, Any] = {k: a[k] for k in _ATTRIBUTE_KEYS if k in a}
            if "hook" in kwargs:
                hook = self._import_hook(f"{loc}.hook", kwargs["hook"])
                if hook is None:
                    continue
                kwargs["hook"] = hook
            known = [*BUILTIN_ATTRIBUTES, *tbl]
            if "cache_by" in kwargs and kwargs["cache_by"] not in known:
                hint = _closest(str(kwargs["cache_by"]), known)
                self.err(f"{loc}.cache_by", f"no attribute {kwargs['cache_by']!r}"
                         + (f" (did you mean {hint!r}?)" if hint else ""))
                continue
            if "values" in kwargs and "default" not in kwargs:
                self.err(f"{loc}.default",
                         "missing: an attribute with `values` (tiers) needs a `default` for "
                         "any other value, or a client could leave its tier's limits behind "
                         "by sending a value not listed")
                continue
            try:
                out[name] = Attribute(name, **kwargs)
            except (ValueError, TypeError) as e:
                msg = str(e)
                for prefix in (f"attribute {name!r}: ", f"attribute {name!r} "):
                    msg = msg.removeprefix(prefix)
                self.err(loc, msg)
                continue
            self.broken_attributes.discard(name)
        return out

    def _import_hook(self, loc: str, ref: object) -> Callable[[RequestInfo], object] | None:
        if not isinstance(ref, str) or ":" not in ref:
            self.err(loc, f"must be \"package.module:function\", got {ref!r}")
            return None
        module, _, attr = ref.partition(":")
        if not self.import_hooks:  # checked as written, never imported: no code runs
            if not (_DOTTED.fullmatch(module) and _DOTTED.fullmatch(attr)):
                self.err(loc, f"must be \"package.module:function\" (dotted Python names), "
                              f"got {ref!r}")
                return None
            self.unchecked.append(ref)
            return UnimportedHook(ref)
        try:
            obj: Any = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except Exception as e:  # any import-time failure is the file's problem to report
            self.err(loc, f"cannot import {ref!r}: {type(e).__name__}: {e}")
            return None
        if not callable(obj):
            self.err(loc, f"{ref!r} is not callable")
            return None
        return cast(Callable[[RequestInfo], object], obj)

    def _exempt(self, raw: object, names: set[str]
                ) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, frozenset[str]]]:
        tbl = self.b._table("http.exempt", raw)
        if tbl is None:
            return (), (), {}
        self.b._unknown("http.exempt", tbl, _EXEMPT_KEYS)
        paths = self._paths("http.exempt.paths", tbl["paths"]) if "paths" in tbl else ()
        nets: list[str] = []
        for i, n in enumerate(self._strings("http.exempt.networks", tbl.get("networks", []),
                                            "a CIDR such as \"10.0.0.0/8\"") or ()):
            try:
                ipaddress.ip_network(n, strict=False)
            except ValueError:
                self.err(f"http.exempt.networks[{i}]", f"{n!r} is not an IP address or CIDR")
                continue
            nets.append(n)
        keys: dict[str, frozenset[str]] = {}
        ktbl = self.b._table("http.exempt.keys", tbl.get("keys", {}))
        for attr, values in (ktbl or {}).items():
            loc = f"http.exempt.keys.{attr}"
            if attr not in names:
                hint = _closest(attr, sorted(names))
                self.err(loc, f"no attribute {attr!r}" + (f" (did you mean {hint!r}?)"
                                                          if hint else ""))
                continue
            got = self._strings(loc, values, "a value")
            if got is not None:
                keys[attr] = frozenset(got)
        return paths or (), tuple(nets), keys

    def _descriptor_list(self, loc: str, raw: object, names: set[str]
                         ) -> tuple[tuple[Entry, ...], ...]:
        if not isinstance(raw, list):
            self.err(loc, 'must be an array of descriptors, each an array of entries, e.g. '
                          '[["client_ip"], ["plan", "user"]]')
            return ()
        out = []
        for i, d in enumerate(raw):
            dloc = f"{loc}[{i}]"
            if not isinstance(d, list) or not d:
                self.err(dloc, 'a descriptor is a non-empty array of entries: attribute '
                               'names ("user") or tables ({ key = "op", value = "export" })')
                continue
            entries = [self._entry(f"{dloc}[{j}]", e, names) for j, e in enumerate(d)]
            if all(e is not None for e in entries):
                keys = [e.key for e in entries if e is not None]
                if len(set(keys)) != len(keys):
                    self.err(dloc, f"repeats a key: {keys}")
                    continue
                out.append(tuple(e for e in entries if e is not None))
        return tuple(out)

    def _entry(self, loc: str, raw: object, names: set[str]) -> Entry | None:
        if isinstance(raw, str):
            raw = {"key": raw, "attribute": raw}
        if not isinstance(raw, dict):
            self.err(loc, f"an entry is an attribute name or a table, got {raw!r:.60}")
            return None
        self.b._unknown(loc, raw, _ENTRY_KEYS)
        key = self.b._str(loc, raw, "key", required=True)
        attr = self.b._str(loc, raw, "attribute")
        value = self.b._str(loc, raw, "value")
        if (attr is None) == (value is None):
            self.err(loc, "give either attribute = \"...\" (a request's value) or "
                          "value = \"...\" (a literal)")
            return None
        if attr is not None and attr in self.broken:
            self.ok = False  # its definition's error is reported; nothing more to say here
            return None
        if attr is not None and attr not in names:
            hint = _closest(attr, sorted(names))
            self.err(loc, f"no attribute {attr!r}" + (f" (did you mean {hint!r}?)" if hint
                                                      else "")
                     + f"; define it in [http.attributes.{attr}] or use a built-in: "
                     + ", ".join(BUILTIN_ATTRIBUTES))
            return None
        if key is None or not key or (value is not None and not value):
            if key is not None:
                self.err(loc, "key and value must not be empty")
            return None
        return Entry(key, attr, value)

    def _routes(self, raw: object, names: set[str], cover: tuple[str, ...] | None,
                cover_methods: frozenset[str] | None) -> tuple[HTTPRoute, ...]:
        if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
            self.err("http.routes", "must be an array of tables: [[http.routes]]")
            return ()
        out: list[HTTPRoute] = []
        seen: dict[str, str] = {}
        for i, r in enumerate(raw):
            loc = f"http.routes[{i}]"
            self.b._unknown(loc, r, _ROUTE_KEYS)
            if "path" not in r:
                self.err(loc, "missing 'path': the path pattern(s) of the route, e.g. "
                              "path = \"/login\" or [\"/api/**\"]")
                continue
            paths = self._paths(f"{loc}.path", r["path"])
            methods = self._methods(f"{loc}.methods", r["methods"]) if "methods" in r else None
            hosts = self._hosts(f"{loc}.hosts", r["hosts"]) if "hosts" in r else None
            descriptors = self._descriptor_list(f"{loc}.descriptors", r.get("descriptors", []),
                                                names)
            mode = r.get("mode", "add")
            if mode not in ("add", "replace"):
                self.err(f"{loc}.mode", f"must be 'add' (the route's descriptors add to the "
                                        f"defaults) or 'replace' (instead of them), got {mode!r}")
            exempt = self.b._bool(loc, r, "exempt")
            if exempt and descriptors:
                self.err(loc, "an exempt route is not limited: remove `descriptors` or "
                              "`exempt`")
            if not exempt and not descriptors and mode == "replace":
                self.err(loc, "replaces the default descriptors with none: write "
                              "`exempt = true` if these requests are not to be limited")
            cost: float | None = None
            per_method: dict[str, float] = {}
            if "cost" in r:
                cost, per_method = self._cost(f"{loc}.cost", r["cost"])
            name = self.b._str(loc, r, "name")
            if paths is None or not isinstance(mode, str):
                continue
            name = name or paths[0]
            if name in seen:
                self.err(f"{loc}.name", f"route name {name!r} is already used by {seen[name]}; "
                                        "give one a distinct `name`")
                continue
            seen[name] = loc
            route = HTTPRoute(
                name, paths, descriptors, methods, hosts, cast(RouteMode, mode), cost,
                per_method, exempt, self.b._bool(loc, r, "dry_run") if "dry_run" in r else None,
                self._max_delay(f"{loc}.max_delay", r["max_delay"]) if "max_delay" in r
                else None)
            self._reachable(loc, route, out, cover, cover_methods)
            out.append(route)
        return tuple(out)

    def _reachable(self, loc: str, route: HTTPRoute, earlier: Sequence[HTTPRoute],
                   cover: tuple[str, ...] | None, cover_methods: frozenset[str] | None) -> None:
        """A route no request can reach is an error: each of its literal paths (no
        wildcard) is outside ``[http] paths``/``methods``, or taken by an earlier route
        that matches at least its methods and hosts."""
        literal = [p for p in route.paths
                   if isinstance(p, str) and "*" not in p and "{" not in p]
        if len(literal) != len(route.paths):
            return  # a pattern: whether another one covers it is not decided here
        methods = route.methods or frozenset(METHODS)
        if cover_methods is not None and not methods & cover_methods:
            self.err(f"{loc}.methods", f"no method of {sorted(methods)} is in [http] methods "
                                       f"{sorted(cover_methods)}: the route can never match")
            return
        if cover:
            rxs = [compile_path(c) for c in cover]
            outside = [p for p in literal if not any(rx.fullmatch(p) for rx in rxs)]
            if len(outside) == len(literal):
                self.err(f"{loc}.path", f"{literal} is outside [http] paths {list(cover)}: "
                                        "the route can never match")
                return
        for other in earlier:
            if other.hosts is not None and other.hosts != route.hosts:
                continue
            if other.methods is not None and not methods <= other.methods:
                continue
            if all(any(rx.fullmatch(p) for rx in other._paths) for p in literal):
                self.err(f"{loc}.path", f"routes are tried in order and {other.name!r} "
                                        "(earlier) takes every request this route matches; "
                                        "move this route before it")
                return

    def _check_tiers(self, rules: HTTPRules, dom: Domain) -> None:
        """A descriptor that can never meet a rule is a mistake, and is an error: every
        value a tier attribute (one with `values`) may take must reach a rule, and so must
        a descriptor made only of literals, route names and tiers (a typo in a literal, or
        a route whose `name` the rules do not use). Descriptors with other request values
        are not judged: which values have rules is the domain's business."""
        groups = [("http.descriptors", rules.descriptors, None)] + [
            (f"http.routes[{i}].descriptors", r.descriptors, r) for i, r in
            enumerate(rules.routes)]
        for loc, descriptors, route in groups:
            for i, d in enumerate(descriptors):
                choices: list[list[str]] = []
                judged = True
                for e in d:
                    attr = rules.attributes.get(e.attribute or "")
                    if e.attribute is None:
                        choices.append([e.value or ""])
                    elif e.attribute == "route":
                        choices.append([route.name] if route is not None else [])
                    elif attr is not None and attr.values is not None:
                        choices.append(sorted(attr.values))
                    else:
                        choices.append(["\x00any"])
                        judged = False
                if any(not c for c in choices):
                    continue  # a default descriptor naming the route: sent on routes only
                for j, e in enumerate(d):
                    attr = rules.attributes.get(e.attribute or "")
                    if attr is None or attr.values is None:
                        continue
                    for tier in choices[j]:
                        entries = [(x.key, tier if k == j else choices[k][0])
                                   for k, x in enumerate(d)]
                        if dom.match(entries) is None:
                            self.err(f"{loc}[{i}][{j}]",
                                     f"{e.attribute} = {tier!r} (one of its values) matches no "
                                     f"rule of domain {dom.name!r} for descriptor "
                                     f"{[x.key for x in d]}: add a rule for it (limits or "
                                     "`unlimited = true`) or remove the value")
                if judged and not any(rules.attributes.get(e.attribute or "") is not None
                                      for e in d):
                    entries = [(x.key, choices[k][0]) for k, x in enumerate(d)]
                    if dom.match(entries) is None:
                        shown = ", ".join(f"{k}={v}" for k, v in entries)
                        self.err(f"{loc}[{i}]",
                                 f"descriptor [{shown}] matches no rule of domain {dom.name!r}, "
                                 "so it limits nothing: fix the key or value (or the route's "
                                 "`name`), or add a rule for it")
