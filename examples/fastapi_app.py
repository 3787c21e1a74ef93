"""A FastAPI app protected per client AND globally, with a per-endpoint limit.

Install:  pip install -e '.[examples]'
Run it:   uvicorn examples.fastapi_app:app --no-proxy-headers   (or: python examples/fastapi_app.py)
Try it:   for i in $(seq 12); do curl -si localhost:8000/ | head -1; done

- A request with a known API key (``X-API-Key``, one of API_KEYS) is limited per key; any
  other request -- no key, or a key nobody issued -- per client IP. Anyone can invent keys,
  so an unchecked key would hand out a fresh quota per invented value. Each client gets 5
  requests/s with bursts of 10; everyone together gets 50/s with bursts of 30. Both limits
  are decided together: a request refused by one is charged to neither.
- ``/report`` costs 5 units of those same limits; ``/search`` also has its own 1/s limit
  (slowapi's ``@limiter.limit`` decorator, per client IP); ``/healthz`` is never limited.

Client addresses (see "Trusted proxies" in docs/http.md): exactly one layer may read
X-Forwarded-For. Here it is ratekeeper, so the server must not:

- uvicorn: ``--no-proxy-headers``. Without it uvicorn believes X-Forwarded-For from its
  ``--forwarded-allow-ips`` (default 127.0.0.1 and ::1, or $FORWARDED_ALLOW_IPS) and rewrites
  the peer address, so any local client picks its own key.
- gunicorn with a uvicorn worker: the worker reads gunicorn's ``--forwarded-allow-ips``
  (same default) and has no switch to turn proxy headers off; either subclass the worker
  with ``CONFIG_KWARGS = {"proxy_headers": False}``, or let the server resolve the client
  instead: ``--forwarded-allow-ips=<your proxy's address>`` and TRUSTED_PROXIES empty.
- Behind a reverse proxy (with ``--no-proxy-headers``), list the proxy's address in
  TRUSTED_PROXIES so its X-Forwarded-For is believed, and ONLY then. Never "0.0.0.0/0".
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request

from ratekeeper import AsyncStore, Limit
from ratekeeper.http import APIKey, ClientIP, HTTPPolicy, RateLimitMiddleware, Route
from ratekeeper.http.fastapi import Limiter, install_problem_handler

TRUSTED_PROXIES: list[str] = []  # e.g. ["10.0.0.0/8"] behind a load balancer
#: The keys you issued. In a real app, look the key up in your own store (`valid` runs on
#: every request: keep it fast, e.g. a cached set).
API_KEYS = frozenset({"demo-key-1", "demo-key-2", "demo-key-3"})

PER_CLIENT = Limit("gcra", "5/s", burst=10, name="per-client")
EVERYONE = Limit("gcra", "50/s", burst=30, name="everyone", scope="global")
SEARCH = Limit("gcra", "1/s", burst=3, name="search")

POLICY = HTTPPolicy(
    limits=[PER_CLIENT, EVERYONE],
    routes=[Route("/report", [PER_CLIENT, EVERYONE], cost=5)],
    key=APIKey("x-api-key", valid=API_KEYS.__contains__),  # else: per client IP
    client_ip=ClientIP(TRUSTED_PROXIES),
    exempt_paths=["/healthz"],
)


def create_app(
    *, clock: Callable[[], float] | None = None, store: AsyncStore | None = None
) -> FastAPI:
    """The app; tests pass a ManualClock (and, for several workers, a Redis store)."""
    app = FastAPI(title="ratekeeper example")
    install_problem_handler(app)
    # The decorators' limiter: no defaults of its own (the middleware decides those).
    limiter = Limiter(clock=clock, store=store)
    app.state.limiter = limiter

    @app.get("/")
    async def index() -> dict[str, str]:
        return {"hello": "world"}

    @app.get("/report")
    async def report() -> dict[str, str]:
        return {"report": "expensive"}

    @app.get("/search")
    @limiter.limit(SEARCH)  # as a slowapi app writes it; `request` is optional here
    async def search(request: Request, q: str = "") -> dict[str, str]:
        return {"q": q}

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    app.add_middleware(RateLimitMiddleware, policy=POLICY, clock=clock, store=store)
    return app


app = create_app()

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=8000, proxy_headers=False)  # see above
