"""``POST /v1/http`` with a client that is not an address, and ``GET /v1/policies`` after a
failed reload (issue 28, items 7 and 10): a clear answer, never a 500."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from ratekeeper.policy._holder import PolicyHolder
from ratekeeper.policy._loader import MAX_DEPTH
from ratekeeper.service._http import create_app
from ratekeeper.service._service import Service
from ratekeeper.service._stats import PrometheusStats
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.testing import ManualClock

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "policies.toml"


def _service(path: Path) -> tuple[Any, PolicyHolder, PrometheusStats]:
    stats = PrometheusStats()
    holder = PolicyHolder(path, stats=stats)
    app = create_app(Service(holder, MemoryStore(), stats=stats, clock=ManualClock(1e6)))
    return app, holder, stats


def _call(app: Any, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    headers = [(b"host", b"t"), (b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "root_path": "", "query_string": b"", "headers": headers,
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "state": {}}
    msgs = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return msgs.pop(0) if msgs else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.parametrize("client", ["not-an-ip", "300.1.2.3", "2001:db8::g"])
def test_v1_http_with_a_client_that_is_not_an_ip_address_is_a_400_naming_it(
        client: str) -> None:
    app, _, _ = _service(EXAMPLE)
    body = json.dumps({"method": "GET", "path": "/", "client": client}).encode()
    status, answer = _call(app, "POST", "/v1/http", body)
    assert status == 400 and b"client must be an IP address" in answer
    assert client.encode() in answer


def test_v1_http_with_an_ip_address_client_is_decided() -> None:
    app, _, _ = _service(EXAMPLE)
    body = json.dumps({"method": "GET", "path": "/", "client": "203.0.113.7"}).encode()
    assert _call(app, "POST", "/v1/http", body)[0] == 200


def test_a_failed_reload_of_a_deeply_nested_file_shows_in_v1_policies_and_the_metrics(
        tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_bytes(EXAMPLE.read_bytes())
    app, holder, _ = _service(path)
    path.write_text("x = " + "[" * 2000 + "]" * 2000 + "\n")
    assert holder.reload() is False
    status, answer = _call(app, "GET", "/v1/policies")
    doc = json.loads(answer)
    assert status == 200 and doc["generation"] == 1
    assert f"at most {MAX_DEPTH}" in doc["last_reload_error"]
    status, metrics = _call(app, "GET", "/metrics")
    assert b'ratekeeper_config_reloads_total{result="error"} 1.0' in metrics
