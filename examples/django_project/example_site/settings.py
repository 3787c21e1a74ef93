"""Settings of the minimal example project: no database, one app-less URLconf.

The rate limit lives in RATEKEEPER (read by ratekeeper.http.django.RateLimitMiddleware):
5 requests/s (bursts of 10) per client -- keyed by a known ``X-API-Key`` (one of API_KEYS),
else the IP address, so invented keys get no quota of their own -- and 50/s (bursts of 30)
for everyone, decided together; ``/report/`` costs 5; ``/healthz`` is never limited. With
auth, key by user instead: ``key=django_user`` (from ratekeeper.http.django).

Client addresses: REMOTE_ADDR is the TCP peer under runserver and gunicorn's sync workers;
behind a proxy, list it in TRUSTED_PROXIES. Under uvicorn, run it with
``--no-proxy-headers`` (see docs/http.md, "Trusted proxies").
"""

from __future__ import annotations

from ratekeeper import Limit
from ratekeeper.http import APIKey, ClientIP, HTTPPolicy, Route

SECRET_KEY = "example-only-change-me"  # an example project: never reuse
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
INSTALLED_APPS: list[str] = []
DATABASES: dict[str, object] = {}
ROOT_URLCONF = "example_site.urls"
USE_TZ = True

MIDDLEWARE = [
    "django.middleware.common.CommonMiddleware",
    "ratekeeper.http.django.RateLimitMiddleware",
]

TRUSTED_PROXIES: list[str] = []  # e.g. ["10.0.0.0/8"] behind a load balancer
#: The keys you issued (in a real app: a fast lookup in your own store).
API_KEYS = frozenset({"demo-key-1", "demo-key-2", "demo-key-3"})

PER_CLIENT = Limit("gcra", "5/s", burst=10, name="per-client")
EVERYONE = Limit("gcra", "50/s", burst=30, name="everyone", scope="global")

RATEKEEPER = {
    "policy": HTTPPolicy(
        limits=[PER_CLIENT, EVERYONE],
        routes=[Route("/report/", [PER_CLIENT, EVERYONE], cost=5)],
        key=APIKey("x-api-key", valid=API_KEYS.__contains__),  # else: per client IP
        client_ip=ClientIP(TRUSTED_PROXIES),
        exempt_paths=["/healthz"],
    ),
    # "store": RedisStore(...),   share limits between worker processes
    # "failure": "open",          what to do when the store is down
}
