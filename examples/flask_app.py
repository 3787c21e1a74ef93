"""A Flask app protected per client AND globally, with flask-limiter's decorators.

Install:  pip install -e '.[examples]'
Run it:   flask --app examples/flask_app.py run      (or: python examples/flask_app.py)
Try it:   for i in $(seq 12); do curl -si localhost:5000/ | head -1; done

The same policy as the FastAPI example: 5 requests/s (bursts of 10) per client -- keyed by
a known ``X-API-Key`` (one of API_KEYS), else the IP address, so invented keys get no quota
of their own -- and 50/s (bursts of 30) for everyone, decided together; ``/report`` costs
5; ``/healthz`` is never limited. Written as a flask-limiter user writes it
(``Limiter(app)``, ``@limiter.limit``, ``@limiter.exempt``: docs/migration.md), decided by
the engine the WSGI middleware uses. The decision is in
``request.environ["ratekeeper.decision"]``.

Client addresses: the Werkzeug server and gunicorn's sync workers pass the TCP peer as
REMOTE_ADDR whatever X-Forwarded-For says; behind a proxy, list it in TRUSTED_PROXIES (and
do not also add Werkzeug's ProxyFix: one layer resolves the client). See docs/http.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Flask, request

from ratekeeper import Limit, Store
from ratekeeper.http import APIKey, ClientIP, HTTPPolicy
from ratekeeper.http.flask import Limiter

TRUSTED_PROXIES: list[str] = []  # e.g. ["10.0.0.0/8"] behind a load balancer
#: The keys you issued (in a real app: a fast lookup in your own store).
API_KEYS = frozenset({"demo-key-1", "demo-key-2", "demo-key-3"})

PER_CLIENT = Limit("gcra", "5/s", burst=10, name="per-client")
EVERYONE = Limit("gcra", "50/s", burst=30, name="everyone", scope="global")

POLICY = HTTPPolicy(
    limits=[PER_CLIENT, EVERYONE],
    key=APIKey("x-api-key", valid=API_KEYS.__contains__),  # else: per client IP
    client_ip=ClientIP(TRUSTED_PROXIES),
)


def create_app(
    *, clock: Callable[[], float] | None = None, store: Store | None = None
) -> Flask:
    """The app; tests pass a ManualClock (and, for several processes, a Redis store)."""
    app = Flask(__name__)
    limiter = Limiter(app, policy=POLICY, clock=clock, store=store)

    @app.get("/")
    def index() -> dict[str, Any]:
        d = request.environ.get("ratekeeper.decision")
        return {"hello": "world", "remaining": d.remaining if d else None}

    @app.get("/report")
    @limiter.limit([PER_CLIENT, EVERYONE], key="key", cost=5, mode="replace")
    def report() -> dict[str, str]:
        return {"report": "expensive"}

    @app.get("/healthz")
    @limiter.exempt
    def healthz() -> dict[str, str]:
        return {"status": "ok"}
    return app


app = create_app()

if __name__ == "__main__":
    app.run(host="127.0.0.1", port=5000)
