"""Per-endpoint limits for FastAPI: slowapi's ``@limiter.limit`` habit, decided together
with the policy's defaults (one decision per request, all-or-nothing).

    from fastapi import Depends, FastAPI
    from ratekeeper import Limit
    from ratekeeper.http.fastapi import Limiter, install_problem_handler

    limiter = Limiter([Limit("gcra", "10/s", burst=20, name="per-client")])  # the defaults
    app = FastAPI(dependencies=[Depends(limiter)])   # every request: ONE decision
    install_problem_handler(app)                      # 429s as application/problem+json

    @app.get("/search")
    @limiter.limit("5/minute")                  # mode="add" (default): 10/s AND 5/minute
    async def search(q: str) -> dict[str, str]: ...

    @app.post("/upload")
    @limiter.limit("2/minute", mode="replace")  # only 2/minute, the defaults do not apply
    async def upload() -> dict[str, str]: ...

    @app.get("/health")
    @limiter.exempt                             # not limited at all
    async def health() -> str: ...

`Limiter(policy, **options)` takes what the middleware takes: an `HTTPPolicy`, its default
limits, or a policies file (``[http]`` part), and the adapter options (`store`, `clock`,
...). The global dependency finds the request's endpoint (``scope["endpoint"]``) and its
decorator limits, and decides them with the policy's in one ``engine.handle``. A decorated
endpoint of an app without the global dependency is still limited (its decorator decides,
with the defaults, when the endpoint is called); an undecorated one then is not.

``@limiter.limit(limits, key="client_ip", algorithm="fixed-window", burst=None,
mode="add", cost=None, name=None)``: `limits` is a rate string (``"5/minute"``), a `Limit`,
or a list of them; stacked decorators add limits to the same endpoint (with one key, mode
and cost). `key` is ``"client_ip"``, ``"header:<name>"``, a function of the `RequestInfo`,
``"key"`` (a Python policy's key function) or, with a policies file, any attribute of its
``[http]`` part (``"user"``...). `name` names the limit (its state and its RateLimit
field); by default ``"<function>:<rate>"``.

slowapi's own set-up runs as written (docs/migration.md, slowapi): ``Limiter(key_func,
default_limits=, application_limits=, key_style=, storage_uri=, ...)``,
``app.state.limiter = limiter`` and ``app.add_middleware(SlowAPIMiddleware)`` (or
`SlowAPIASGIMiddleware`, the same class), which decides an undecorated endpoint's default
limits, per route, on the limiter's engine; decorated endpoints decide their own.

The older `RateLimit` dependency limits one endpoint (or router) on its own:

    search_limit = RateLimit([Limit("gcra", "1/s", burst=5, name="search")])

    @app.get("/search", dependencies=[Depends(search_limit)])
    async def search(q: str) -> dict[str, str]: ...

Admitted: the dependency waits out any queueing delay and adds the RateLimit fields to the
response FastAPI builds from the endpoint's return value; a decorated endpoint returning a
`Response` object itself gets them on it (an undecorated one must copy them from
``request.scope["ratekeeper.decision"]`` with `ratelimit_headers`). Rejected: it raises
`RateLimited` (an ``HTTPException`` carrying Retry-After and the RateLimit fields),
rendered as problem+json by `install_problem_handler`'s handler, or as FastAPI's usual
``{"detail": ...}`` JSON without it. A `RateLimit` dependency and the middleware decide
separately; a `Limiter` decides the defaults and the endpoint's limits as one.
"""

from __future__ import annotations

import functools
import inspect
import json
import typing
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

try:
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Match
except ImportError as e:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        f"ratekeeper.http.fastapi needs Starlette (FastAPI's toolkit): "
        f"pip install 'ratekeeper[asgi]' ({e})"
    ) from e

from .._types import Decision, Limit
from ..core import arun
from ..policy._holder import PolicyHolder
from ..policy._request import KeyFunc, RequestInfo
from ..stores import AsyncStore
from ..stores._url import open_store
from ._decorators import (
    Decorates,
    KeySpec,
    LimitSpec,
    Mode,
    Registry,
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
    check_options,
)
from .asgi import (
    ASYNC,
    SCOPE_KEY,
    ASGIApp,
    AsyncSleep,
    Message,
    Receive,
    Scope,
    Send,
    _raw,
)
from .headers import PROBLEM_CONTENT_TYPE

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._policy import AdapterOptions

__all__ = ["Limiter", "RateLimit", "RateLimitExceeded", "RateLimited",
           "SlowAPIASGIMiddleware", "SlowAPIMiddleware", "_rate_limit_exceeded_handler",
           "get_ipaddr", "get_remote_address", "install_problem_handler", "problem_response"]

F = TypeVar("F", bound=Callable[..., Any])

#: Set in the scope once a `Limiter` decided the request (so it is decided once).
DECIDED_KEY = "ratekeeper.decided"
#: Set in the scope to the admitted request's RateLimit fields, for a returned `Response`.
HEADERS_KEY = "ratekeeper.headers"
#: Set in the scope by `SlowAPIASGIMiddleware`: the endpoint the router will call (the
#: router sets ``scope["endpoint"]`` only after the middleware).
ENDPOINT_KEY = "ratekeeper.endpoint"


class RateLimited(HTTPException):
    """A rejected request: `status_code`, `headers` (Retry-After, RateLimit fields), the
    problem+json `body`, and the `decision`."""

    def __init__(self, outcome: Outcome, message: str | None = None) -> None:
        headers = {k: v for k, v in outcome.headers if k.lower() != "content-type"}
        detail: Any = json.loads(outcome.body) if outcome.body else "Too Many Requests"
        body = outcome.body
        if message is not None and isinstance(detail, dict):
            # slowapi's error_message: the problem's human-readable "detail" member
            detail["detail"] = message
            body = json.dumps(detail).encode()
        super().__init__(status_code=outcome.status, detail=detail, headers=headers)
        self.body = body
        self.decision: Decision = outcome.decision
        self.message = message


async def problem_response(request: Request, exc: Exception) -> Response:
    """An exception handler rendering `RateLimited` as ``application/problem+json``."""
    if not isinstance(exc, RateLimited):  # pragma: no cover - registered for RateLimited only
        raise exc
    return Response(exc.body, status_code=exc.status_code, headers=exc.headers,
                    media_type=PROBLEM_CONTENT_TYPE)


#: slowapi's name for a rejection (``app.add_exception_handler(RateLimitExceeded, ...)``).
RateLimitExceeded = RateLimited


def _rate_limit_exceeded_handler(request: Request, exc: Exception) -> Response:
    """slowapi's handler name: the 429 as ``application/problem+json`` with Retry-After and
    the RateLimit fields, and slowapi's ``"error"`` member beside the problem's (a client
    reading ``body["error"]`` keeps working)."""
    if not isinstance(exc, RateLimited):
        raise exc
    body: dict[str, Any] = dict(exc.detail) if isinstance(exc.detail, dict) else {}
    said = exc.message if exc.message is not None else body.get("policy", exc.decision.limit)
    body["error"] = f"Rate limit exceeded: {said}"
    return Response(json.dumps(body), status_code=exc.status_code, headers=exc.headers,
                    media_type=PROBLEM_CONTENT_TYPE)


def get_remote_address(request: Request) -> str:
    """slowapi's key function: the peer address of the connection (``"127.0.0.1"`` when
    the server gives none). Behind a proxy, prefer ratekeeper's ``ClientIP`` (trusted
    proxies) to either of these."""
    return request.client.host if request.client else "127.0.0.1"


def get_ipaddr(request: Request) -> str:
    """slowapi's key function, as slowapi reads it: the whole ``X_FORWARDED_FOR`` header
    (with underscores), else the peer's address. Any client can set that header: behind a
    proxy, use ratekeeper's ``ClientIP`` (trusted proxies) instead."""
    forwarded = request.headers.get("x_forwarded_for")
    return forwarded if forwarded is not None else get_remote_address(request)


#: slowapi's (limits') strategy names and ratekeeper's algorithm for each.
_STRATEGIES: dict[str | None, str] = {
    None: "fixed-window", "fixed-window": "fixed-window",
    "moving-window": "sliding-window-log",
    "sliding-window-counter": "sliding-window-counter",
}


def _refuse_strategy(strategy: str | None) -> str:
    raise ValueError(
        f"Limiter: strategy={strategy!r} is not one ratekeeper has; use one of "
        f"{sorted(k for k in _STRATEGIES if k)} (fixed-window-elastic-expiry: a "
        f"sliding-window-log limit is stricter), or algorithm= on the decorator")


def _slowapi_key(key_func: Callable[..., str], prefix: str = "") -> KeyFunc:
    """A slowapi key function (of the Starlette request, or of nothing, as slowapi calls
    it by its signature) as a key function of the `RequestInfo`; `prefix` is slowapi's
    ``key_prefix`` (two apps on one store, counted apart)."""
    takes_request = bool(inspect.signature(key_func).parameters)

    def key(info: RequestInfo) -> str | None:
        return prefix + str(key_func(info.native) if takes_request else key_func())

    key.__name__ = getattr(key_func, "__name__", "key_func")
    return key


def _route_of(info: RequestInfo, by_url: bool) -> str:
    """What slowapi counts a limit on: the request's path (``key_style="url"``) or its
    endpoint function's qualified name (``"endpoint"``)."""
    if not by_url:
        scope = info.native.scope
        endpoint = scope.get("endpoint") or scope.get(ENDPOINT_KEY)
        if endpoint is not None:
            return f"{endpoint.__module__}.{endpoint.__qualname__}"
    return info.path


def _per_route(key: KeyFunc, by_url: bool) -> KeyFunc:
    """`key` counted apart on each route, as slowapi counts every limit but a shared one."""
    def per_route(info: RequestInfo) -> str:
        return f"{_route_of(info, by_url)}|{key(info)}"

    return per_route


def _per_method(key: KeyFunc) -> KeyFunc:
    """`key` counted apart per HTTP method (slowapi's ``per_method=True``)."""
    def per_method(info: RequestInfo) -> str:
        return f"{key(info)}:{info.method}"

    return per_method


def _message(error_message: str | Callable[[], str] | None) -> str | None:
    return error_message() if callable(error_message) else error_message


def _exempted(endpoint: object, request: Request) -> bool:
    """Whether slowapi's `exempt_when` given to `endpoint`'s decorator (of the request, or
    of nothing) exempts this request: then it is not decided at all."""
    exempt_when = getattr(endpoint, "_ratekeeper_exempt_when", None)
    if exempt_when is None:
        return False
    takes_request = bool(inspect.signature(exempt_when).parameters)
    return bool(exempt_when(request) if takes_request else exempt_when())


def install_problem_handler(app: Any) -> None:
    """Register `problem_response` for `RateLimited` on a Starlette or FastAPI app."""
    app.add_exception_handler(RateLimited, problem_response)


class RateLimit(_Adapter[AsyncStore, AsyncSleep]):
    """A FastAPI dependency limiting one endpoint (or router); returns the `Decision`.

    Arguments as for `RateLimitMiddleware`: `policy` is an `HTTPPolicy` or a `Limit` / list
    of limits (decided all-or-nothing: per-key and ``scope="global"`` together). Route
    patterns in the policy still apply to the request path; exempt requests return None.
    """

    _kind = ASYNC

    async def __call__(self, request: Request, response: Response) -> Decision | None:
        return await _decide(self, request, response, None)


async def _decide(adapter: _Adapter[AsyncStore, AsyncSleep], request: Request,
                  response: Response | None, route: RouteLimits,
                  messages: dict[str, str | Callable[[], str]] | None = None
                  ) -> Decision | None:
    """One decision for `request` (with `route`'s limits): raise `RateLimited` (with the
    message `messages` gives the refusing limit's name), or add the RateLimit fields to
    `response` and return the decision (None: not limited)."""
    info = RequestInfo.from_asgi(request.scope)
    info.native = request
    out = await arun(adapter.engine.handle(info, route))
    if out is None:  # not limited
        return None
    if out.action == "reject":
        refusing = out.decision.limit
        raise RateLimited(out, None if not messages or refusing is None
                          else _message(messages.get(refusing.name)))
    request.scope[SCOPE_KEY] = out.decision
    request.scope[HEADERS_KEY] = out.headers
    if response is not None:
        for name, value in out.headers:
            response.headers.append(name, value)
    return out.decision


#: slowapi's Limiter options that ratekeeper has no way to honour, each with the one to use.
_REFUSED_OPTIONS = {
    "auto_check": (True, "ratekeeper decides every decorated request; where you check by "
                   "hand, use a RateLimit dependency on that endpoint instead"),
    "in_memory_fallback": (None, "failure='local' (each limit's share decided in-process "
                           "while the store is down: fallback_share=)"),
    "retry_after": (None, "Retry-After is sent in seconds (RFC 9110's delay-seconds, read "
                    "by every client); drop retry_after="),
    "config_filename": (None, "pass the settings to Limiter(...) (ratekeeper reads no "
                        ".env file)"),
}


class Limiter(Decorates, _Adapter[AsyncStore, AsyncSleep]):
    """A FastAPI global dependency deciding the policy's limits and each endpoint's
    decorator limits as one (see the module docstring); returns the `Decision`.

    ``Limiter(policy, store=..., clock=..., ...)``: arguments as for
    `RateLimitMiddleware` (an `HTTPPolicy`, limits or a policies file; an `AsyncStore`).
    Or slowapi's ``Limiter(key_func, default_limits=..., ...)`` (docs/migration.md).
    """

    _kind = ASYNC

    def __init__(self, policy: PolicySpec | Callable[..., str] = (), *,
                 key_func: Callable[..., str] | None = None,
                 default_limits: Sequence[str] = (),
                 application_limits: Sequence[str] = (),
                 storage_uri: str | None = None,
                 storage_options: dict[str, Any] | None = None,
                 enabled: bool = True,
                 headers_enabled: bool = False,
                 strategy: str | None = None,
                 key_style: str = "url",
                 key_prefix: str = "",
                 swallow_errors: bool = False,
                 in_memory_fallback_enabled: bool = False,
                 auto_check: bool = True,
                 in_memory_fallback: Sequence[str] = (),
                 retry_after: str | None = None,
                 config_filename: str | None = None,
                 **options: Unpack[AdapterOptions[AsyncStore, AsyncSleep]]) -> None:
        check_options("Limiter", options, _LIMITER_OPTIONS)
        given = {"auto_check": auto_check, "in_memory_fallback": list(in_memory_fallback) or None,
                 "retry_after": retry_after, "config_filename": config_filename}
        for option, (default, instead) in _REFUSED_OPTIONS.items():
            if given[option] != default:
                raise ValueError(f"Limiter: slowapi's {option}={given[option]!r} is not "
                                 f"supported; {instead} (docs/migration.md, slowapi)")
        for option, rates in (("default_limits", default_limits),
                              ("application_limits", application_limits)):
            for rate in rates:
                if callable(rate):
                    raise ValueError(
                        f"Limiter: a callable in {option}= ({rate!r}) is not supported: "
                        "limits are prepared once, not per request; give the rate strings, "
                        "or a policies file giving each attribute value its own limits "
                        "(docs/policies.md)")
        if key_style not in ("url", "endpoint"):
            raise ValueError(f"Limiter: key_style={key_style!r}: slowapi's styles are 'url' "
                             "(a limit counted per path) and 'endpoint' (per endpoint)")
        if callable(policy) and not isinstance(policy, (HTTPPolicy, Limit, PolicyHolder)):
            if key_func is not None:
                raise TypeError("Limiter: give the key function once (key_func=)")
            key_func, policy = policy, ()  # slowapi's Limiter(get_remote_address)
        # slowapi's options, translated onto the one policy (see docs/migration.md):
        # key_func keys every limit a decorator without key= makes; the default limits
        # count per route (by path or endpoint, key_style) and the application limits
        # across routes; decorator limits replace the defaults (override_defaults=True).
        self._algorithm = _STRATEGIES[strategy] if strategy in _STRATEGIES else \
            _refuse_strategy(strategy)
        self._default_key: KeySpec = "client_ip"
        self._default_mode: Mode = "add"
        self._by_url = key_style == "url"
        self._route_key: KeySpec | None = None  # a decorator's default key, counted per route
        self._application: RouteLimit | None = None
        slowapi = key_func is not None or bool(default_limits) or bool(application_limits)
        if slowapi:
            if policy != ():
                raise ValueError(
                    "Limiter: give either a policy or slowapi's key_func=/default_limits=/"
                    "application_limits=, not both (put the key function in "
                    "HTTPPolicy(key=...))")
            key = _slowapi_key(key_func if key_func is not None else get_remote_address,
                               f"{key_prefix}/" if key_prefix else "")
            limits = make_limits(list(default_limits), endpoint="default",
                                 algorithm=self._algorithm, burst=None, name=None) \
                if default_limits else ()
            policy = HTTPPolicy(limits=limits, key=_per_route(key, self._by_url),
                                legacy_headers=headers_enabled)
            if application_limits:
                self._application = RouteLimit(
                    tuple(make_limits(list(application_limits), endpoint="application",
                                      algorithm=self._algorithm, burst=None, name=None)),
                    "application", key=key, mode="add")
            self._default_key = key
            self._route_key = _per_route(key, True) if self._by_url else key
            self._default_mode = "replace"
        elif key_prefix:
            raise ValueError("Limiter: key_prefix= goes with slowapi's key_func=; with a "
                             "policy, give the store its prefix (RedisStore prefix=)")
        if in_memory_fallback_enabled:
            options.setdefault("failure", "local")
        del swallow_errors  # store errors never reach a request: failure= decides
        if storage_uri is not None:
            if options.get("store") is not None:
                raise ValueError("Limiter: give store= or storage_uri=, not both")
            options["store"] = open_store(storage_uri, asyncio=True,
                                          **(storage_options or {}))
        super().__init__(policy, **options)
        self._registry = Registry()
        self.enabled = enabled

    def limit(self, limits: LimitSpec, key_func: Callable[..., str] | None = None, *,
              key: KeySpec | None = None, algorithm: str | None = None,
              burst: float | None = None, mode: Mode | None = None,
              cost: Cost | None = None, name: str | None = None,
              override_defaults: bool | None = None,
              exempt_when: Callable[..., bool] | None = None,
              error_message: str | Callable[[], str] | None = None,
              per_method: bool = False,
              methods: Sequence[str] | None = None) -> Callable[[F], F]:
        """`Decorates.limit`, taking slowapi's arguments too: `key_func` (positional, of
        the request or of nothing), ``override_defaults`` (True: ``mode="replace"``),
        `exempt_when`, `error_message` (the 429's ``detail`` and slowapi's ``error``) and
        `per_method` (each method counted apart); `methods` is refused here, naming the
        alternative."""
        return self._limit(limits, key_func, key=key, algorithm=algorithm, burst=burst,
                           mode=mode, cost=cost, name=name,
                           override_defaults=override_defaults, exempt_when=exempt_when,
                           error_message=error_message, per_method=per_method,
                           methods=methods, shared=False)

    def _limit(self, limits: LimitSpec, key_func: Callable[..., str] | None, *,
               key: KeySpec | None, algorithm: str | None, burst: float | None,
               mode: Mode | None, cost: Cost | None, name: str | None,
               override_defaults: bool | None, exempt_when: Callable[..., bool] | None,
               error_message: str | Callable[[], str] | None, per_method: bool,
               methods: Sequence[str] | None, shared: bool) -> Callable[[F], F]:
        if methods is not None:
            raise ValueError(
                f"@limiter.limit: methods={methods!r} is not supported; FastAPI routes are "
                "per method: decorate the endpoint of those methods (@app.post ...) alone "
                "(docs/migration.md, slowapi)")
        if callable(limits):
            raise ValueError(
                f"@limiter.limit: a callable limit ({limits!r}, slowapi's dynamic limit "
                f"provider) is not supported; use a policies file giving each attribute "
                f"value its own limits (docs/policies.md), or a decorator per rate")
        if key_func is not None and key is not None:
            raise ValueError("@limiter.limit: give key_func or key=, not both")
        if override_defaults is not None and mode is None:
            mode = "replace" if override_defaults else "add"
        chosen: KeySpec
        if key is not None:
            chosen = key
        elif key_func is not None:
            own = _slowapi_key(key_func)
            chosen = _per_route(own, True) if self._by_url and not shared and \
                self._route_key is not None else own
        elif self._route_key is not None and not shared:
            chosen = self._route_key
        else:
            chosen = self._default_key
        if per_method:
            chosen = _per_method(self._key_function(chosen))
        decorate = super().limit(
            limits, key=chosen, algorithm=algorithm or self._algorithm, burst=burst,
            mode=mode or self._default_mode, cost=cost, name=name)
        if exempt_when is None and error_message is None:
            return decorate

        def decorate_slowapi(func: F) -> F:
            target = decorate(func)
            if exempt_when is not None:
                target._ratekeeper_exempt_when = exempt_when  # type: ignore[attr-defined]
            if error_message is not None:
                # the message of a rejection by this decorator's limits (by their names)
                endpoint = name or endpoint_name(func)
                own = make_limits(limits, endpoint=endpoint, algorithm="fixed-window",
                                  burst=None, name=name)
                messages = dict(getattr(target, "_ratekeeper_messages", {}))
                messages.update(dict.fromkeys((lim.name for lim in own), error_message))
                target._ratekeeper_messages = messages  # type: ignore[attr-defined]
            return target

        return decorate_slowapi

    def _key_function(self, key: KeySpec) -> KeyFunc:
        """`key` as a function giving the key itself (per_method appends the method)."""
        engine = self.engine
        if callable(key):
            fn: KeyFunc = key
        elif key.lower().startswith("header:"):
            fn = header_key(key[len("header:"):])
        elif key in ("client_ip", "key") and isinstance(engine, _Engine):
            policy_key = engine.policy.key if key == "key" else None
            fn = policy_key if policy_key is not None else (lambda info: None)
        else:
            raise ValueError(f"@limiter.limit: per_method=True counts a key function per "
                             f"method; key={key!r} is an attribute of the policies file: "
                             "give a decorator per method's endpoint instead")
        client_ip = engine.policy.client_ip if isinstance(engine, _Engine) \
            else engine.rules.client_ip

        def full(info: RequestInfo) -> str:
            got = fn(info)
            return client_ip.key_of(info.client_ip) if got is None else str(got)

        return full

    def shared_limit(self, limits: LimitSpec, scope: str,
                     key_func: Callable[..., str] | None = None, *,
                     error_message: str | Callable[[], str] | None = None,
                     exempt_when: Callable[..., bool] | None = None,
                     cost: Cost | None = None, override_defaults: bool | None = None,
                     **arguments: Any) -> Callable[[F], F]:
        """slowapi's ``@limiter.shared_limit(limits, scope)``: one state for every endpoint
        it decorates, named `scope` (`limit` with ``name=scope``), whatever the path."""
        if "name" in arguments:
            raise ValueError("@limiter.shared_limit: the scope is the name; give no name=")
        if not isinstance(scope, str):
            raise ValueError(f"@limiter.shared_limit: scope={scope!r}: give the scope as a "
                             "string (a function of the endpoint is not supported)")
        options: dict[str, Any] = {"key": None, "algorithm": None, "burst": None,
                                   "mode": None, "per_method": False, "methods": None}
        unknown = set(arguments) - set(options)
        if unknown:
            raise TypeError(f"@limiter.shared_limit: unexpected keyword argument "
                            f"{sorted(unknown)[0]!r}")
        options.update(arguments)
        return self._limit(limits, key_func, name=scope, error_message=error_message,
                           exempt_when=exempt_when, cost=cost,
                           override_defaults=override_defaults, shared=True, **options)

    def route_limits(self, endpoint: object) -> RouteLimits:
        """The limits a request to `endpoint` decides beside the policy's: its decorators'
        and slowapi's application limits."""
        route = self._registry.find(endpoint)
        if self._application is None:
            return route
        return (self._application,) if route is None else (*route, self._application)

    async def __call__(self, request: Request, response: Response) -> Decision | None:
        if not self.enabled:
            return None
        if request.scope.get(DECIDED_KEY):  # e.g. also a router's dependency
            return request.scope.get(SCOPE_KEY)
        request.scope[DECIDED_KEY] = True
        endpoint = request.scope.get("endpoint")
        if _exempted(endpoint, request):
            return None
        return await _decide(self, request, response, self.route_limits(endpoint),
                             getattr(endpoint, "_ratekeeper_messages", None))

    def _guard(self, func: F) -> F:
        """`func`, deciding its limits itself when no global dependency did (an app built
        without ``dependencies=[Depends(limiter)]``), and adding the RateLimit fields to a
        `Response` it returns (FastAPI merges the dependency's headers only into a response
        it builds itself).

        FastAPI fills one parameter per type, so the endpoint's own ``request: Request`` /
        ``response: Response`` (slowapi requires the first) is reused; only a missing one is
        added to the wrapper's signature, under a name of ours, and not passed on."""
        is_async = inspect.iscoroutinefunction(func)
        sig = inspect.signature(func)
        hints = _annotations(func)
        own_request = _parameter_of(sig, hints, Request)
        own_response = _parameter_of(sig, hints, Response)
        request_name = own_request or "ratekeeper_request"
        response_name = own_response or "ratekeeper_response"

        # Starlette passes the request positionally (FastAPI by name).
        request_at = list(sig.parameters).index(own_request) if own_request else 0

        @functools.wraps(func)
        async def endpoint(*args: Any, **kwargs: Any) -> Any:
            request: Request = (
                kwargs.pop(request_name) if not own_request
                else kwargs[request_name] if request_name in kwargs else args[request_at])
            # None on a Starlette route: the fields go on the returned Response.
            response: Response | None = (kwargs.get(response_name) if own_response
                                         else kwargs.pop(response_name, None))
            if self.enabled and not request.scope.get(DECIDED_KEY) and \
                    not _exempted(endpoint, request):
                request.scope[DECIDED_KEY] = True
                await _decide(self, request, response, self.route_limits(endpoint),
                              getattr(endpoint, "_ratekeeper_messages", None))
            if is_async:
                result = await func(*args, **kwargs)
            else:
                result = await run_in_threadpool(func, *args, **kwargs)
            if isinstance(result, Response) and result is not response:
                for name, value in request.scope.get(HEADERS_KEY, ()):
                    if name not in result.headers:
                        result.headers.append(name, value)
            return result

        params = list(sig.parameters.values())
        at = next((i for i, p in enumerate(params) if p.kind is p.VAR_KEYWORD), len(params))
        params[at:at] = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=cls)
            for name, cls, own in ((request_name, Request, own_request),
                                   (response_name, Response, own_response))
            if not own
        ]
        endpoint.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        endpoint._ratekeeper_limiter = self  # type: ignore[attr-defined]
        return endpoint  # type: ignore[return-value]


_LIMITER_OPTIONS = tuple(name for name in inspect.signature(Limiter.__init__).parameters
                         if name not in ("self", "policy", "options"))


def _route_endpoint(app: Any, scope: Scope) -> object | None:
    """The endpoint of the first of `app`'s routes matching `scope` fully (the one
    Starlette's router will call), or None (no route: a 404, or a mounted app)."""
    for route in getattr(app, "routes", ()):
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return getattr(route, "endpoint", None)
    return None


class SlowAPIASGIMiddleware:
    """slowapi's middleware: ``app.add_middleware(SlowAPIMiddleware)`` with the `Limiter`
    in ``app.state.limiter``. A request to an undecorated endpoint is decided with the
    default (and application) limits, on the limiter's engine; a decorated or exempt one is
    left to its decorator, and a request for no route passes. A rejection is rendered by
    the app's handler for `RateLimitExceeded` (sync or async; slowapi's
    `_rate_limit_exceeded_handler` if none); an admitted response gets the RateLimit
    fields. Lifespan and websocket traffic passes untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = scope.get("app")
        limiter = getattr(getattr(app, "state", None), "limiter", None)
        if scope["type"] != "http" or scope.get(DECIDED_KEY):
            await self.app(scope, receive, send)
            return
        if app is None or not isinstance(limiter, Limiter):
            raise TypeError(f"SlowAPIMiddleware needs the Limiter in app.state.limiter, "
                            f"got {limiter!r}: set app.state.limiter = limiter")
        endpoint = _route_endpoint(app, scope)
        if not limiter.enabled or endpoint is None or \
                limiter._registry.find(endpoint) is not None:
            await self.app(scope, receive, send)  # its decorator decides (or exempts)
            return
        scope[DECIDED_KEY] = True
        scope[ENDPOINT_KEY] = endpoint
        request = Request(scope, receive)
        try:
            decision = await _decide(limiter, request, None, limiter.route_limits(None))
        except RateLimited as exc:
            handler = app.exception_handlers.get(RateLimited, _rate_limit_exceeded_handler)
            response = handler(request, exc)
            if inspect.isawaitable(response):
                response = await response
            await response(scope, receive, send)
            return
        if decision is None:
            await self.app(scope, receive, send)
            return
        extra = _raw(scope[HEADERS_KEY])

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


#: slowapi's other name for its middleware (a BaseHTTPMiddleware there): the same class
#: here, which awaits an async exception handler too.
SlowAPIMiddleware = SlowAPIASGIMiddleware


def _annotations(func: Callable[..., Any]) -> dict[str, Any]:
    """`func`'s parameter annotations as types (strings under ``from __future__ import
    annotations`` resolved as FastAPI resolves them; an unresolvable one left out)."""
    try:
        return typing.get_type_hints(func)
    except Exception:  # a forward reference FastAPI resolves later (or never)
        return {}


def _parameter_of(sig: inspect.Signature, hints: dict[str, Any], cls: type) -> str | None:
    """The name of `sig`'s parameter annotated with `cls` (or a subclass), if any."""
    for p in sig.parameters.values():
        ann = hints.get(p.name, p.annotation)
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        if isinstance(ann, type) and issubclass(ann, cls):
            return p.name
        if cls is Request and p.name == "request" and ann is p.empty:
            return p.name  # slowapi's rule: the parameter named request (Starlette's)
    return None
