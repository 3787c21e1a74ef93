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

Per request: one decision through the core (`ratekeeper.core`, its plan run with
``core.arun``); rejected requests get the policy's status (429) with
Retry-After, the RateLimit fields, ``Cache-Control: no-store`` and a problem+json body;
admitted ones get the RateLimit fields added to whatever the app sends (``send`` is wrapped),
after waiting out any queueing delay (``await sleep(delay)``). Lifespan messages, and
websocket handshakes unless ``HTTPPolicy(websockets=True)``, pass through untouched. The
decision is left in ``scope["ratekeeper.decision"]`` for the app to read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ..core import arun
from ..policy._request import RequestInfo
from ..stores import AsyncStore
from ._policy import Outcome, _Kind, _Middleware

__all__ = ["RateLimitMiddleware"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The scope key under which the middleware leaves the request's `Decision`.
SCOPE_KEY = "ratekeeper.decision"


def _raw(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]


#: The asyncio adapters (this middleware, the FastAPI dependency): plans run by `core.arun`.
ASYNC = _Kind(AsyncStore, asyncio.sleep,
              "the WSGI and Django adapters take a synchronous Store")

AsyncSleep = Callable[[float], Awaitable[None]]


class RateLimitMiddleware(_Middleware[ASGIApp, AsyncStore, AsyncSleep]):
    """ASGI middleware applying an `HTTPPolicy` through the decision core, awaited.

    - `policy`: an `HTTPPolicy`, or simply a `Limit` / list of limits for every request.
    - `store`: any `AsyncStore` (default: a new in-process `MemoryStore`; use the Redis store
      to share limits between workers).
    - `clock` / `sleep`: injected time (tests pass a `ManualClock` and a recording sleep).
    - `failure`, `fallback_share`: the store failure policy: ``"open"`` (admit),
      ``"closed"`` (reject) or ``"local"`` (an in-process share); never a 500. Degraded
      decisions are marked with the policy's `degraded_header` and counted in `stats`.
      ``"raise"`` is refused: a middleware must answer every request.
    """

    _kind = ASYNC

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and not (kind == "websocket" and self.websockets):
            await self.app(scope, receive, send)  # lifespan, websockets, anything new
            return
        out = await arun(self.engine.handle(RequestInfo.from_asgi(scope)))
        if out is None:  # not limited
            await self.app(scope, receive, send)
            return
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
