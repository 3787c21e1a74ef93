"""One decision, whatever the surface: `Limiter`, `AsyncLimiter`, the ASGI and the WSGI
middleware decide the same limit set through the same core, so the same requests at the
same instants get the same `Decision` (allowed, remaining, retry_after, reset_after, delay,
the deciding limit, degraded), on a healthy store and on one that is down under every
failure policy.

Each surface is a factory ``(limits, store, clock, failure, share) -> decide(key, cost)``.
The decision service's HTTP and gRPC surfaces join `SURFACES` (see the marked place) once
they decide through the core too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest

from ratekeeper import AsyncLimiter, Decision, Limit, Limiter, MemoryStore, StoreUnavailable
from ratekeeper.http import HTTPPolicy, RateLimitMiddleware, WSGIRateLimitMiddleware
from ratekeeper.stores._base import Check
from ratekeeper.testing import ManualClock

Decide = Callable[[str, float], Decision]
Surface = Callable[[Sequence[Limit], Any, ManualClock, str, float], Decide]

# Per-key and global limits decided together, with a queueing one so `delay` is exercised.
LIMITS = (
    Limit("gcra", "2/s", burst=3, name="per-client"),
    Limit("leaky-bucket", "4r/s", burst=2, name="queue"),
    Limit("fixed-window", "12/minute", name="everyone", scope="global"),
)

# (seconds since the start, key, cost): bursts, a cost of 2, a second key, idle gaps,
# rejections by the per-key and by the global limit.
STEPS = [
    (0.0, "alice", 1), (0.0, "alice", 1), (0.0, "alice", 1), (0.0, "alice", 1),
    (0.1, "bob", 2), (0.1, "bob", 1), (0.3, "alice", 1), (0.5, "alice", 2),
    (1.0, "bob", 1), (1.0, "bob", 1), (1.2, "alice", 1), (2.0, "alice", 1),
    (2.0, "bob", 1), (2.5, "carol", 1), (3.0, "carol", 1), (3.0, "alice", 1),
    (4.0, "bob", 2), (10.0, "alice", 1), (61.0, "alice", 1), (61.0, "bob", 1),
]

START = 86400.0  # a whole number of minutes: the fixed window starts here


def _sync_limiter(limits: Sequence[Limit], store: Any, clock: ManualClock, failure: str,
                  share: float) -> Decide:
    lim = Limiter(limits, store, clock=clock, failure=failure,  # type: ignore[arg-type]
                  fallback_share=share)
    return lim.hit


def _async_limiter(limits: Sequence[Limit], store: Any, clock: ManualClock, failure: str,
                   share: float) -> Decide:
    lim = AsyncLimiter(limits, store, clock=clock, failure=failure,  # type: ignore[arg-type]
                       fallback_share=share)
    return lambda key, cost: asyncio.run(lim.hit(key, cost))


def _policy(limits: Sequence[Limit], seen: list[Decision]) -> HTTPPolicy:
    """Key and cost from request headers; every decision the middleware makes lands in
    `seen` (the `on_decision` hook sees it, rejected or not)."""
    return HTTPPolicy(
        limits=limits,
        key=lambda r: r.headers["x-client"],
        cost=lambda r: float(r.headers["x-cost"]),
        on_decision=lambda r, d, verdict: seen.append(d),
    )


def _asgi(limits: Sequence[Limit], store: Any, clock: ManualClock, failure: str,
          share: float) -> Decide:
    seen: list[Decision] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def no_wait(seconds: float) -> None:
        pass

    mw = RateLimitMiddleware(app, _policy(limits, seen), store=store, clock=clock,
                             sleep=no_wait, failure=failure,  # type: ignore[typeddict-item]
                             fallback_share=share)

    async def request(key: str, cost: float) -> None:
        scope = {"type": "http", "method": "GET", "path": "/", "client": ("127.0.0.1", 1),
                 "headers": [(b"x-client", key.encode()), (b"x-cost", str(cost).encode())]}

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        async def send(message: Any) -> None:
            pass

        await mw(scope, receive, send)

    def decide(key: str, cost: float) -> Decision:
        asyncio.run(request(key, cost))
        return seen.pop()

    return decide


def _wsgi(limits: Sequence[Limit], store: Any, clock: ManualClock, failure: str,
          share: float) -> Decide:
    seen: list[Decision] = []

    def app(environ: Any, start_response: Any) -> Iterable[bytes]:
        start_response("200 OK", [])
        return [b"ok"]

    mw = WSGIRateLimitMiddleware(app, _policy(limits, seen), store=store, clock=clock,
                                 sleep=lambda s: None, failure=failure,  # type: ignore[typeddict-item]
                                 fallback_share=share)

    def decide(key: str, cost: float) -> Decision:
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "127.0.0.1",
                   "HTTP_X_CLIENT": key, "HTTP_X_COST": str(cost)}
        b"".join(mw(environ, lambda status, headers, exc_info=None: None))  # type: ignore[arg-type]
        return seen.pop()

    return decide


#: Every way to ask for a decision. The decision service's surfaces go here, e.g.
#: ``pytest.param(_service_http, id="service-http")`` and ``pytest.param(_service_grpc,
#: id="service-grpc")``: factories with the same signature that start the service on the
#: given store and clock (loopback only) and return its decision for (key, cost).
SURFACES: list[Any] = [
    pytest.param(_sync_limiter, id="Limiter"),
    pytest.param(_async_limiter, id="AsyncLimiter"),
    pytest.param(_asgi, id="asgi"),
    pytest.param(_wsgi, id="wsgi"),
]


class DownStore(MemoryStore):
    """A store whose every decision fails as if Redis were unreachable."""

    def decide_one(self, limit: Limit, key: str, cost: float, now: float) -> Decision:
        raise StoreUnavailable("connection refused (test)")

    def decide(self, checks: Sequence[Check], now: float, consume: bool = True) -> Any:
        raise StoreUnavailable("connection refused (test)")

    def refund(self, checks: Sequence[Check], now: float, at: float) -> None:
        raise StoreUnavailable("connection refused (test)")


def replay(surface: Surface, store: Any, failure: str = "open", share: float = 1.0,
           limits: Sequence[Limit] = LIMITS) -> list[Decision]:
    clock = ManualClock(START)
    decide = surface(limits, store, clock, failure, share)
    out = []
    for t, key, cost in STEPS:
        clock.set(START + t)
        out.append(decide(key, cost))
    return out


def test_the_steps_exercise_every_kind_of_decision() -> None:
    # The comparison below is only as good as the sequence: make sure it has admissions,
    # queueing delays and rejections by a per-key and by the global limit.
    ds = replay(_sync_limiter, MemoryStore())
    assert any(d.allowed and d.delay == 0 for d in ds)
    assert any(d.allowed and d.delay > 0 for d in ds)
    rejected_by = {d.limit.name for d in ds if not d.allowed}  # type: ignore[union-attr]
    assert {"per-client", "everyone"} <= rejected_by


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("limits", [LIMITS, LIMITS[:1]], ids=["composite", "one-limit"])
def test_every_surface_decides_as_the_limiter_on_a_memory_store(
        surface: Surface, limits: Sequence[Limit]) -> None:
    assert replay(surface, MemoryStore(), limits=limits) == \
        replay(_sync_limiter, MemoryStore(), limits=limits)


def test_surfaces_taking_turns_on_one_store_decide_as_one_limiter() -> None:
    # One MemoryStore, one clock; request i goes through surface i mod 4. Since every
    # surface decides through the same core on the same state, the sequence is the one a
    # lone Limiter produces.
    store, clock = MemoryStore(), ManualClock(START)
    surfaces = [p.values[0] for p in SURFACES]
    deciders = [s(LIMITS, store, clock, "open", 1.0) for s in surfaces]
    got = []
    for i, (t, key, cost) in enumerate(STEPS):
        clock.set(START + t)
        got.append(deciders[i % len(deciders)](key, cost))
    assert got == replay(_sync_limiter, MemoryStore())


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(("failure", "share"), [("open", 1.0), ("closed", 1.0),
                                                ("local", 1.0), ("local", 0.5)])
def test_with_the_store_down_every_surface_gives_the_failure_policys_decision(
        surface: Surface, failure: str, share: float) -> None:
    got = replay(surface, DownStore(), failure, share)
    assert got == replay(_sync_limiter, DownStore(), failure, share)
    assert all(d.degraded for d in got)
    if failure == "open":
        assert all(d.allowed for d in got)
    elif failure == "closed":
        assert not any(d.allowed for d in got)
    else:  # the local fallback really limits: some admitted, some not
        assert any(d.allowed for d in got) and not all(d.allowed for d in got)
