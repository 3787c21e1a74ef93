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
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

try:
    import flask
    from flask import Flask, Response, g, request
    from werkzeug.exceptions import TooManyRequests
except ImportError as e:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        f"ratekeeper.http.flask needs Flask: pip install 'ratekeeper[flask]' ({e})"
    ) from e

from .._types import Decision, Limit
from ..core import run
from ..policy._request import RequestInfo
from ..stores import Store, open_store
from ._decorators import (
    Decorates,
    KeySpec,
    LimitSpec,
    Mode,
    Registry,
    Spec,
    _rate_strings,
    check_key,
    make_limits,
)
from ._policy import Cost, HTTPPolicy, Outcome, PolicySpec, RouteLimits, _Adapter
from .wsgi import ENVIRON_KEY, SYNC, Sleep

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._policy import AdapterOptions

__all__ = ["Limiter", "RateLimitExceeded", "get_remote_address"]

F = TypeVar("F", bound=Callable[..., Any])

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
    if key_func is None or key_func is get_remote_address:
        return HTTPPolicy(limits=limits)
    func = key_func

    def key(_: RequestInfo) -> str:
        return func()

    return HTTPPolicy(limits=limits, key=key)


class RateLimitExceeded(TooManyRequests):
    """A request over its limits (a 429), raised as flask-limiter raises its own so that
    the app's ``@app.errorhandler(429)`` runs; with none, Flask renders `response` (the
    WSGI middleware's answer: Retry-After, the RateLimit fields, a problem+json body).
    The RateLimit fields are added to a handler's own response too. `decision` is
    ratekeeper's `Decision`."""

    def __init__(self, response: Response, decision: Decision) -> None:
        super().__init__(response=response)
        self.decision = decision


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
        if key_func is not None or default_limits or application_limits \
                or strategy != "fixed-window":
            if policy:
                raise ValueError("give either policy=... or flask-limiter's key_func/"
                                 "default_limits/application_limits/strategy, not both")
            policy = _flask_limiter_policy(key_func, default_limits, application_limits,
                                           strategy)
        if storage_uri is not None:
            if options.get("store") is not None:
                raise ValueError("give either store=... or storage_uri=..., not both")
            options["store"] = open_store(storage_uri)
        super().__init__(policy, **options)
        self._registry = Registry()
        self._blueprints: dict[str, Spec] = {}  # blueprint name -> its limits or exemption
        # each limiter its own flags in flask.g: two limiters on one app both decide
        self._decided = f"_ratekeeper_decided_{id(self):x}"
        self._headers = f"_ratekeeper_headers_{id(self):x}"
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Decide every request of `app` (``before_request``) and add the RateLimit fields
        to its admitted responses (``after_request``)."""
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
        if out.action == "reject":
            raise RateLimitExceeded(
                flask.current_app.response_class(out.body, status=out.status,
                                                 headers=out.headers), out.decision)

    def _before(self) -> None:
        if not self._enabled or g.get(self._decided):
            return
        endpoint = request.endpoint or ""
        if _is_static(endpoint):
            return
        view = flask.current_app.view_functions.get(endpoint)
        route = self._registry.find(view)
        if route is None and self._blueprints:
            for name in request.blueprints:  # the innermost first: "parent.child", "parent"
                spec = self._blueprints.get(name) or \
                    self._blueprints.get(name.rpartition(".")[2])
                if spec is not None:
                    route = spec.route_limit()
                    break
        self._decide(route)

    def limit(self, limits: LimitSpec, *, key: KeySpec = "client_ip",
              algorithm: str = "fixed-window", burst: float | None = None,
              mode: Mode = "add", cost: Cost | None = None,
              name: str | None = None) -> LimitDecorator:
        """`Decorates.limit`; applied to a ``flask.Blueprint`` (flask-limiter's
        ``limiter.limit("10/minute")(blueprint)``), the limits of each of its views that
        has none of its own."""
        decorate = super().limit(limits, key=key, algorithm=algorithm, burst=burst,
                                 mode=mode, cost=cost, name=name)

        def limit_blueprint(obj: flask.Blueprint) -> None:
            endpoint = name or obj.name
            check_key(key, self.engine, endpoint)
            spec = Spec(endpoint, make_limits(limits, endpoint=endpoint, algorithm=algorithm,
                                              burst=burst, name=name), key, mode, cost)
            old = self._blueprints.setdefault(obj.name, spec)
            if old is not spec:
                old.add(spec)
            old.route_limit()  # its errors now, not at the first request

        return LimitDecorator(decorate, limit_blueprint)

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
        headers = g.pop(self._headers, None)
        if headers:
            present = {name.lower() for name, _ in response.headers.items()}
            for name, value in headers:
                if name.lower() not in present:  # a rejection's response has them already
                    response.headers.add(name, value)
        return response

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
                    self._decide(registry.find(view))
                elif view not in _views(
                        flask.current_app.view_functions.get(request.endpoint or "")):
                    self._decide(registry.find_own(view))
            if is_async:
                return flask.current_app.ensure_sync(func)(*args, **kwargs)
            return func(*args, **kwargs)

        view._ratekeeper_limiter = self  # type: ignore[attr-defined]
        return view  # type: ignore[return-value]
