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
response FastAPI builds from the endpoint's return value (an endpoint that returns a
`Response` object itself must copy them from ``request.scope["ratekeeper.decision"]`` with
`ratelimit_headers`). Rejected: it raises `RateLimited` (an ``HTTPException`` carrying
Retry-After and the RateLimit fields), rendered as problem+json by
`install_problem_handler`'s handler, or as FastAPI's usual ``{"detail": ...}`` JSON without
it. A `RateLimit` dependency and the middleware decide separately; a `Limiter` decides the
defaults and the endpoint's limits as one.
"""

from __future__ import annotations

import functools
import inspect
import json
import typing
from collections.abc import Callable
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
from ._decorators import (
    Decorates,
    Registry,
)
from ._policy import Outcome, PolicySpec, RouteLimits, _Adapter
from .asgi import ASYNC, SCOPE_KEY, AsyncSleep
from .headers import PROBLEM_CONTENT_TYPE

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._policy import AdapterOptions

__all__ = ["Limiter", "RateLimit", "RateLimited", "install_problem_handler",
           "problem_response"]

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
                  response: Response, route: RouteLimits) -> Decision | None:
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

    def __init__(self, policy: PolicySpec = (),
                 **options: Unpack[AdapterOptions[AsyncStore, AsyncSleep]]) -> None:
        super().__init__(policy, **options)
        self._registry = Registry()

    async def __call__(self, request: Request, response: Response) -> Decision | None:
        if request.scope.get(DECIDED_KEY):  # e.g. also a router's dependency
            return request.scope.get(SCOPE_KEY)
        request.scope[DECIDED_KEY] = True
        route = self._registry.find(request.scope.get("endpoint"))
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

        @functools.wraps(func)
        async def endpoint(*args: Any, **kwargs: Any) -> Any:
            request: Request = (kwargs[request_name] if own_request
                                else kwargs.pop(request_name))
            response: Response = (kwargs[response_name] if own_response
                                  else kwargs.pop(response_name))
            if not request.scope.get(DECIDED_KEY):
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
        if isinstance(ann, type) and issubclass(ann, cls) and p.kind in (
                p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            return p.name
    return None
