"""`WSGIRateLimitMiddleware`: rate limiting for any WSGI application (Flask, Django, ...).

    from ratekeeper import Limit
    from ratekeeper.http import HTTPPolicy
    from ratekeeper.http.wsgi import WSGIRateLimitMiddleware

    app.wsgi_app = WSGIRateLimitMiddleware(app.wsgi_app, HTTPPolicy(limits=[...]))  # Flask
    application = WSGIRateLimitMiddleware(application, policy)                      # any WSGI

The same behaviour as the ASGI middleware (same `HTTPPolicy`, same headers, the same core
plan), run synchronously (``core.run``): ``start_response`` is wrapped so every admitted
response carries the RateLimit fields, a queued request sleeps its delay in the worker
thread (``sleep(delay)``), and the decision is left in ``environ["ratekeeper.decision"]``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..core import run
from ..policy._request import RequestInfo
from ..stores import Store
from ._policy import _Kind, _Middleware, status_line

if TYPE_CHECKING:
    from _typeshed import OptExcInfo
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment
else:  # a run-time stand-in for the base class's type argument
    WSGIApplication = Callable[..., Iterable[bytes]]

__all__ = ["WSGIRateLimitMiddleware"]

#: The environ key under which the middleware leaves the request's `Decision`.
ENVIRON_KEY = "ratekeeper.decision"


#: The synchronous adapters (this middleware, Django's): plans run by `core.run`.
SYNC = _Kind(Store, time.sleep,
             "the ASGI middleware and the FastAPI dependency take an AsyncStore")

Sleep = Callable[[float], None]


class WSGIRateLimitMiddleware(_Middleware[WSGIApplication, Store, Sleep]):
    """WSGI middleware applying an `HTTPPolicy` through the decision core, blocking.

    Arguments as for the ASGI `RateLimitMiddleware`, with a synchronous `Store` and a
    blocking `sleep` (default `time.sleep`; tests pass ``ManualClock.sleep`` or a recorder).
    """

    _kind = SYNC

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        out = run(self.engine.handle(RequestInfo.from_wsgi(environ)))
        if out is None:  # not limited
            return self.app(environ, start_response)
        if out.action == "reject":
            headers = [*out.headers, ("Content-Length", str(len(out.body)))]
            start_response(status_line(out.status), headers)
            return [out.body]
        environ[ENVIRON_KEY] = out.decision
        extra = out.headers

        def start_with_headers(
            status: str, headers: list[tuple[str, str]], exc_info: OptExcInfo | None = None, /
        ) -> Callable[[bytes], object]:
            return start_response(status, [*headers, *extra], exc_info)

        return self.app(environ, start_with_headers)
