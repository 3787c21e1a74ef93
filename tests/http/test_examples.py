"""Each example app (examples/) is protected per client and globally: exercise all three.

Same scenario everywhere: per-client gcra 5/s burst 10, everyone 50/s burst 30, on a frozen
ManualClock. Clients a, b and c hold the example's API keys; d sends none and is keyed by its
IP. a gets 10 then 429 (per-client); b and c use up the global burst of 30; d is refused by
the global limit although its own quota is untouched. Invented API keys get no quota of
their own (one IP's share at most), and the documented uvicorn command does not let a peer
choose its key with X-Forwarded-For.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import httpx
import pytest
from django.test import Client, override_settings
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ratekeeper import Limit
from ratekeeper.testing import ManualClock

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DJANGO_PROJECT = EXAMPLES / "django_project"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REPORT = "/report"



def plan(api_keys: frozenset[str]) -> list[tuple[str, str | None]]:
    """(path, API key or None) in order; see the module docstring."""
    a, b, c = sorted(api_keys)[:3]
    return ([("/", a)] * 11 + [("/", b)] * 10 + [(REPORT, c)] * 2
            + [("/", None), ("/healthz", None)])


def key_header(key: str | None) -> dict[str, str]:
    return {"X-API-Key": key} if key is not None else {}

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
        for path, key in plan(module.API_KEYS):
            r = await c.get(path, headers=key_header(key))
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
    for path, key in plan(module.API_KEYS):
        r = c.get(path, headers=key_header(key))
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
        for path, key in plan(example_settings.API_KEYS):
            r = c.get("/report/" if path == REPORT else path, headers=key_header(key))
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


# -- invented API keys ---------------------------------------------------------------------

RANDOM_KEY_REQUESTS = 200
STEP = 0.01  # seconds of ManualClock between requests


def one_client_share(limit: Limit, span: float) -> int:
    """The most a single key can be admitted over `span` seconds: a full bucket plus refill."""
    return math.floor(limit.capacity + limit.per_second * span)


def random_key_bound(per_client: Limit, everyone: Limit) -> int:
    span = STEP * (RANDOM_KEY_REQUESTS - 1)
    bound = one_client_share(per_client, span)
    # Otherwise only the global limit would be measured and the test could not fail.
    assert bound < min(RANDOM_KEY_REQUESTS, one_client_share(everyone, span))
    return bound


def count_random_key_admissions(get: Callable[[dict[str, str]], int], clock: ManualClock) -> int:
    admitted = 0
    for _ in range(RANDOM_KEY_REQUESTS):
        status = get({"X-API-Key": secrets.token_hex(8)})
        assert status in (200, 429), status
        admitted += status == 200
        clock.advance(STEP)
    return admitted


async def test_fastapi_example_invented_api_keys_share_one_ip_quota() -> None:
    module = load("fastapi_app")
    clock = ManualClock(0.0)
    transport = httpx.ASGITransport(app=module.create_app(clock=clock),
                                    client=("203.0.113.7", 1))
    statuses: list[int] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        for _ in range(RANDOM_KEY_REQUESTS):
            r = await c.get("/", headers={"X-API-Key": secrets.token_hex(8)})
            statuses.append(r.status_code)
            clock.advance(STEP)
    assert set(statuses) <= {200, 429}
    assert statuses.count(200) <= random_key_bound(module.PER_CLIENT, module.EVERYONE)


def test_flask_example_invented_api_keys_share_one_ip_quota() -> None:
    module = load("flask_app")
    clock = ManualClock(0.0)
    c = module.create_app(clock=clock).test_client()
    admitted = count_random_key_admissions(
        lambda h: c.get("/", headers=h, environ_base={"REMOTE_ADDR": "203.0.113.7"}).status_code,
        clock,
    )
    assert admitted <= random_key_bound(module.PER_CLIENT, module.EVERYONE)


def test_django_example_invented_api_keys_share_one_ip_quota(example_settings: Any) -> None:
    clock = ManualClock(0.0)
    conf = dict(example_settings.RATEKEEPER, clock=clock)
    with override_settings(ROOT_URLCONF=example_settings.ROOT_URLCONF,
                           MIDDLEWARE=example_settings.MIDDLEWARE, RATEKEEPER=conf):
        c = Client(REMOTE_ADDR="203.0.113.7")
        admitted = count_random_key_admissions(lambda h: c.get("/", headers=h).status_code,
                                               clock)
    bound = random_key_bound(example_settings.PER_CLIENT, example_settings.EVERYONE)
    assert admitted <= bound


# -- what examples/ needs is installed by ratekeeper[examples] -----------------------------

def third_party_imports() -> set[str]:
    local = {p.stem for p in EXAMPLES.rglob("*.py")} | {p.name for p in EXAMPLES.rglob("*")
                                                         if p.is_dir()} | {"examples"}
    names: set[str] = set()
    for path in EXAMPLES.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - local - {"ratekeeper", "__future__"}


def test_examples_extra_provides_every_import() -> None:
    """``pip install -e '.[examples]'`` (README) installs every module examples/ imports."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extra = {canonicalize_name(Requirement(r).name)
             for r in pyproject["project"]["optional-dependencies"]["examples"]}
    modules = third_party_imports()
    assert {"fastapi", "flask", "django", "uvicorn"} <= modules  # the scan sees them
    dists = importlib.metadata.packages_distributions()
    missing = {m: dists.get(m) for m in modules
               if not {canonicalize_name(d) for d in dists.get(m, [])} & extra}
    assert not missing, f"imported by examples/ but not in ratekeeper[examples]: {missing}"


# -- the documented uvicorn command and X-Forwarded-For ------------------------------------

def documented_command() -> list[str]:
    """The ``Run it:`` command of examples/fastapi_app.py, also the README's."""
    doc = load("fastapi_app").__doc__ or ""
    m = re.search(r"^Run it:\s+(uvicorn [^(\n]*?)\s*(\(|$)", doc, re.MULTILINE)
    assert m is not None, doc
    command = m.group(1)
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert f".venv/bin/{command}" in [line.split("  #")[0].strip() for line in readme]
    return command.split()


@contextlib.contextmanager
def serve(args: list[str]) -> Iterator[str]:
    """``python -m uvicorn ARGS`` on a socket bound here (free loopback port, no race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, \
            tempfile.TemporaryFile() as log:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        sock.set_inheritable(True)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        proc = subprocess.Popen(
            [sys.executable, "-m", *args, "--fd", str(sock.fileno()), "--log-level", "warning"],
            cwd=ROOT, pass_fds=[sock.fileno()], stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT,
            env={k: v for k, v in os.environ.items() if k != "FORWARDED_ALLOW_IPS"},
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    raise AssertionError(f"uvicorn exited {proc.returncode}: {log.read()!r}")
                try:
                    if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "uvicorn did not answer within 30 s"
                    time.sleep(0.05)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


SPOOFED = 60  # requests, each claiming another client address


def spoofed_responses(url: str) -> tuple[list[httpx.Response], float]:
    with httpx.Client(base_url=url, timeout=10) as c:
        start = time.monotonic()
        rs = [c.get("/", headers={"X-Forwarded-For": f"198.51.100.{i}"}) for i in range(SPOOFED)]
        return rs, time.monotonic() - start


@pytest.mark.slow
def test_documented_uvicorn_command_ignores_spoofed_forwarding() -> None:
    """With the documented command a local peer's X-Forwarded-For does not change its key:
    60 requests claiming 60 addresses get at most one client's share over the time taken."""
    command = documented_command()
    assert command[0] == "uvicorn"
    module = load("fastapi_app")
    with serve(command) as url:
        rs, span = spoofed_responses(url)
    admitted = sum(r.status_code == 200 for r in rs)
    assert admitted <= one_client_share(module.PER_CLIENT, span), (admitted, span)
    assert {r.status_code for r in rs} == {200, 429}


@pytest.mark.slow
def test_uvicorn_default_lets_a_local_peer_choose_its_key() -> None:
    """Why the flag is documented: without it, uvicorn believes 127.0.0.1's X-Forwarded-For,
    so every spoofed address starts a fresh per-client bucket (remaining = burst - 1)."""
    command = [a for a in documented_command() if a != "--no-proxy-headers"]
    module = load("fastapi_app")
    fresh = f'"per-client";r={int(module.PER_CLIENT.capacity) - 1};'
    with serve(command) as url:
        rs, _ = spoofed_responses(url)
    first = rs[: int(module.PER_CLIENT.capacity)]
    assert all(r.headers["RateLimit"].startswith(fresh) for r in first), [
        r.headers["RateLimit"] for r in first]
