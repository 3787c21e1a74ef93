"""Malformed forwarding headers through the middleware: never crash, never widen.

"Never widen" is checked behaviourally: with a 1-per-minute limit, a client whose first
request was admitted must be refused on its second, whatever (different) garbage it puts in
X-Forwarded-For / Forwarded / X-API-Key the second time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratekeeper import Limit
from ratekeeper.http import ClientIP, HTTPPolicy, RateLimitMiddleware, WSGIRateLimitMiddleware
from ratekeeper.testing import ManualClock

ONE = Limit("fixed-window", "1/minute", name="one")
latin1 = st.text(st.characters(min_codepoint=0, max_codepoint=255), max_size=2000)
garbage = st.one_of(
    latin1,
    st.lists(st.one_of(st.ip_addresses().map(str), latin1, st.just("unknown")), max_size=50)
    .map(", ".join),
    st.integers(1, 50).map(lambda n: ", ".join(["10.0.0.1"] * n)),  # many trusted hops
    st.integers(1, 20).map(lambda n: "1.1.1.1, " * 10000 * n),  # huge
)


def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


def wsgi_status(mw: WSGIRateLimitMiddleware, peer: str, headers: dict[str, str]) -> int:
    env: dict[str, Any] = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": peer}
    env.update({"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()})
    seen: list[str] = []
    b"".join(mw(env, lambda s, h, e=None: seen.append(s)))  # type: ignore[arg-type]
    return int(seen[0][:3])


def middleware(header: str = "x-forwarded-for") -> WSGIRateLimitMiddleware:
    policy = HTTPPolicy(limits=ONE, client_ip=ClientIP(["10.0.0.0/8"], header=header))  # type: ignore[arg-type]
    return WSGIRateLimitMiddleware(app, policy, clock=ManualClock(0.0))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=garbage, second=garbage, fwd1=garbage, fwd2=garbage)
def test_untrusted_peer_cannot_escape_its_limit(
    first: str, second: str, fwd1: str, fwd2: str
) -> None:
    for header in ("x-forwarded-for", "forwarded"):
        mw = middleware(header)
        h1 = {"x-forwarded-for": first, "forwarded": fwd1}
        h2 = {"x-forwarded-for": second, "forwarded": fwd2}
        assert wsgi_status(mw, "203.0.113.7", h1) == 200
        assert wsgi_status(mw, "203.0.113.7", h2) == 429


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=garbage, second=garbage)
def test_forged_prefix_behind_a_trusted_proxy_cannot_escape(first: str, second: str) -> None:
    mw = middleware()
    # The proxy (10.0.0.2) appends the real client's address to whatever the client sent.
    h1 = {"x-forwarded-for": f"{first}, 198.51.100.1"}
    h2 = {"x-forwarded-for": f"{second}, 198.51.100.1"}
    assert wsgi_status(mw, "10.0.0.2", h1) == 200
    assert wsgi_status(mw, "10.0.0.2", h2) == 429


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(st.tuples(st.sampled_from([b"x-forwarded-for", b"forwarded",
                                                  b"x-api-key", b"host"]),
                                 st.binary(max_size=3000)), max_size=6),
       peer=st.one_of(st.just("10.0.0.2"), st.ip_addresses().map(str), st.text(max_size=50)))
def test_asgi_raw_header_bytes_never_crash(values: list[tuple[bytes, bytes]], peer: str) -> None:
    statuses: list[int] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])
            for name, value in message["headers"]:
                name.decode("ascii")
                value.decode("latin-1")

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    mw = RateLimitMiddleware(inner, HTTPPolicy(limits=ONE, client_ip=ClientIP(["10.0.0.0/8"])),
                             clock=ManualClock(0.0))
    scope = {"type": "http", "method": "GET", "path": "/", "headers": values,
             "client": (peer, 1)}
    asyncio.run(mw(scope, receive, send))
    asyncio.run(mw(dict(scope), receive, send))
    assert statuses == [200, 429]  # same request twice: same key, whatever the bytes
