"""Each example app (examples/) is protected per client and globally: exercise all three.

Same scenario everywhere: per-client gcra 5/s burst 10, everyone 50/s burst 30, on a frozen
ManualClock. Client a gets 10 then 429 (per-client); b and c use up the global burst of 30;
d is refused by the global limit although its own quota is untouched.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from django.test import Client, override_settings

from ratekeeper.testing import ManualClock

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DJANGO_PROJECT = EXAMPLES / "django_project"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REPORT = "/report"

#: (path, API key) in order; see the module docstring.
PLAN = (
    [("/", "a")] * 11 + [("/", "b")] * 10 + [(REPORT, "c")] * 2 + [("/", "d"), ("/healthz", "d")]
)

Result = tuple[int, Any, bytes]  # status, headers (case-insensitive mapping), body


def check(results: list[Result]) -> None:
    codes = [status for status, _, _ in results]
    assert codes == [200] * 10 + [429] + [200] * 10 + [200, 200] + [429, 200]
    _, headers, body = results[10]
    assert json.loads(body)["policy"] == "per-client"
    assert headers["Retry-After"] == "1" and headers["Cache-Control"] == "no-store"
    assert headers["Content-Type"] == "application/problem+json"
    _, headers, body = results[23]
    assert json.loads(body)["policy"] == "everyone"  # d's own quota is untouched
    assert headers["RateLimit-Policy"] == (
        '"per-client";q=10;w=2, "everyone";q=30;w=1'
    )
    for status, headers, _ in results[:24]:
        assert "RateLimit" in headers, status
    assert "RateLimit" not in results[24][1]  # /healthz is exempt


async def test_fastapi_example() -> None:
    module = load("fastapi_app")
    app = module.create_app(clock=ManualClock(0.0))
    transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 1))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        results: list[Result] = []
        for path, key in PLAN:
            r = await c.get(path, headers={"X-API-Key": key})
            results.append((r.status_code, r.headers, r.content))
    check(results)

    # The per-endpoint dependency: /search also has its own 1/s, burst 3.
    app = module.create_app(clock=ManualClock(0.0))
    transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 1))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        rs = [await c.get("/search") for _ in range(4)]
    assert [r.status_code for r in rs] == [200, 200, 200, 429]
    assert rs[3].json()["policy"] == "search"
    assert rs[0].headers.get_list("RateLimit") == [
        '"search";r=2;t=1', '"per-client";r=9;t=1'
    ]


def test_flask_example() -> None:
    module = load("flask_app")
    app = module.create_app(clock=ManualClock(0.0))
    c = app.test_client()

    results: list[Result] = []
    for path, key in PLAN:
        r = c.get(path, headers={"X-API-Key": key})
        results.append((r.status_code, r.headers, r.data))
    check(results)


@pytest.fixture
def example_settings(django_configured: None) -> Any:
    sys.path.insert(0, str(DJANGO_PROJECT))
    try:
        settings = importlib.import_module("example_site.settings")
        yield settings
    finally:
        sys.path.remove(str(DJANGO_PROJECT))


def test_django_example(example_settings: Any) -> None:
    conf = dict(example_settings.RATEKEEPER, clock=ManualClock(0.0))
    with override_settings(
        ROOT_URLCONF=example_settings.ROOT_URLCONF,
        MIDDLEWARE=example_settings.MIDDLEWARE,
        RATEKEEPER=conf,
    ):
        c = Client(REMOTE_ADDR="203.0.113.7")

        results: list[Result] = []
        for path, key in PLAN:
            r = c.get("/report/" if path == REPORT else path, headers={"X-API-Key": key})
            results.append((r.status_code, r.headers, r.content))
    check(results)


def test_django_example_project_checks() -> None:
    """The project is runnable as shipped: ``manage.py check`` passes."""
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=DJANGO_PROJECT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout
