"""Per-endpoint limits for FastAPI (a dependency) and Starlette (an exception handler).

    from fastapi import Depends, FastAPI
    from ratekeeper import Limit
    from ratekeeper.http.fastapi import RateLimit, install_problem_handler

    app = FastAPI()
    install_problem_handler(app)          # 429s as application/problem+json
    search_limit = RateLimit([Limit("gcra", "1/s", burst=5, name="search")])

    @app.get("/search", dependencies=[Depends(search_limit)])
    async def search(q: str) -> dict[str, str]: ...

The dependency makes one decision per request with the same `HTTPPolicy` machinery as the
middleware (give it an `HTTPPolicy` for keys, costs, dry run...). Admitted: it waits out any
queueing delay and adds the RateLimit fields to the response FastAPI builds from the
endpoint's return value (an endpoint that returns a `Response` object itself must copy them
from ``request.scope["ratekeeper.decision"]`` with `ratelimit_headers`). Rejected: it raises
`RateLimited` (an ``HTTPException`` carrying Retry-After and the RateLimit fields), rendered
as problem+json by `install_problem_handler`'s handler, or as FastAPI's usual
``{"detail": ...}`` JSON without it.

A dependency and the middleware decide separately: limits that must be decided
all-or-nothing belong in one `Route` (or one dependency).
"""

from __future__ import annotations

import json
from typing import Any

try:
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
from ._policy import Outcome, _Adapter
from .asgi import ASYNC, SCOPE_KEY, AsyncSleep
from .headers import PROBLEM_CONTENT_TYPE

__all__ = ["RateLimit", "RateLimited", "install_problem_handler", "problem_response"]


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
        info = RequestInfo.from_asgi(request.scope)
        info.native = request
        out = await arun(self.engine.handle(info))
        if out is None:  # not limited
            return None
        if out.action == "reject":
            raise RateLimited(out)
        request.scope[SCOPE_KEY] = out.decision
        for name, value in out.headers:
            response.headers.append(name, value)
        return out.decision
