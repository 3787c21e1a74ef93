"""What the framework decorators share (FastAPI's and Flask's ``@limiter.limit``, Django's
``@ratelimit``): turning their arguments into one `RouteLimit` per endpoint. No framework
and no I/O here.

An endpoint's decorators are collected into one `RouteLimit` (stacked decorators, or a list
in one, are several limits of that endpoint), which the adapter hands with the request to
``engine.handle``: the policy's limits and the endpoint's are then one decision,
all-or-nothing (``mode="add"``), or the endpoint's alone (``"replace"``), or none (exempt).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .._types import Limit
from ..policy._http import BUILTIN_ATTRIBUTES
from ..policy._request import KeyFunc, RequestInfo
from ._policy import Cost, RouteLimit, _Engine, _PoliciesEngine

Mode = Literal["add", "replace"]
#: What a decorator takes as its limits: a rate string (``"5/minute"``; several are
#: separated by ``;``, ``,`` or ``|`` as flask-limiter and slowapi write them:
#: ``"100 per hour;10/minute"``), a `Limit`, or a list of either.
LimitSpec = str | Limit | Sequence[str | Limit]
#: A decorator's key: an attribute name, ``"header:<name>"`` or a function of the request.
KeySpec = str | KeyFunc


def header_key(name: str) -> KeyFunc:
    """A key function: the value of request header `name` (None, the client IP, if absent)."""
    field = name.strip().lower()
    if not field:
        raise ValueError("header: key needs a header name, e.g. 'header:x-api-key'")

    def key(req: RequestInfo) -> str | None:
        v = req.headers.get(field)
        return f"{field}:{v}" if v else None

    key.__qualname__ = f"header_key({field!r})"
    return key


def endpoint_name(func: Callable[..., Any]) -> str:
    """The name an endpoint's state and counters go by: its function's name (two endpoints
    of one name are refused by `Registry.put` rather than sharing state unawares)."""
    return str(getattr(func, "__name__", None) or repr(func))


_RATE_SEPARATORS = re.compile(r"[;,|]")


def _rate_strings(items: Sequence[str | Limit]) -> list[str | Limit]:
    """`items` with each string of several rates (``"100 per hour;10/minute"``) split."""
    out: list[str | Limit] = []
    for item in items:
        if isinstance(item, str):
            out.extend(p.strip() for p in _RATE_SEPARATORS.split(item) if p.strip())
        else:
            out.append(item)
    return out


def make_limits(limits: LimitSpec, *, endpoint: str, algorithm: str, burst: float | None,
                name: str | None) -> list[Limit]:
    """`limits` as `Limit` objects: a rate string becomes ``Limit(algorithm, rate, burst,
    name=...)``, named `name` or ``"<endpoint>:<rate>"`` (limits of one name share state;
    the rate as written, its spaces made ``_``: ``"search:10_per_minute"``)."""
    items = _rate_strings([limits] if isinstance(limits, (str, Limit)) else limits)
    if not items:
        raise ValueError(f"limits of {endpoint!r}: give a rate such as '5/minute' or Limit "
                         "objects, or use exempt")
    out: list[Limit] = []
    strings = sum(isinstance(i, str) for i in items)
    for item in items:
        if isinstance(item, Limit):
            out.append(item)
        elif isinstance(item, str):
            lname = name if name is not None and strings == 1 else (
                f"{name or endpoint}:{'_'.join(item.split())}")
            out.append(Limit(algorithm, item, burst=burst, name=lname))
        else:
            raise TypeError(f"limits of {endpoint!r}: expected a rate string such as "
                            f"'5/minute' or a Limit, got {item!r}")
    return out


@dataclass
class Spec:
    """One endpoint's decorators so far. Stacked decorators with one key (and cost) are
    several limits of one `RouteLimit`; with another key they are another `RouteLimit` of
    the same endpoint (a login counted per username *and* per address), all decided
    together, all-or-nothing, in one mode."""

    endpoint: str
    limits: list[Limit]
    key: KeySpec
    mode: Mode
    cost: Cost | None
    exempt: bool = False
    others: list[Spec] | None = None  # stacked decorators with another key or cost
    route: tuple[RouteLimit, ...] | None = None
    own: tuple[RouteLimit, ...] | None = None  # route in mode "replace" (a helper's)

    def add(self, other: Spec) -> None:
        self.route = self.own = None
        if self.exempt or other.exempt:  # exempt wins, in either order (as flask-limiter's)
            self.exempt = True
            return
        if self.mode != other.mode:
            raise ValueError(
                f"the limits stacked on {self.endpoint!r} differ in mode ({self.mode!r} and "
                f"{other.mode!r}); an endpoint's limits add to the policy's or replace them: "
                "give them the same mode")
        for spec in (self, *(self.others or ())):
            if (spec.key, spec.cost) == (other.key, other.cost):
                spec.limits = [*other.limits, *spec.limits]
                return
        self.others = [*(self.others or ()), other]

    def route_limit(self) -> tuple[RouteLimit, ...]:
        """The endpoint's `RouteLimit`s: one per distinct key (and cost)."""
        if self.route is None:
            out = []
            for spec in (self, *(self.others or ())):
                key = spec.key
                if isinstance(key, str) and key.lower().startswith("header:"):
                    key = header_key(key[len("header:"):])
                out.append(RouteLimit(tuple(spec.limits), self.endpoint, key=key,
                                      mode=self.mode, cost=spec.cost, exempt=self.exempt))
            self.route = tuple(out)
        return self.route

    def own_limit(self) -> tuple[RouteLimit, ...]:
        """The endpoint's `RouteLimit`s without the policy's limits (mode ``"replace"``):
        what a decorated helper decides when a view calls it (its view decided those)."""
        if self.own is None:
            self.own = tuple(r if r.mode == "replace" or r.exempt else
                             RouteLimit(r.limits, r.endpoint, key=r.key, mode="replace",
                                        cost=r.cost)
                             for r in self.route_limit())
        return self.own


def check_key(key: KeySpec, engine: _Engine | _PoliciesEngine, endpoint: str) -> None:
    """Refuse, when the decorator is applied, a key the engine could not count by."""
    if callable(key) or key.lower().startswith("header:"):
        return
    if isinstance(engine, _Engine):
        if key not in ("client_ip", "key"):
            raise ValueError(
                f"key={key!r} on {endpoint!r}: with a Python HTTPPolicy a decorator counts by "
                "'client_ip', 'key' (the policy's key function), 'header:<name>' or a "
                "function of the RequestInfo")
        return
    names = {*BUILTIN_ATTRIBUTES, *engine.rules.attributes}
    if key not in names:
        raise ValueError(f"key={key!r} on {endpoint!r} is not an attribute of the policies' "
                         f"[http] part; known: {sorted(names)} (or 'header:<name>', or a "
                         "function of the RequestInfo)")


def _definition(func: object) -> object:
    """The code object of the ``def`` `func` (behind its wrappers) comes from, or `func`
    itself when it has none."""
    for _ in range(16):
        wrapped = getattr(func, "__wrapped__", None)
        if wrapped is None:
            break
        func = wrapped
    return getattr(func, "__code__", func)


class Registry:
    """The endpoints one limiter decorated: function -> `Spec`."""

    def __init__(self) -> None:
        self.specs: dict[object, Spec] = {}
        self.names: dict[str, object] = {}

    def put(self, func: object, spec: Spec, *, named: bool) -> None:
        """Record `spec` for `func` (adding to its earlier decorators). Two functions of
        one default name would share state without knowing it: refused unless `named`."""
        owner = self.names.setdefault(spec.endpoint, func)
        if owner is not func and _definition(owner) is _definition(func):
            # the same ``def`` run again (a helper defined inside a view, decorated at each
            # request): the new function replaces the old, whose limits it has anew
            self.specs.pop(owner, None)
            self.names[spec.endpoint] = owner = func
        if owner is not func and not named:
            raise ValueError(
                f"two endpoints are named {spec.endpoint!r} ({owner!r} and {func!r}); their "
                "limits would share state: give each its own name=... (or the same name on "
                "purpose)")
        old = self.specs.get(func)
        if old is not None:
            old.add(spec)
        else:
            self.specs[func] = spec

    def move(self, func: object, target: object) -> None:
        """Let `target` (the guard wrapping `func`) take over what `func` was given (a view
        exempted before it is limited)."""
        if func is not target and func in self.specs:
            self.specs[target] = self.specs.pop(func)
            for name, owner in self.names.items():
                if owner is func:
                    self.names[name] = target

    def find_own(self, func: object) -> tuple[RouteLimit, ...] | None:
        """The `RouteLimit`s of `func` without the policy's limits (a decorated helper)."""
        spec = self.specs.get(func)
        return None if spec is None else spec.own_limit()

    def find(self, func: object) -> tuple[RouteLimit, ...] | None:
        """The `RouteLimit`s of endpoint `func` (looked for through ``__wrapped__`` too)."""
        for _ in range(16):
            if func is None:
                break
            spec = self.specs.get(func)
            if spec is not None:
                return spec.route_limit()
            func = getattr(func, "__wrapped__", None)
        return None


F = TypeVar("F", bound=Callable[..., Any])


class Decorates:
    """``@limiter.limit`` and ``@limiter.exempt`` of a framework's limiter (FastAPI's,
    Flask's): the key check, the registry and stacking; the framework's own `_guard(func)`
    wraps a decorated endpoint so that it is limited even where the limiter is not wired
    in."""

    engine: _Engine | _PoliciesEngine
    _registry: Registry

    def _guard(self, func: F) -> F:
        raise NotImplementedError

    def _endpoint_of(self, func: Callable[..., Any]) -> str:
        """The name of a decorated function's endpoint when `limit` is given none."""
        return endpoint_name(func)

    def limit(self, limits: LimitSpec, *, key: KeySpec = "client_ip",
              algorithm: str = "fixed-window", burst: float | None = None,
              mode: Mode = "add", cost: Cost | None = None,
              name: str | None = None) -> Callable[[F], F]:
        """Decorate an endpoint with `limits` (a rate string, a `Limit`, or a list);
        ``mode="add"``: with the policy's limits, ``"replace"``: instead of them. Stacked
        decorators add limits to the endpoint (each key counted on its own)."""
        check_key(key, self.engine, name or "@limiter.limit")

        def decorate(func: F) -> F:
            endpoint = name or self._endpoint_of(func)
            spec = Spec(endpoint, make_limits(limits, endpoint=endpoint, algorithm=algorithm,
                                              burst=burst, name=name),
                        key, mode, cost)
            spec.route_limit()  # its errors now, not at the first request
            target = func if getattr(func, "_ratekeeper_limiter", None) is self \
                else self._guard(func)  # stacked: the same wrapper
            self._registry.move(func, target)
            self._registry.put(target, spec, named=name is not None)
            self._registry.specs[target].route_limit()
            return target

        return decorate

    def exempt(self, func: F) -> F:
        """Decorate an endpoint that is never limited (the policy's limits do not apply)."""
        self._registry.put(func, Spec(endpoint_name(func), [], "client_ip", "add", None,
                                      exempt=True), named=False)
        return func
