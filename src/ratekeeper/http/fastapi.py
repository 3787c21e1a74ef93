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
except ImportError as e:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        f"ratekeeper.http.fastapi needs Starlette (FastAPI's toolkit): "
        f"pip install 'ratekeeper[asgi]' ({e})"
    ) from e

from .._types import Decision
from ..core import arun
from ..policy._request import RequestInfo
from ..stores import AsyncStore
from ..stores._url import open_store
from ._decorators import (
    Decorates,
    KeySpec,
    LimitSpec,
    Mode,
    Registry,
    make_limits,
)
from ._policy import Cost, HTTPPolicy, Outcome, PolicySpec, RouteLimits, _Adapter
from .asgi import ASYNC, SCOPE_KEY, AsyncSleep
from .headers import PROBLEM_CONTENT_TYPE

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._policy import AdapterOptions

__all__ = ["Limiter", "RateLimit", "RateLimitExceeded", "RateLimited",
           "_rate_limit_exceeded_handler", "get_ipaddr", "get_remote_address",
           "install_problem_handler", "problem_response"]

F = TypeVar("F", bound=Callable[..., Any])

#: Set in the scope once a `Limiter` decided the request (so it is decided once).
DECIDED_KEY = "ratekeeper.decided"
#: Set in the scope to the admitted request's RateLimit fields, for a returned `Response`.
HEADERS_KEY = "ratekeeper.headers"


class RateLimited(HTTPException):
    """A rejected request: `status_code`, `headers` (Retry-After, RateLimit fields), the
    problem+json `body`, and the `decision`."""

    def __init__(self, outcome: Outcome) -> None:
        headers = {k: v for k, v in outcome.headers if k.lower() != "content-type"}
        detail: Any = json.loads(outcome.body) if outcome.body else "Too Many Requests"
        super().__init__(status_code=outcome.status, detail=detail, headers=headers)
        self.body = outcome.body
        self.decision: Decision = outcome.decision


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
    body["error"] = f"Rate limit exceeded: {body.get('policy', exc.decision.limit)}"
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


def _slowapi_key(key_func: Callable[..., str]) -> Callable[[RequestInfo], str | None]:
    """A slowapi key function (of the Starlette request, or of nothing, as slowapi calls
    it by its signature) as a key function of the `RequestInfo`."""
    takes_request = bool(inspect.signature(key_func).parameters)

    def key(info: RequestInfo) -> str | None:
        return str(key_func(info.native) if takes_request else key_func())

    key.__name__ = getattr(key_func, "__name__", "key_func")
    return key


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
                  response: Response | None, route: RouteLimits) -> Decision | None:
    """One decision for `request` (with `route`'s limits): raise `RateLimited`, or add the
    RateLimit fields to `response` and return the decision (None: not limited)."""
    info = RequestInfo.from_asgi(request.scope)
    info.native = request
    out = await arun(adapter.engine.handle(info, route))
    if out is None:  # not limited
        return None
    if out.action == "reject":
        raise RateLimited(out)
    request.scope[SCOPE_KEY] = out.decision
    request.scope[HEADERS_KEY] = out.headers
    if response is not None:
        for name, value in out.headers:
            response.headers.append(name, value)
    return out.decision


class Limiter(Decorates, _Adapter[AsyncStore, AsyncSleep]):
    """A FastAPI global dependency deciding the policy's limits and each endpoint's
    decorator limits as one (see the module docstring); returns the `Decision`.

    ``Limiter(policy, store=..., clock=..., ...)``: arguments as for
    `RateLimitMiddleware` (an `HTTPPolicy`, limits or a policies file; an `AsyncStore`).
    """

    _kind = ASYNC

    def __init__(self, policy: PolicySpec = (), *,
                 key_func: Callable[..., str] | None = None,
                 default_limits: Sequence[str] = (),
                 storage_uri: str | None = None,
                 enabled: bool = True,
                 headers_enabled: bool = False,
                 strategy: str | None = None,
                 application_limits: Sequence[str] | None = None,
                 key_style: str | None = None,
                 **options: Unpack[AdapterOptions[AsyncStore, AsyncSleep]]) -> None:
        for given, what, instead in (
                (application_limits, "application_limits=", "a Limit(..., scope='global') "
                 "in the policy, or a literal descriptor in a policies file"),
                (key_style, "key_style=", "the policy's key (state names are ratekeeper's "
                 "own: name= on the decorator)")):
            if given is not None:
                raise ValueError(f"Limiter: {what}{given!r} is not supported; use "
                                 f"{instead} (docs/migration.md, slowapi)")
        # slowapi's options, translated onto the one policy (see docs/migration.md):
        # key_func keys the defaults and every decorator without key=; decorator limits
        # then replace the defaults (slowapi's override_defaults=True).
        self._algorithm = _STRATEGIES[strategy] if strategy in _STRATEGIES else \
            _refuse_strategy(strategy)
        self._default_key: KeySpec = "client_ip"
        self._default_mode: Mode = "add"
        if key_func is not None or default_limits:
            if policy != ():
                raise ValueError(
                    "Limiter: give either a policy or slowapi's key_func=/default_limits=, "
                    "not both (put the key function in HTTPPolicy(key=...))")
            key = None if key_func is None else _slowapi_key(key_func)
            limits = make_limits(list(default_limits), endpoint="default",
                                 algorithm=self._algorithm, burst=None, name=None) \
                if default_limits else ()
            policy = HTTPPolicy(limits=limits, key=key, legacy_headers=headers_enabled)
            self._default_key = "key" if key is not None else "client_ip"
            self._default_mode = "replace"
        if storage_uri is not None:
            if options.get("store") is not None:
                raise ValueError("Limiter: give store= or storage_uri=, not both")
            options["store"] = open_store(storage_uri, asyncio=True)
        super().__init__(policy, **options)
        self._registry = Registry()
        self.enabled = enabled

    def limit(self, limits: LimitSpec, key_func: Callable[..., str] | None = None, *,
              key: KeySpec | None = None, algorithm: str | None = None,
              burst: float | None = None, mode: Mode | None = None,
              cost: Cost | None = None, name: str | None = None,
              override_defaults: bool | None = None,
              exempt_when: Callable[..., bool] | None = None,
              error_message: str | None = None, per_method: bool = False,
              methods: Sequence[str] | None = None) -> Callable[[F], F]:
        """`Decorates.limit`, taking slowapi's arguments too: `key_func` (positional, of
        the request or of nothing), ``override_defaults`` (True: ``mode="replace"``) and
        `exempt_when`; those ratekeeper cannot honour are refused here, naming the
        alternative."""
        for given, what, instead in (
                (error_message, "error_message=", "the problem+json detail of "
                 "install_problem_handler, or your own RateLimited handler"),
                (per_method or None, "per_method=", "a decorator per method's endpoint"),
                (methods, "methods=", "a decorator on the endpoint of those methods")):
            if given is not None:
                raise ValueError(f"@limiter.limit: {what}{given!r} is not supported; use "
                                 f"{instead} (docs/migration.md, slowapi)")
        if callable(limits):
            raise ValueError(
                f"@limiter.limit: a callable limit ({limits!r}, slowapi's dynamic limit "
                f"provider) is not supported; use a policies file giving each attribute "
                f"value its own limits (docs/policies.md), or a decorator per rate")
        if key_func is not None and key is not None:
            raise ValueError("@limiter.limit: give key_func or key=, not both")
        if override_defaults is not None and mode is None:
            mode = "replace" if override_defaults else "add"
        decorate = super().limit(
            limits, key=key if key is not None else
            _slowapi_key(key_func) if key_func is not None else self._default_key,
            algorithm=algorithm or self._algorithm, burst=burst,
            mode=mode or self._default_mode, cost=cost, name=name)
        if exempt_when is None:
            return decorate

        def decorate_exempt_when(func: F) -> F:
            target = decorate(func)
            target._ratekeeper_exempt_when = exempt_when  # type: ignore[attr-defined]
            return target

        return decorate_exempt_when

    def shared_limit(self, limits: LimitSpec, scope: str,
                     key_func: Callable[..., str] | None = None, **arguments: Any
                     ) -> Callable[[F], F]:
        """slowapi's ``@limiter.shared_limit(limits, scope)``: one state for every endpoint
        it decorates, named `scope` (`limit` with ``name=scope``)."""
        if "name" in arguments:
            raise ValueError("@limiter.shared_limit: the scope is the name; give no name=")
        return self.limit(limits, key_func, name=scope, **arguments)

    async def __call__(self, request: Request, response: Response) -> Decision | None:
        if not self.enabled:
            return None
        if request.scope.get(DECIDED_KEY):  # e.g. also a router's dependency
            return request.scope.get(SCOPE_KEY)
        request.scope[DECIDED_KEY] = True
        endpoint = request.scope.get("endpoint")
        if _exempted(endpoint, request):
            return None
        route = self._registry.find(endpoint)
        return await _decide(self, request, response, route)

    def _guard(self, func: F) -> F:
        """`func`, deciding its limits itself when no global dependency did (an app built
        without ``dependencies=[Depends(limiter)]``), and adding the RateLimit fields to a
        `Response` it returns (FastAPI merges the dependency's headers only into a response
        it builds itself).

        FastAPI fills one parameter per type, so the endpoint's own ``request: Request`` /
        ``response: Response`` (slowapi requires the first) is reused; only a missing one is
        added to the wrapper's signature, under a name of ours, and not passed on."""
        registry = self._registry
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
                await _decide(self, request, response, registry.find(endpoint))
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
