"""``POST /json`` (issue 32, item 4): envoyproxy/ratelimit's JSON endpoint. A
RateLimitRequest in protobuf JSON is answered with the RateLimitResponse the gRPC call gives,
in protobuf JSON (camelCase names, enums by name), 200 when OK and 429 when OVER_LIMIT. A
body that is not a RateLimitRequest is a 400, with a problem saying why (the Go service says
only "Bad Request"), as every other client mistake here.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from ratekeeper.policy._holder import PolicyHolder
from ratekeeper.service._grpc import LimitHeaders
from ratekeeper.service._http import create_app
from ratekeeper.service._service import Service
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.testing import ManualClock

from .test_fast_paths import POLICIES


def _post(body: bytes, limit_headers: LimitHeaders | None = None, *, times: int = 1
          ) -> list[httpx.Response]:
    service = Service(PolicyHolder(POLICIES), MemoryStore(), clock=ManualClock(1_000_020.0))
    app = create_app(service, limit_headers)

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            return [await client.post("/json", content=body) for _ in range(times)]
    return asyncio.run(run())


def _user(uid: str) -> bytes:
    return json.dumps({"domain": "t", "descriptors": [
        {"entries": [{"key": "user", "value": uid}]}]}).encode()


def test_json_endpoint_answers_200_then_429_with_the_grpc_response_in_protobuf_json() -> None:
    """envoyproxy/ratelimit test/server/server_impl_test.go::TestJsonHandler (successful
    request, not rate limited: 200 {"overallCode":"OK"}; rate limited: 429
    {"overallCode":"OVER_LIMIT"}), on a 3 per hour rule."""
    answers = _post(_user("json-a"), times=4)
    assert [r.status_code for r in answers] == [200, 200, 200, 429]
    assert all(r.headers["content-type"] == "application/json" for r in answers)
    first: dict[str, Any] = answers[0].json()
    assert first["overallCode"] == "OK"
    status = first["statuses"][0]
    assert status["code"] == "OK" and status["limitRemaining"] == 2
    assert status["currentLimit"] == {"requestsPerUnit": 3, "unit": "HOUR"}
    last: dict[str, Any] = answers[3].json()
    assert last["overallCode"] == "OVER_LIMIT" and last["statuses"][0]["code"] == "OVER_LIMIT"
    assert "limitRemaining" not in last["statuses"][0]  # 0: protobuf JSON leaves it out


def test_json_endpoint_sends_the_go_services_limit_headers_when_they_are_on() -> None:
    got: dict[str, Any] = _post(_user("json-h"), LimitHeaders())[0].json()
    headers = {h["key"]: h["value"] for h in got["responseHeadersToAdd"]}
    assert headers == {"RateLimit-Limit": "3", "RateLimit-Remaining": "2",
                       "RateLimit-Reset": headers["RateLimit-Reset"]}


def test_json_endpoint_missing_or_bad_body_is_a_400_saying_what_a_request_looks_like() -> None:
    """...::TestJsonHandler: a missing body and "}" are 400."""
    for body in (b"", b"}", b'{"domain": "t", "descriptors": [{"entries": 5}]}',
                 b"[" * 50_000, b'{"domian": "t"}'):
        r = _post(body)[0]
        assert r.status_code == 400, body[:40]
        problem = r.json()
        assert "not a RateLimitRequest in protobuf JSON" in problem["detail"]


def test_json_endpoint_empty_domain_is_the_grpc_invalid_argument_as_a_400() -> None:
    r = _post(b'{"domain": "", "descriptors": [{"entries": [{"key": "user"}]}]}')[0]
    assert r.status_code == 400
    assert r.json()["detail"] == "rate limit domain must not be empty"
