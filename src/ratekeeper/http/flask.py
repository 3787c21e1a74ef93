"""Per-view limits for Flask: flask-limiter's ``@limiter.limit`` and ``@limiter.exempt``
habit, decided together with the policy's defaults (one decision per request).

    from flask import Flask
    from ratekeeper import Limit
    from ratekeeper.http.flask import Limiter

    app = Flask(__name__)
    limiter = Limiter(app, policy=[Limit("gcra", "10/s", burst=20, name="per-client")])

    @app.get("/search")
    @limiter.limit("5/minute")                  # mode="add" (default): 10/s AND 5/minute
    def search() -> str: ...

    @app.post("/upload")
    @limiter.limit("2/minute", mode="replace")  # only 2/minute, the defaults do not apply
    def upload() -> str: ...

    @app.get("/health")
    @limiter.exempt                             # not limited at all
    def health() -> str: ...

``Limiter(app=None, policy=..., store=..., clock=..., ...)`` (or flask-limiter's
``Limiter(key_func, app=app, default_limits=[...], application_limits=[...],
storage_uri=..., strategy=...)``, translated onto the same policy) takes what the WSGI middleware
takes: an `HTTPPolicy`, its default limits, or a policies file (``[http]`` part), and a
synchronous `Store` (`MemoryStore`, `RedisStore`); ``init_app(app)`` for the app-factory
pattern. Its ``before_request`` hook finds the view of ``request.endpoint``, and decides the
policy's limits and the view's decorator limits as one, all-or-nothing: a rejection is
`RateLimitExceeded` raised (a ``werkzeug.exceptions.TooManyRequests``, as flask-limiter's,
so ``@app.errorhandler(429)`` runs; with none it is rendered as the WSGI middleware answers:
the status, Retry-After, the RateLimit fields, an ``application/problem+json`` body); a
response gets the RateLimit fields in ``after_request``, and the decision is in
``request.environ["ratekeeper.decision"]``. Requests for no view (404s) are decided with
the defaults, as by the middleware; static files (endpoint ``static``, ``<bp>.static``)
are not limited. A decorated view of an app the limiter was never attached to still
decides its own limits (with the defaults) when it is called; a decorated helper a view
calls decides its own limits alone at each call (flask-limiter's behaviour); an ``async
def`` view runs through ``app.ensure_sync``. Several limiters on one app each decide.

``@limiter.limit(limits, key="client_ip", algorithm="fixed-window", burst=None,
mode="add", cost=None, name=None)``: `limits` is a rate string (``"5/minute"``), a `Limit`,
or a list of them; stacked decorators add limits to the same view (with one key, mode and
cost). `key` is ``"client_ip"``, ``"header:<name>"``, a function of the `RequestInfo`,
``"key"`` (a Python policy's key function) or, with a policies file, any attribute of its
``[http]`` part. `name` names the limit (its state and its RateLimit field); by default
``"<function>:<rate>"``.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, overload

try:
    import flask
    from flask import Flask, Response, g, request
    from werkzeug.exceptions import TooManyRequests
except ImportError as e:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        f"ratekeeper.http.flask needs Flask: pip install 'ratekeeper[flask]' ({e})"
    ) from e

from .._errors import StoreError
from .._types import Decision, Limit
from ..core import Ticket, refund, run
from ..policy._request import KeyFunc, RequestInfo
from ..stores import Store, open_store
from ..stores._base import Check
from ._decorators import (
    Decorates,
    KeySpec,
    LimitSpec,
    Mode,
    Registry,
    Spec,
    _definition,
    _rate_strings,
    check_key,
    endpoint_name,
    header_key,
    make_limits,
)
from ._policy import (
    Cost,
    HTTPPolicy,
    Outcome,
    PolicySpec,
    RouteLimit,
    RouteLimits,
    _Adapter,
    _Engine,
    _route_limits,
)
from .wsgi import ENVIRON_KEY, SYNC, Sleep

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._policy import AdapterOptions

__all__ = ["Limiter", "RateLimitExceeded", "get_remote_address"]

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("ratekeeper.http")

#: The limits a callable limit stands in for until a request asks it (never decided: each
#: request's rate replaces it), as roomy as a cost could need.
_PLACEHOLDER = "1000000000/second"

#: flask-limiter's ``strategy=`` names and ratekeeper's algorithm of the same meaning
#: (flask-limiter's moving window is a log of each request's time: sliding-window-log).
STRATEGIES = {"fixed-window": "fixed-window", "moving-window": "sliding-window-log",
              "sliding-window-counter": "sliding-window-counter"}


def get_remote_address() -> str:
    """flask-limiter's key function: the request's address (``request.remote_addr``, or
    ``"127.0.0.1"``). The `Limiter`'s default key is the client IP already, through its
    `ClientIP` (trusted proxies); passing this function keeps that default."""
    return request.remote_addr or "127.0.0.1"


def _flask_limiter_policy(key_func: Callable[[], str] | None, default_limits: Sequence[str],
                          application_limits: Sequence[str], strategy: str) -> HTTPPolicy:
    """flask-limiter's ``Limiter(key_func, default_limits=..., application_limits=...,
    strategy=...)`` as an `HTTPPolicy`: the defaults per key, the application limits one
    counter for all (``scope="global"``), decided together."""
    algorithm = STRATEGIES.get(strategy)
    if algorithm is None:
        raise ValueError(f"strategy={strategy!r} is not one of flask-limiter's "
                         f"{sorted(STRATEGIES)}; or give ratekeeper Limit objects in policy=")
    limits = [Limit(algorithm, rate, name=f"default:{'_'.join(rate.split())}")
              for rate in _rate_strings(list(default_limits)) if isinstance(rate, str)]
    limits += [Limit(algorithm, rate, name=f"application:{'_'.join(rate.split())}",
                     scope="global")
               for rate in _rate_strings(list(application_limits)) if isinstance(rate, str)]
    # the defaults counted per route, as flask-limiter counts them (the application limits
    # are scope="global": one counter whatever the key)
    return HTTPPolicy(limits=limits, key=_per_route(_flask_key(key_func)))


def _flask_key(key_func: Callable[[], str] | None) -> KeyFunc:
    """flask-limiter's key function (of nothing; it reads ``flask.request``) as a key
    function of the `RequestInfo`; None or `get_remote_address`: None, the policy's
    `ClientIP` (trusted proxies, IPv6 prefixes) counting the client's address. A key
    function answering None or "" counts the client's address too: flask-limiter skips the
    limit then, which leaves every request without a key unlimited."""
    if key_func is None or key_func is get_remote_address:
        return _client_ip
    func = key_func

    def key(_: RequestInfo) -> str | None:
        got = func()
        return None if got is None or got == "" else str(got)

    key.__qualname__ = f"flask_key({getattr(func, '__qualname__', 'key_func')})"
    return key


def _client_ip(_: RequestInfo) -> None:
    """No key of its own: the engine counts the client's address."""
    return None


def _per_route(key: KeyFunc) -> KeyFunc:
    """`key` counted apart on each endpoint (flask-limiter's ``default_limits``)."""
    def per_route(info: RequestInfo) -> str:
        got = key(info)
        return f"{request.endpoint}|{info.client_ip if got is None else got}"

    return per_route


class RateLimitExceeded(TooManyRequests):
    """A request over its limits (a 429), raised as flask-limiter raises its own so that
    the app's ``@app.errorhandler(429)`` runs; with none, Flask renders `response` (the
    WSGI middleware's answer: Retry-After, the RateLimit fields, a problem+json body).
    The RateLimit fields are added to a handler's own response too. `decision` is
    ratekeeper's `Decision`."""

    def __init__(self, response: Response, decision: Decision) -> None:
        super().__init__(response=response)
        self.decision = decision


#: flask-limiter's ``RATELIMIT_*`` config keys (its ``ConfigVars``) and the `Limiter`
#: argument each stands for (an argument given wins over the key).
CONFIG = {
    "RATELIMIT_ENABLED": "enabled", "RATELIMIT_KEY_FUNC": "key_func",
    "RATELIMIT_DEFAULT": "default_limits", "RATELIMIT_APPLICATION": "application_limits",
    "RATELIMIT_STRATEGY": "strategy", "RATELIMIT_STORAGE_URI": "storage_uri",
    "RATELIMIT_HEADERS_ENABLED": "headers_enabled", "RATELIMIT_KEY_PREFIX": "key_prefix",
    "RATELIMIT_DEFAULTS_PER_METHOD": "default_limits_per_method",
    "RATELIMIT_DEFAULTS_EXEMPT_WHEN": "default_limits_exempt_when",
    "RATELIMIT_ON_BREACH_CALLBACK": "on_breach", "RATELIMIT_META": "meta_limits",
}
#: The other keys of flask-limiter's ``ConfigVars``: refused, with what to do instead.
REFUSED_CONFIG = {
    "RATELIMIT_FAIL_ON_FIRST_BREACH": "all limits of a request are one decision",
    "RATELIMIT_SWALLOW_ERRORS": "failure='open' (the default) admits while the store is down",
    "RATELIMIT_IN_MEMORY_FALLBACK": "failure='local'",
    "RATELIMIT_IN_MEMORY_FALLBACK_ENABLED": "failure='local'",
    "RATELIMIT_STORAGE_OPTIONS": "store=RedisStore.from_url(url, ...)",
    "RATELIMIT_REQUEST_IDENTIFIER": "request.endpoint names the view's limits",
    "RATELIMIT_HEADER_LIMIT": "the IETF RateLimit fields, or legacy_headers=True",
    "RATELIMIT_HEADER_REMAINING": "the IETF RateLimit fields, or legacy_headers=True",
    "RATELIMIT_HEADER_RESET": "the IETF RateLimit fields, or legacy_headers=True",
    "RATELIMIT_HEADER_RETRY_AFTER": "Retry-After is always sent on a 429",
    "RATELIMIT_HEADER_RETRY_AFTER_VALUE": "Retry-After is seconds",
    "RATELIMIT_APPLICATION_PER_METHOD": "@limiter.limit(..., per_method=True) on the views",
    "RATELIMIT_APPLICATION_EXEMPT_WHEN": "HTTPPolicy(exempt_keys=..., exempt_networks=...)",
    "RATELIMIT_APPLICATION_DEDUCT_WHEN": "@limiter.limit(..., deduct_when=...) on the views",
    "RATELIMIT_APPLICATION_COST": "HTTPPolicy(cost=...)",
    "RATELIMIT_DEFAULTS_DEDUCT_WHEN": "@limiter.limit(..., deduct_when=...) on the views",
    "RATELIMIT_DEFAULTS_COST": "HTTPPolicy(cost=...)",
    "RATELIMIT_ON_META_BREACH_CALLBACK": "@app.errorhandler(429)",
}


def _config(app: Flask) -> dict[str, Any]:
    """The `Limiter` arguments `app`'s flask-limiter ``RATELIMIT_*`` config keys give
    (a string of rates is a list of one); a key ratekeeper cannot honour is refused."""
    for key, instead in REFUSED_CONFIG.items():
        if key in app.config:
            raise ValueError(f"app.config[{key!r}] = {app.config[key]!r} has no ratekeeper "
                             f"equivalent; instead: {instead} (docs/migration.md)")
    out = {CONFIG[k]: v for k, v in app.config.items() if k in CONFIG}
    for option in ("default_limits", "application_limits", "meta_limits"):
        if isinstance(out.get(option), str):
            out[option] = [out[option]]
    return out


def _is_static(endpoint: str) -> bool:
    """Whether `endpoint` serves the app's or a blueprint's static files (not limited, as
    by flask-limiter: an endpoint ``static`` or ``<blueprint>.static``)."""
    return endpoint.rpartition(".")[2] == "static"


def _views(view: object) -> Iterator[object]:
    """`view` and what it wraps (``__wrapped__``, at most 16 deep)."""
    for _ in range(16):
        if view is None:
            return
        yield view
        view = getattr(view, "__wrapped__", None)


def _route_cost(given: Cost | Callable[[], float] | None) -> Cost | None:
    """A decorator's cost; flask-limiter's cost function (of nothing: it reads
    ``flask.request``) as a cost function of the `RequestInfo`."""
    if not callable(given) or inspect.signature(given).parameters:
        return given  # type: ignore[return-value]
    fn: Callable[[], float] = given  # type: ignore[assignment]

    def cost(_: RequestInfo) -> float:
        return fn()

    return cost


@dataclass(frozen=True, slots=True)
class _When:
    """flask-limiter's per-request conditions of one decorator (found by its own key
    function): the `methods` it limits (None: all), `exempt_when()` leaving it out, a
    callable limit `rates()` read at each request (with what its `Limit`s are made of),
    and `deduct_when(response)`, false: its charge is given back."""

    methods: frozenset[str] | None
    exempt_when: Callable[[], bool] | None
    rates: Callable[[], str | None] | None
    algorithm: str
    burst: float | None
    name: str | None
    deduct_when: Callable[[Response], bool] | None

    def rated(self, route: RouteLimit) -> RouteLimit | None:
        """`route` with this request's limits: those `rates()` names (None when it names
        none, or names no rate: logged, and the defaults decide, as flask-limiter's), kept
        `refundable` for `deduct_when`."""
        if self.rates is None:
            return RouteLimit(route.limits, route.endpoint, key=route.key, mode=route.mode,
                              cost=route.cost, refundable=True)
        rates = self.rates()
        if not rates:
            return None
        try:
            limits = make_limits(rates, endpoint=route.endpoint, algorithm=self.algorithm,
                                 burst=self.burst, name=self.name)
            return RouteLimit(tuple(limits), route.endpoint, key=route.key, mode=route.mode,
                              cost=route.cost, refundable=self.deduct_when is not None)
        except (ValueError, TypeError) as e:
            log.error("failed to load ratelimit for %s: the callable limit gave %r, which is "
                      "not a rate such as '10/minute' (%s); it is skipped", route.endpoint,
                      rates, e)
            return None


class LimitDecorator:
    """What ``limiter.limit(...)`` returns: a decorator of a view (returned guarded) or,
    called on a ``flask.Blueprint``, the limits of its views (returns None, as
    flask-limiter's)."""

    def __init__(self, view: Callable[[Any], Any],
                 blueprint: Callable[[flask.Blueprint], None]) -> None:
        self._view = view
        self._blueprint = blueprint

    @overload
    def __call__(self, obj: F) -> F: ...
    @overload
    def __call__(self, obj: flask.Blueprint) -> None: ...

    def __call__(self, obj: Any) -> Any:
        if isinstance(obj, flask.Blueprint):
            return self._blueprint(obj)
        return self._view(obj)


class Limiter(Decorates, _Adapter[Store, Sleep]):
    """Flask per-view limits with the policy's defaults (see the module docstring)."""

    _kind = SYNC

    def __init__(self, app_or_key_func: Flask | Callable[[], str] | None = None,
                 policy: PolicySpec = (), *, app: Flask | None = None,
                 key_func: Callable[[], str] | None = None,
                 default_limits: Sequence[str] = (), application_limits: Sequence[str] = (),
                 storage_uri: str | None = None, strategy: str = "fixed-window",
                 headers_enabled: bool = True, enabled: bool = True, key_prefix: str = "",
                 default_limits_per_method: bool = False,
                 default_limits_exempt_when: Callable[[], bool] | None = None,
                 on_breach: Callable[..., Any] | None = None,
                 meta_limits: Sequence[str] | None = None,
                 **options: Unpack[AdapterOptions[Store, Sleep]]) -> None:
        # flask-limiter's signature: Limiter(key_func, app=app, default_limits=[...], ...)
        if isinstance(app_or_key_func, Flask):
            app = app_or_key_func
        elif app_or_key_func is not None:
            if not callable(app_or_key_func) or key_func is not None:
                raise TypeError("Limiter's first argument is a Flask app or flask-limiter's "
                                f"key function, got {app_or_key_func!r}")
            key_func = app_or_key_func
        # flask-limiter's RATELIMIT_* config keys of the app, under the arguments given
        config = _config(app) if app is not None else {}
        key_func = key_func or config.get("key_func")
        default_limits = default_limits or config.get("default_limits", ())
        application_limits = application_limits or config.get("application_limits", ())
        storage_uri = storage_uri or config.get("storage_uri")
        if strategy == "fixed-window":
            strategy = config.get("strategy", strategy)
        enabled = enabled and bool(config.get("enabled", True))
        headers_enabled = headers_enabled and bool(config.get("headers_enabled", True))
        key_prefix = key_prefix or config.get("key_prefix", "")
        default_limits_per_method = default_limits_per_method or \
            bool(config.get("default_limits_per_method"))
        default_limits_exempt_when = default_limits_exempt_when or \
            config.get("default_limits_exempt_when")
        on_breach = on_breach or config.get("on_breach")
        meta_limits = meta_limits or config.get("meta_limits")
        self._configured = app
        unsupported = {
            "key_prefix": (key_prefix, "give the store its prefix: storage_uri with "
                           "RedisStore.from_url(url, prefix=...) as store="),
            "default_limits_per_method": (default_limits_per_method,
                                          "give the views their own @limiter.limit"),
            "default_limits_exempt_when": (default_limits_exempt_when,
                                           "HTTPPolicy(exempt_keys=..., exempt_networks=...)"),
            "on_breach": (on_breach, "@app.errorhandler(429) (RateLimitExceeded has the "
                          "decision)"),
            "meta_limits": (meta_limits, "a longer limit beside the short one (both decided "
                            "as one)"),
        }
        for option, (value, instead) in unsupported.items():
            if value:
                raise ValueError(f"flask-limiter's {option}={value!r} has no ratekeeper "
                                 f"equivalent here; instead: {instead} (docs/migration.md)")
        self._enabled = enabled  # flask-limiter's enabled=False: nothing is limited
        if not headers_enabled:
            raise ValueError("headers_enabled=False: ratekeeper always sends the RateLimit "
                             "fields (they are how clients pace themselves); drop the option")
        # flask-limiter's meanings when it is made as flask-limiter's: a decorator's limits
        # replace the defaults (override_defaults=True) and count by key_func
        self._default_mode: Mode = "add"
        self._default_key: KeySpec = "client_ip"
        self._algorithm = "fixed-window"
        if key_func is not None or default_limits or application_limits \
                or strategy != "fixed-window":
            if policy:
                raise ValueError("give either policy=... or flask-limiter's key_func/"
                                 "default_limits/application_limits/strategy, not both")
            policy = _flask_limiter_policy(key_func, default_limits, application_limits,
                                           strategy)
            self._default_mode = "replace"
            own = _flask_key(key_func)
            self._default_key = "client_ip" if own is _client_ip else own
            self._algorithm = STRATEGIES[strategy]
        if storage_uri is not None:
            if options.get("store") is not None:
                raise ValueError("give either store=... or storage_uri=..., not both")
            options["store"] = open_store(storage_uri)
        super().__init__(policy, **options)
        self._registry = Registry()
        self._blueprints: dict[str, Spec] = {}  # blueprint name -> its limits or exemption
        # flask-limiter's per-request conditions, by the key function of their decorator
        self._when: dict[object, _When] = {}
        self._request_filters: list[Callable[[], bool]] = []
        # each limiter its own flags in flask.g: two limiters on one app both decide
        self._decided = f"_ratekeeper_decided_{id(self):x}"
        self._headers = f"_ratekeeper_headers_{id(self):x}"
        self._tickets = f"_ratekeeper_tickets_{id(self):x}"
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Decide every request of `app` (``before_request``) and add the RateLimit fields
        to its admitted responses (``after_request``). flask-limiter's ``RATELIMIT_*``
        config keys are read when the `Limiter` is made with the app (``app=app``)."""
        if app is not self._configured:
            given = sorted(k for k in app.config if k in CONFIG or k in REFUSED_CONFIG)
            if given:
                raise ValueError(
                    f"init_app: the app's config has flask-limiter's {', '.join(given)}, "
                    "which ratekeeper reads when the Limiter is made with the app: make it "
                    "Limiter(key_func, app=app), or give them as Limiter arguments")
        app.before_request(self._before)
        app.after_request(self._after)
        app.extensions["ratekeeper"] = self

    def _decide(self, route: RouteLimits) -> None:
        """One decision for the current request: `RateLimitExceeded` raised for a
        rejection; the RateLimit fields kept for `_after` either way."""
        setattr(g, self._decided, True)
        info = RequestInfo.from_wsgi(request.environ)
        info.native = request
        out: Outcome | None = run(self.engine.handle(info, route))
        if out is None:  # not limited
            return
        request.environ[ENVIRON_KEY] = out.decision
        setattr(g, self._headers, out.headers)
        if out.ticket is not None:  # a deduct_when decides, once the response is known
            setattr(g, self._tickets, (out.ticket, [r for r in _route_limits(route)
                                                    if r.refundable]))
        if out.action == "reject":
            raise RateLimitExceeded(
                flask.current_app.response_class(out.body, status=out.status,
                                                 headers=out.headers), out.decision)

    def _before(self) -> None:
        if not self._enabled or g.get(self._decided):
            return
        endpoint = request.endpoint or ""
        if _is_static(endpoint) or self._filtered():
            return
        view = flask.current_app.view_functions.get(endpoint)
        route = self._applicable(self._registry.find(view))
        if route is None and self._blueprints:
            for name in request.blueprints:  # the innermost first: "parent.child", "parent"
                spec = self._blueprints.get(name) or \
                    self._blueprints.get(name.rpartition(".")[2])
                if spec is not None:
                    route = self._applicable(spec.route_limit())
                    break
        self._decide(route)

    def _filtered(self) -> bool:
        """Whether a `request_filter` says this request is not limited."""
        return any(fn() for fn in self._request_filters)

    def request_filter(self, fn: Callable[[], bool]) -> Callable[[], bool]:
        """flask-limiter's ``@limiter.request_filter``: `fn()` (it reads ``flask.request``)
        returning True exempts the request from every limit of this limiter."""
        self._request_filters.append(fn)
        return fn

    def _applicable(self, route: tuple[RouteLimit, ...] | None
                    ) -> tuple[RouteLimit, ...] | None:
        """`route` as this request has it, flask-limiter's conditions of each decorator
        applied: one whose `methods` leave the request out or whose `exempt_when()` is
        true is left out, and a callable limit is read (naming no rate, it is left out);
        when every one is left out by its methods or its rates, the defaults decide, as
        flask-limiter's (by `exempt_when`, nothing does)."""
        if route is None or not self._when or any(r.exempt for r in route):
            return route
        out: list[RouteLimit] = []
        defaults = False  # a decorator left out by its methods or its rates
        for r in route:
            when = self._when.get(r.key)
            if when is None:
                out.append(r)
            elif when.methods is not None and request.method not in when.methods:
                defaults = True
            elif when.exempt_when is None or not when.exempt_when():
                got = r if when.rates is None and when.deduct_when is None else when.rated(r)
                if got is not None:
                    out.append(got)
                defaults = defaults or got is None
        if out:
            return tuple(out)
        if route[0].mode == "add" or defaults:
            return None
        return (RouteLimit((), route[0].endpoint, exempt=True),)

    def limit(self, limits: LimitSpec | Callable[[], str | None], *,
              key: KeySpec | None = None, algorithm: str | None = None,
              burst: float | None = None, mode: Mode | None = None,
              cost: Cost | Callable[[], float] | None = None, name: str | None = None,
              key_func: Callable[[], str] | None = None, per_method: bool = False,
              methods: Sequence[str] | None = None,
              exempt_when: Callable[[], bool] | None = None,
              override_defaults: bool | None = None,
              deduct_when: Callable[[Response], bool] | None = None,
              scope: str | Callable[[str], str] | None = None,
              error_message: str | Callable[[], str] | None = None,
              on_breach: Callable[..., Any] | None = None,
              meta_limits: Sequence[str] | None = None) -> LimitDecorator:
        """`Decorates.limit`, with flask-limiter's arguments: `limits` may be a function
        returning the rate string, read at each request; `key_func` (of nothing, it reads
        ``flask.request``); `per_method` (counted apart per HTTP method); `methods` (only
        those are limited by it); `exempt_when()` (true: this decorator's limits are left
        out); `override_defaults` (True: ``mode="replace"``, False: ``"add"``);
        `deduct_when(response)` (false: its charge is given back after the response);
        `cost` a function of nothing; `scope` (a string, or a function of the endpoint,
        counted apart). Made as flask-limiter's (``Limiter(key_func, ...)``), the default
        `mode` is ``"replace"`` and the default key the limiter's `key_func`; else
        ``"add"`` and the client's address. Applied to a ``flask.Blueprint``
        (``limiter.limit("10/minute")(blueprint)``), the limits of each of its views that
        has none of its own."""
        refused = {
            "error_message": (error_message, "@app.errorhandler(429) renders the rejection "
                              "(RateLimitExceeded has the decision and its limit)"),
            "on_breach": (on_breach, "@app.errorhandler(429)"),
            "meta_limits": (meta_limits, "a longer limit beside the short one (both decided "
                            "as one)"),
        }
        for option, (value, instead) in refused.items():
            if value:
                raise ValueError(f"@limiter.limit: flask-limiter's {option}={value!r} has no "
                                 f"ratekeeper equivalent; instead: {instead} "
                                 "(docs/migration.md)")
        if key is not None and key_func is not None:
            raise ValueError("@limiter.limit: give key_func (flask-limiter's) or key=, not both")
        if override_defaults is not None and mode is None:
            mode = "replace" if override_defaults else "add"
        mode = mode or self._default_mode
        algorithm = algorithm or self._algorithm
        chosen: KeySpec = key if key is not None else self._default_key \
            if key_func is None else _flask_key(key_func)
        if isinstance(scope, str):  # flask-limiter's scope: counted apart under its name
            name = name or scope
            scope = None
        rates = limits if callable(limits) else None
        if rates is not None or per_method or methods is not None or exempt_when is not None \
                or deduct_when is not None or scope is not None:
            chosen = self._conditional_key(chosen, per_method=per_method, scope=scope)
            self._when[chosen] = _When(
                None if methods is None else frozenset(m.upper() for m in methods),
                exempt_when, rates, algorithm, burst, name, deduct_when)
        route_cost = _route_cost(cost)
        given: LimitSpec = _PLACEHOLDER if rates is not None else limits  # type: ignore[assignment]
        if deduct_when is not None and not isinstance(self.engine, _Engine):
            raise ValueError("@limiter.limit: deduct_when= gives a charge back after the "
                             "response, which a policies file's engine does not do; give the "
                             "Limiter an HTTPPolicy, or cost= a function of the request")
        decorate = Decorates.limit(self, given, key=chosen, algorithm=algorithm, burst=burst,
                                   mode=mode, cost=route_cost, name=name)
        def limit_blueprint(obj: flask.Blueprint) -> None:
            endpoint = name or obj.name
            check_key(chosen, self.engine, endpoint)
            spec = Spec(endpoint, make_limits(given, endpoint=endpoint, algorithm=algorithm,
                                              burst=burst, name=name), chosen, mode, route_cost)
            old = self._blueprints.setdefault(obj.name, spec)
            if old is not spec:
                old.add(spec)
            old.route_limit()  # its errors now, not at the first request

        return LimitDecorator(decorate, limit_blueprint)

    def shared_limit(self, limits: LimitSpec | Callable[[], str | None],
                     scope: str | Callable[[str], str], **arguments: Any) -> LimitDecorator:
        """flask-limiter's ``@limiter.shared_limit(limits, scope)``: every view (or
        blueprint) it decorates counts on one state, named `scope`; a function `scope`
        of the endpoint gives the name of the state each request counts on. `arguments`:
        those of `limit`."""
        if callable(scope):
            name = f"shared:{getattr(scope, '__qualname__', None) or 'scope'}"
            return self.limit(limits, name=name, scope=scope, **arguments)
        return self.limit(limits, name=scope, **arguments)

    def _conditional_key(self, key: KeySpec, *, per_method: bool,
                         scope: Callable[[str], str] | None) -> KeyFunc:
        """A key function of its own for a decorator with flask-limiter's per-request
        conditions (they are found by it), counting as `key` does, apart per method
        (`per_method`) and per ``scope(endpoint)``."""
        if callable(key):
            base: KeyFunc = key
        elif key.lower().startswith("header:"):
            base = header_key(key[len("header:"):])
        elif key == "client_ip":
            base = _client_ip
        elif key == "key" and isinstance(self.engine, _Engine):
            base = self.engine.policy.key or _client_ip
        else:
            raise ValueError(f"@limiter.limit: key={key!r} is an attribute of the policies "
                             "file; flask-limiter's per_method/methods/exempt_when/"
                             "deduct_when/callable limits need a key function: give key=fn")

        def conditional_key(info: RequestInfo) -> str | None:
            got = base(info)
            if not per_method and scope is None:
                return got
            parts = [str(info.client_ip or "") if got is None else str(got)]
            if per_method:
                parts.append(info.method)
            if scope is not None:
                parts.append(str(scope(request.endpoint or "")))
            return "|".join(parts)

        return conditional_key

    @overload
    def exempt(self, func: F) -> F: ...
    @overload
    def exempt(self, func: flask.Blueprint) -> flask.Blueprint: ...

    def exempt(self, func: Any) -> Any:
        """`Decorates.exempt`; applied to a ``flask.Blueprint``, its views that have no
        limits of their own are not limited (flask-limiter's ``limiter.exempt(blueprint)``)."""
        if isinstance(func, flask.Blueprint):
            self._blueprints[func.name] = Spec(func.name, [], "client_ip", "add", None,
                                               exempt=True)
            return func
        return super().exempt(func)

    def _after(self, response: Response) -> Response:
        charged = g.pop(self._tickets, None)
        if charged is not None:
            self._deduct(response, *charged)
        headers = g.pop(self._headers, None)
        if headers:
            present = {name.lower() for name, _ in response.headers.items()}
            for name, value in headers:
                if name.lower() not in present:  # a rejection's response has them already
                    response.headers.add(name, value)
        return response

    def _deduct(self, response: Response, ticket: Ticket, routes: list[RouteLimit]) -> None:
        """Give back the charge of each decorator whose ``deduct_when(response)`` is false
        (flask-limiter's ``deduct_when``: only the responses it names count)."""
        back: list[Check] = []
        for r in routes:
            when = self._when.get(r.key)
            if when is not None and when.deduct_when is not None \
                    and not when.deduct_when(response):
                back.extend(c for c in ticket.checks if c[0] in r.limits)
        if back:
            engine = self.engine
            assert isinstance(engine, _Engine)  # deduct_when is refused otherwise
            try:
                run(refund(Ticket(ticket.store, back, ticket.at), engine.clock()))
            except StoreError as e:  # the charge stays and expires as usual
                log.warning("could not give back a deduct_when charge: %s", e)

    def _endpoint_of(self, func: Callable[..., Any]) -> str:
        """The function's name, or, when another ``def`` of that name has it already (a
        helper ``l1`` defined inside two views), its qualified name, as flask-limiter
        tells them apart (was a duplicate-name error at the second view's request)."""
        name = endpoint_name(func)
        owner = self._registry.names.get(name)
        if owner is None or owner is func or _definition(owner) is _definition(func):
            return name
        qualified = f"{func.__module__}.{func.__qualname__}".replace(".<locals>", "")
        return qualified if qualified != name else name

    def _guard(self, func: F) -> F:
        """`func`, deciding its own limits when no ``before_request`` hook of this limiter
        did (an app `init_app` was never called for), or, as flask-limiter does, when it
        is not the request's view but a helper it calls: then only its own limits (the
        view's were decided already) are decided, at each call. An ``async def`` is run
        through ``app.ensure_sync`` as Flask runs an async view."""
        registry = self._registry
        is_async = inspect.iscoroutinefunction(func)

        @functools.wraps(func)
        def view(*args: Any, **kwargs: Any) -> Any:
            if self._enabled and flask.has_request_context():
                if not g.get(self._decided):
                    flask.after_this_request(self._after)
                    self._decide(self._applicable(registry.find(view)))
                elif view not in _views(
                        flask.current_app.view_functions.get(request.endpoint or "")):
                    self._decide(self._applicable(registry.find_own(view)))
            if is_async:
                return flask.current_app.ensure_sync(func)(*args, **kwargs)
            return func(*args, **kwargs)

        view._ratekeeper_limiter = self  # type: ignore[attr-defined]
        return view  # type: ignore[return-value]
