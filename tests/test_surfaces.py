"""One decision, whatever the surface: `Limiter`, `AsyncLimiter`, the ASGI and the WSGI
middleware decide the same limit set through the same core, so the same requests at the
same instants get the same `Decision` (allowed, remaining, retry_after, reset_after, delay,
the deciding limit, degraded), on a healthy store and on one that is down under every
failure policy.

Each surface is a factory ``(limits, store, clock, failure, share) -> decide(key, cost)``.
The decision service joins as two surfaces: its HTTP JSON API (the Starlette app, in
process) and Envoy's gRPC protocol (a real grpc.aio server on loopback, called through a
channel). The service keys a counter by its descriptor (``client=alice``), so it gets a
store of its own in the taking-turns test; gRPC carries only the verdict and the remaining
quota (0 when over the limit, as Envoy's protocol has it), so that surface is compared on
those.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from ratekeeper import AsyncLimiter, Decision, Limit, Limiter, MemoryStore, StoreUnavailable
from ratekeeper._json import decision_json
from ratekeeper.http import HTTPPolicy, RateLimitMiddleware, WSGIRateLimitMiddleware
from ratekeeper.service import PolicyHolder, Service, create_app
from ratekeeper.service._grpc import start_grpc_server
from ratekeeper.service.proto.envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from ratekeeper.service.proto.envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
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


# -- the decision service --------------------------------------------------------------------


def _policies_toml(limits: Sequence[Limit], failure: str, share: float) -> str:
    """The service's policies for `limits`: domain ``d``, descriptor key ``client``."""
    lines = ["[service]", f'failure = "{failure}"', "max_cost = 100"]
    if failure == "local":
        lines.append(f"fallback_share = {share}")
    for lim in limits:
        rate = lim.rate
        lines += ["", f"[domains.d.limits.{lim.name}]", f'algorithm = "{lim.algorithm}"',
                  f'rate = "{rate.amount:g}/{rate.period:g}s"']  # type: ignore[union-attr]
        if lim.burst is not None and lim.algorithm != "fixed-window":
            lines.append(f"burst = {lim.burst:g}")
        if lim.scope == "global":
            lines.append('scope = "global"')
    names = ", ".join(f'"{lim.name}"' for lim in limits)
    lines += ["", "[[domains.d.descriptors]]", 'key = "client"', f"limits = [{names}]"]
    return "\n".join(lines) + "\n"


def _service(limits: Sequence[Limit], store: Any, clock: ManualClock, failure: str,
             share: float) -> Service:
    path = POLICY_DIR / f"{uuid.uuid4().hex}.toml"
    path.write_text(_policies_toml(limits, failure, share), encoding="utf-8")
    return Service(PolicyHolder(path), store, clock=clock)


def _service_decision(body: dict[str, Any]) -> Decision:
    """The `Decision` a ``/v1/check`` answer carries (its JSON form, rounded to the ns)."""
    d = body["decision"]
    # The service names a domain's limits DOMAIN.NAME (limits of two domains never share
    # state); the limit is the one of that name here.
    limit = next(lim for lim in LIMITS if f"d.{lim.name}" == d["limit"])
    return Decision(d["allowed"], d["remaining"], float(d["retry_after"]) if
                    d["retry_after"] is not None else None, float(d["reset_after"]),
                    float(d["delay"]), limit, body["degraded"])


def _service_http(limits: Sequence[Limit], store: Any, clock: ManualClock, failure: str,
                  share: float) -> Decide:
    app = create_app(_service(limits, store, clock, failure, share))

    async def post(key: str, cost: float) -> dict[str, Any]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rk") as c:
            r = await c.post("/v1/check", json={"domain": "d", "descriptors": [{"client": key}],
                                                "cost": cost})
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out

    return lambda key, cost: _service_decision(asyncio.run(post(key, cost)))


class _GrpcServer:
    """The service's grpc.aio server on a loopback port, its loop on a thread of its own."""

    def __init__(self, service: Service) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server, port = asyncio.run_coroutine_threadsafe(
            start_grpc_server(service, "127.0.0.1", 0), self.loop).result(timeout=30)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = rls_pb2_grpc.RateLimitServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()
        asyncio.run_coroutine_threadsafe(self.server.stop(None), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
        self.loop.close()


GRPC_SERVERS: list[_GrpcServer] = []


def _service_grpc(limits: Sequence[Limit], store: Any, clock: ManualClock, failure: str,
                  share: float) -> Decide:
    server = _GrpcServer(_service(limits, store, clock, failure, share))
    GRPC_SERVERS.append(server)

    def decide(key: str, cost: float) -> Decision:
        entry = ratelimit_pb2.RateLimitDescriptor.Entry(key="client", value=key)
        req = rls_pb2.RateLimitRequest(domain="d", hits_addend=int(cost), descriptors=[
            ratelimit_pb2.RateLimitDescriptor(entries=[entry])])
        resp = server.stub.ShouldRateLimit(req, timeout=30)
        allowed = resp.overall_code == rls_pb2.RateLimitResponse.OK
        # gRPC says the verdict and the quota left; the rest is compared over HTTP.
        return Decision(allowed, resp.statuses[0].limit_remaining, None, 0.0, 0.0)

    return decide


def _verdict(d: Decision) -> tuple[bool, int]:
    # Envoy's protocol says 0 left for an over-limit status (as envoyproxy/ratelimit), so a
    # rejection is compared on its verdict alone.
    return d.allowed, d.remaining if d.allowed else 0


#: Every way to ask for a decision: factories that make a surface on the given store and
#: clock (loopback only) and return its decision for (key, cost).
SURFACES: list[Any] = [
    pytest.param(_sync_limiter, id="Limiter"),
    pytest.param(_async_limiter, id="AsyncLimiter"),
    pytest.param(_asgi, id="asgi"),
    pytest.param(_wsgi, id="wsgi"),
    pytest.param(_service_http, id="service-http"),
    pytest.param(_service_grpc, id="service-grpc"),
]

#: Surfaces that decide on the library's keys (the service keys by descriptor).
LIBRARY_SURFACES = SURFACES[:4]
POLICY_DIR = Path()


@pytest.fixture(autouse=True)
def _service_files(tmp_path: Path) -> Iterator[None]:
    global POLICY_DIR  # noqa: PLW0603  (the factories' signature has no room for a path)
    POLICY_DIR = tmp_path
    yield
    while GRPC_SERVERS:
        GRPC_SERVERS.pop().close()


def same(surface: Surface, got: list[Decision], want: list[Decision]) -> None:
    """`got` is `want`: whole decisions; over the service's HTTP API as their JSON form (times
    to the nanosecond) with `degraded`; over gRPC the verdict and the quota left."""
    if surface is _service_grpc:
        assert [_verdict(d) for d in got] == [_verdict(d) for d in want]
    elif surface is _service_http:
        assert [(decision_json(d), d.degraded) for d in got] == \
            [(decision_json(d), d.degraded) for d in want]
    else:
        assert got == want


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
    same(surface, replay(surface, MemoryStore(), limits=limits),
         replay(_sync_limiter, MemoryStore(), limits=limits))


def test_surfaces_taking_turns_on_one_store_decide_as_one_limiter() -> None:
    # One MemoryStore, one clock; request i goes through surface i mod 4. Since every
    # surface decides through the same core on the same state, the sequence is the one a
    # lone Limiter produces.
    store, clock = MemoryStore(), ManualClock(START)
    surfaces = [p.values[0] for p in LIBRARY_SURFACES]
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
    same(surface, got, replay(_sync_limiter, DownStore(), failure, share))
    assert surface is _service_grpc or all(d.degraded for d in got)
    if failure == "open":
        assert all(d.allowed for d in got)
    elif failure == "closed":
        assert not any(d.allowed for d in got)
    else:  # the local fallback really limits: some admitted, some not
        assert any(d.allowed for d in got) and not all(d.allowed for d in got)
