"""The Django middleware through Django's test client, configured from settings."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.test import Client, override_settings

from ratekeeper import Limit
from ratekeeper.http import APIKey, ClientIP, HTTPPolicy, RequestInfo
from ratekeeper.http.django import RateLimitMiddleware, django_user
from ratekeeper.testing import ManualClock
from tests.http.conftest import DownStore, Sleeps

pytestmark = pytest.mark.usefixtures("django_configured")

MW = "ratekeeper.http.django.RateLimitMiddleware"
PER_KEY = Limit("fixed-window", "2/minute", name="per-client")
GLOBAL = Limit("fixed-window", "3/minute", name="everyone", scope="global")

# A policy importable by dotted path, as a settings file would name it.
DOTTED_POLICY = HTTPPolicy(limits=PER_KEY, exempt_paths=["/healthz"])


@pytest.fixture
def configure(clock: ManualClock) -> Iterator[Any]:
    stack: list[Any] = []

    def apply(**ratekeeper: Any) -> Any:
        ratekeeper.setdefault("clock", clock)
        o = override_settings(MIDDLEWARE=[MW], RATEKEEPER=ratekeeper)
        o.enable()
        stack.append(o)
        return Client(REMOTE_ADDR="203.0.113.7")

    yield apply
    for o in reversed(stack):
        o.disable()


def test_django_headers_and_rejection(configure: Any) -> None:
    c = configure(policy=HTTPPolicy(limits=PER_KEY, exempt_paths=["/healthz"]))
    ok = c.get("/")
    c.get("/")
    rejected = c.get("/")
    health = c.get("/healthz")
    assert ok.status_code == 200
    assert ok["RateLimit-Policy"] == '"per-client";q=2;w=60'
    assert ok["RateLimit"] == '"per-client";r=1;t=60'
    assert rejected.status_code == 429
    assert rejected["Retry-After"] == "60"
    assert rejected["Cache-Control"] == "no-store"
    assert rejected["Content-Type"] == "application/problem+json"
    assert json.loads(rejected.content)["policy"] == "per-client"
    assert health.status_code == 200 and not health.has_header("RateLimit")


def test_django_per_key_and_global(configure: Any) -> None:
    c = configure(policy=HTTPPolicy(limits=[PER_KEY, GLOBAL], key=APIKey()))
    a = [c.get("/", headers={"X-API-Key": "a"}).status_code for _ in range(3)]
    b = [c.get("/", headers={"X-API-Key": "b"}).status_code for _ in range(2)]
    assert a == [200, 200, 429] and b == [200, 429]


def test_django_trusted_proxies(configure: Any) -> None:
    c = configure(policy=HTTPPolicy(limits=PER_KEY, client_ip=ClientIP(["10.0.0.0/8"])))
    forged = [c.get("/", headers={"X-Forwarded-For": f"198.51.100.{i}"}).status_code
              for i in range(3)]
    assert forged == [200, 200, 429]
    proxied = [
        c.get("/", headers={"X-Forwarded-For": f"198.51.100.{i % 2}"},
              REMOTE_ADDR="10.0.0.2").status_code
        for i in range(6)
    ]
    assert proxied == [200, 200, 200, 200, 429, 429]


def test_django_dotted_path_and_list_policies(configure: Any) -> None:
    c = configure(policy="tests.http.test_django.DOTTED_POLICY")
    assert [c.get("/").status_code for _ in range(3)] == [200, 200, 429]
    assert c.get("/healthz").status_code == 200
    c = configure(policy=[Limit("fixed-window", "1/minute", name="one")])
    assert [c.get("/").status_code for _ in range(2)] == [200, 429]


def test_django_queueing(configure: Any, sleeps: Sleeps) -> None:
    c = configure(policy=Limit("leaky-bucket", "1r/s", burst=5, name="queue"), sleep=sleeps)
    rs = [c.get("/") for _ in range(7)]
    assert [r.status_code for r in rs] == [200] * 6 + [429]
    assert [json.loads(r.content)["delay"] for r in rs[:6]] == [0, 1, 2, 3, 4, 5]
    assert sleeps.calls == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_django_store_failure(configure: Any) -> None:
    c = configure(policy=PER_KEY, store=DownStore(), failure="closed")
    r = c.get("/")
    assert r.status_code == 429 and r["X-RateLimit-Degraded"] == "closed"


def test_django_refuses_failure_raise(configure: Any) -> None:
    c = configure(policy=PER_KEY, store=DownStore(), failure="raise")
    with pytest.raises(ImproperlyConfigured, match=r"settings.RATEKEEPER: failure='raise'"):
        c.get("/")


def test_django_key_by_user() -> None:
    class FakeUser:
        is_authenticated = True
        pk = 42

    class Anonymous:
        is_authenticated = False

    req = HttpRequest()
    info = RequestInfo("GET", "/", {}, "1.2.3.4", req)
    assert django_user(info) is None
    req.user = Anonymous()  # type: ignore[attr-defined]
    assert django_user(info) is None
    req.user = FakeUser()  # type: ignore[attr-defined]
    assert django_user(info) == "user:42"


@pytest.mark.parametrize(
    ("conf", "match"),
    [(None, "needs settings.RATEKEEPER"), ({"store": None}, "needs"),
     ({"policy": PER_KEY, "stroe": None}, "unknown keys")],
)
def test_django_misconfiguration(conf: Any, match: str) -> None:
    with override_settings(RATEKEEPER=conf), pytest.raises(ImproperlyConfigured, match=match):
        RateLimitMiddleware(lambda r: r)
