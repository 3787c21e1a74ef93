"""`WSGIRateLimitMiddleware`: rate limiting for any WSGI application (Flask, Django, ...).

    from ratekeeper import Limit
    from ratekeeper.http import HTTPPolicy
    from ratekeeper.http.wsgi import WSGIRateLimitMiddleware

    app.wsgi_app = WSGIRateLimitMiddleware(app.wsgi_app, HTTPPolicy(limits=[...]))  # Flask
    application = WSGIRateLimitMiddleware(application, policy)                      # any WSGI

The same behaviour as the ASGI middleware (same `HTTPPolicy`, same headers), with a
synchronous `Limiter`: ``start_response`` is wrapped so every admitted response carries the
RateLimit fields, a queued request sleeps its delay in the worker thread (``sleep(delay)``),
and the decision is left in ``environ["ratekeeper.decision"]``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from .._errors import StoreError
from .._types import Decision, Limit
from ..limiter import Limiter, Reservation
from ..stores import MemoryStore, Store
from ._client import RequestInfo
from ._policy import HTTPFailurePolicy, HTTPPolicy, Outcome, Plan, _Engine, status_line

if TYPE_CHECKING:
    from _typeshed import OptExcInfo
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

__all__ = ["WSGIRateLimitMiddleware"]

log = logging.getLogger("ratekeeper.http")

#: The environ key under which the middleware leaves the request's `Decision`.
ENVIRON_KEY = "ratekeeper.decision"


class _SyncAdapter:
    """The I/O of one request for synchronous adapters (WSGI and Django)."""

    def __init__(
        self,
        policy: HTTPPolicy | Limit | Sequence[Limit],
        *,
        store: Store | None,
        clock: Callable[[], float] | None,
        sleep: Callable[[float], None] | None,
        failure: HTTPFailurePolicy,
        fallback_share: float,
    ) -> None:
        self.policy = HTTPPolicy.of(policy)
        self.store: Store = MemoryStore() if store is None else store
        self._sleep = time.sleep if sleep is None else sleep

        def make(limits: tuple[Limit, ...]) -> Limiter:
            return Limiter(limits, self.store, clock=clock, failure=failure,
                           fallback_share=fallback_share)

        self.engine: _Engine[Limiter] = _Engine(self.policy, make, failure)

    @property
    def stats(self) -> dict[str, int]:
        """Counters: exempt, allowed, delayed, rejected, shadow-*, degraded."""
        return self.engine.stats

    def _decide(self, plan: Plan) -> Outcome:
        """Ask the limiter once, then refund or wait as the outcome says."""
        limiter = self.engine.limiters[plan.index]
        reservation: Reservation | None = None
        d: Decision
        if plan.reserve:
            reservation = limiter.reserve(plan.key, plan.cost)
            d = reservation.decision
        else:
            d = limiter.hit(plan.key, plan.cost)
        out = self.engine.outcome(plan, d)
        if out.action == "reject":
            if out.refund and reservation is not None:
                try:
                    reservation.cancel()
                except StoreError as e:
                    log.warning("could not refund a rejected reservation: %s", e)
        elif out.delay > 0:
            self._sleep(out.delay)
        return out


class WSGIRateLimitMiddleware(_SyncAdapter):
    """WSGI middleware applying an `HTTPPolicy` with a `Limiter` per set of limits.

    Arguments as for the ASGI `RateLimitMiddleware`, with a synchronous `Store` and a
    blocking `sleep` (default `time.sleep`; tests pass ``ManualClock.sleep`` or a recorder).
    """

    def __init__(
        self,
        app: WSGIApplication,
        policy: HTTPPolicy | Limit | Sequence[Limit] = (),
        *,
        store: Store | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
        failure: HTTPFailurePolicy = "open",
        fallback_share: float = 1.0,
    ) -> None:
        self.app = app
        super().__init__(policy, store=store, clock=clock, sleep=sleep, failure=failure,
                         fallback_share=fallback_share)

    def __repr__(self) -> str:
        return f"WSGIRateLimitMiddleware({self.app!r}, {self.policy!r})"

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        plan = self.engine.plan(RequestInfo.from_wsgi(environ))
        if plan is None:
            return self.app(environ, start_response)
        out = self._decide(plan)
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
