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

``Limiter(app=None, policy=..., store=..., clock=..., ...)`` takes what the WSGI middleware
takes: an `HTTPPolicy`, its default limits, or a policies file (``[http]`` part), and a
synchronous `Store` (`MemoryStore`, `RedisStore`); ``init_app(app)`` for the app-factory
pattern. Its ``before_request`` hook finds the view of ``request.endpoint``, and decides the
policy's limits and the view's decorator limits as one, all-or-nothing: a rejection is
answered as the WSGI middleware answers it (the status, Retry-After, the RateLimit fields,
an ``application/problem+json`` body); an admitted response gets the RateLimit fields in
``after_request``, and the decision is in ``request.environ["ratekeeper.decision"]``.
Requests for no view (404s) are decided with the defaults, as by the middleware. A
decorated view of an app the limiter was never attached to still decides its own limits
(with the defaults) when it is called.

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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

try:
    import flask
    from flask import Flask, Response, g, request
except ImportError as e:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        f"ratekeeper.http.flask needs Flask: pip install 'ratekeeper[flask]' ({e})"
    ) from e

from ..core import run
from ..policy._request import RequestInfo
from ..stores import Store
from ._decorators import (
    Decorates,
    Registry,
)
from ._policy import Outcome, PolicySpec, RouteLimits, _Adapter
from .wsgi import ENVIRON_KEY, SYNC, Sleep

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._policy import AdapterOptions

__all__ = ["Limiter"]

F = TypeVar("F", bound=Callable[..., Any])

_DECIDED = "_ratekeeper_decided"
_HEADERS = "_ratekeeper_headers"


class Limiter(Decorates, _Adapter[Store, Sleep]):
    """Flask per-view limits with the policy's defaults (see the module docstring)."""

    _kind = SYNC

    def __init__(self, app: Flask | None = None, policy: PolicySpec = (),
                 **options: Unpack[AdapterOptions[Store, Sleep]]) -> None:
        super().__init__(policy, **options)
        self._registry = Registry()
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Decide every request of `app` (``before_request``) and add the RateLimit fields
        to its admitted responses (``after_request``)."""
        app.before_request(self._before)
        app.after_request(self._after)
        app.extensions["ratekeeper"] = self

    def _decide(self, route: RouteLimits) -> Response | None:
        """One decision for the current request: a rejection response, or None (the
        RateLimit fields kept for `_after`)."""
        setattr(g, _DECIDED, True)
        info = RequestInfo.from_wsgi(request.environ)
        info.native = request
        out: Outcome | None = run(self.engine.handle(info, route))
        if out is None:  # not limited
            return None
        if out.action == "reject":
            return flask.current_app.response_class(out.body, status=out.status,
                                                    headers=out.headers)
        request.environ[ENVIRON_KEY] = out.decision
        setattr(g, _HEADERS, out.headers)
        return None

    def _before(self) -> Response | None:
        if g.get(_DECIDED):
            return None
        view = flask.current_app.view_functions.get(request.endpoint or "")
        return self._decide(self._registry.find(view))

    def _after(self, response: Response) -> Response:
        for name, value in g.pop(_HEADERS, None) or ():
            response.headers.add(name, value)
        return response

    def _guard(self, func: F) -> F:
        """`func`, deciding its own limits when no ``before_request`` hook of this limiter
        did (an app `init_app` was never called for)."""
        registry = self._registry

        @functools.wraps(func)
        def view(*args: Any, **kwargs: Any) -> Any:
            if not g.get(_DECIDED):
                rejected = self._decide(registry.find(view))
                if rejected is not None:
                    return rejected
                flask.after_this_request(self._after)
            return func(*args, **kwargs)

        view._ratekeeper_limiter = self  # type: ignore[attr-defined]
        return view  # type: ignore[return-value]
