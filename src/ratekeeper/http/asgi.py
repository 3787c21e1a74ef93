"""`RateLimitMiddleware`: rate limiting for any ASGI application (Starlette, FastAPI, ...).

A plain ASGI class, no framework needed::

    from ratekeeper import Limit
    from ratekeeper.http import ClientIP, HTTPPolicy, Route
    from ratekeeper.http.asgi import RateLimitMiddleware

    policy = HTTPPolicy(
        limits=[Limit("gcra", "10/s", burst=20, name="per-client"),
                Limit("gcra", "500/s", burst=1000, name="all", scope="global")],
        routes=[Route("/search", [Limit("gcra", "1/s", burst=5, name="search")], cost=1)],
        client_ip=ClientIP(trusted_proxies=["10.0.0.0/8"]),
        exempt_paths=["/healthz"],
    )
    app.add_middleware(RateLimitMiddleware, policy=policy)      # Starlette / FastAPI
    app = RateLimitMiddleware(app, policy)                       # any ASGI app

Per request: one `AsyncLimiter` call; rejected requests get the policy's status (429) with
Retry-After, the RateLimit fields, ``Cache-Control: no-store`` and a problem+json body;
admitted ones get the RateLimit fields added to whatever the app sends (``send`` is wrapped),
after waiting out any queueing delay (``await sleep(delay)``). Lifespan messages, and
websocket handshakes unless ``HTTPPolicy(websockets=True)``, pass through untouched. The
decision is left in ``scope["ratekeeper.decision"]`` for the app to read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from .._errors import StoreError
from .._types import Decision, Limit
from ..limiter import AsyncLimiter, AsyncReservation
from ..stores import AsyncStore, MemoryStore
from ._client import RequestInfo
from ._policy import HTTPFailurePolicy, HTTPPolicy, Outcome, Plan, _Engine

__all__ = ["RateLimitMiddleware"]

log = logging.getLogger("ratekeeper.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The scope key under which the middleware leaves the request's `Decision`.
SCOPE_KEY = "ratekeeper.decision"


def _raw(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]


class _AsyncAdapter:
    """The I/O of one request for asyncio adapters (the middleware and the FastAPI dependency)."""

    def __init__(
        self,
        policy: HTTPPolicy | Limit | Sequence[Limit],
        *,
        store: AsyncStore | None,
        clock: Callable[[], float] | None,
        sleep: Callable[[float], Awaitable[None]] | None,
        failure: HTTPFailurePolicy,
        fallback_share: float,
    ) -> None:
        self.policy = HTTPPolicy.of(policy)
        self.store: AsyncStore = MemoryStore() if store is None else store
        self._sleep = asyncio.sleep if sleep is None else sleep

        def make(limits: tuple[Limit, ...]) -> AsyncLimiter:
            return AsyncLimiter(limits, self.store, clock=clock, failure=failure,
                                fallback_share=fallback_share)

        self.engine: _Engine[AsyncLimiter] = _Engine(self.policy, make, failure)

    @property
    def stats(self) -> dict[str, int]:
        """Counters: exempt, allowed, delayed, rejected, shadow-*, degraded."""
        return self.engine.stats

    async def _decide(self, plan: Plan) -> tuple[Outcome, AsyncReservation | None]:
        limiter = self.engine.limiters[plan.index]
        reservation = None
        d: Decision
        if plan.reserve:
            reservation = await limiter.reserve(plan.key, plan.cost)
            d = reservation.decision
        else:
            d = await limiter.hit(plan.key, plan.cost)
        return self.engine.outcome(plan, d), reservation

    async def _settle(self, out: Outcome, reservation: AsyncReservation | None) -> None:
        """Refund a reservation rejected for waiting too long, or wait out the delay."""
        if out.action == "reject":
            if out.refund and reservation is not None:
                try:
                    await reservation.cancel()
                except StoreError as e:
                    log.warning("could not refund a rejected reservation: %s", e)
        elif out.delay > 0:
            await self._sleep(out.delay)


class RateLimitMiddleware(_AsyncAdapter):
    """ASGI middleware applying an `HTTPPolicy` with an `AsyncLimiter` per set of limits.

    - `policy`: an `HTTPPolicy`, or simply a `Limit` / list of limits for every request.
    - `store`: any `AsyncStore` (default: a new in-process `MemoryStore`; use the Redis store
      to share limits between workers).
    - `clock` / `sleep`: injected time (tests pass a `ManualClock` and a recording sleep).
    - `failure`, `fallback_share`: the limiter's store failure policy: ``"open"`` (admit),
      ``"closed"`` (reject) or ``"local"`` (an in-process share); never a 500. Degraded
      decisions are marked with the policy's `degraded_header` and counted in `stats`.
      ``"raise"`` is refused: a middleware must answer every request.
    """

    def __init__(
        self,
        app: ASGIApp,
        policy: HTTPPolicy | Limit | Sequence[Limit] = (),
        *,
        store: AsyncStore | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        failure: HTTPFailurePolicy = "open",
        fallback_share: float = 1.0,
    ) -> None:
        self.app = app
        super().__init__(policy, store=store, clock=clock, sleep=sleep, failure=failure,
                         fallback_share=fallback_share)

    def __repr__(self) -> str:
        return f"RateLimitMiddleware({self.app!r}, {self.policy!r})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and not (kind == "websocket" and self.policy.websockets):
            await self.app(scope, receive, send)  # lifespan, websockets, anything new
            return
        plan = self.engine.plan(RequestInfo.from_asgi(scope))
        if plan is None:
            await self.app(scope, receive, send)
            return
        out, reservation = await self._decide(plan)
        await self._settle(out, reservation)
        if out.action == "reject":
            if kind == "http":
                await self._reject_http(out, send)
            else:
                await self._reject_websocket(scope, out, receive, send)
            return
        scope[SCOPE_KEY] = out.decision
        extra = _raw(out.headers)
        start = "http.response.start" if kind == "http" else "websocket.accept"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == start:
                message = dict(message)
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    @staticmethod
    async def _reject_http(out: Outcome, send: Send) -> None:
        headers = _raw(out.headers)
        headers.append((b"content-length", str(len(out.body)).encode()))
        await send({"type": "http.response.start", "status": out.status, "headers": headers})
        await send({"type": "http.response.body", "body": out.body})

    @staticmethod
    async def _reject_websocket(scope: Scope, out: Outcome, receive: Receive, send: Send) -> None:
        message = await receive()
        if message.get("type") != "websocket.connect":
            return  # the client went away
        if "websocket.http.response" in (scope.get("extensions") or {}):
            headers = _raw(out.headers)
            headers.append((b"content-length", str(len(out.body)).encode()))
            await send({"type": "websocket.http.response.start", "status": out.status,
                        "headers": headers})
            await send({"type": "websocket.http.response.body", "body": out.body})
        else:
            # Closing before accepting makes the server answer the handshake with 403.
            await send({"type": "websocket.close", "code": 1008,
                        "reason": "rate limit exceeded"})
