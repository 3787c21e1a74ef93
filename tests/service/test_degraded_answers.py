"""Degraded answers are marked (issue 28, item 12): when the store cannot be reached and the
failure policy decides, the gRPC answer adds ``X-RateLimit-Degraded: <policy>`` to
``response_headers_to_add`` (Envoy passes it on to the client, as the middleware sends it),
``POST /v1/check`` lists the same field in its ``headers`` beside ``"degraded": true``, and
``ratekeeper_requests_total`` counts the answer under ``result="degraded"``.

The store fails on demand (`BrokenStore`), so each answer's path is known; the answers of a
store that answers must stay what they were, byte for byte (test_answers.py, test_grpc.py).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from ratekeeper.policy._holder import PolicyHolder
from ratekeeper.service._grpc import LimitHeaders, RateLimitServicer
from ratekeeper.service._http import check_answer, create_app, dumps, result_json
from ratekeeper.service._service import Service
from ratekeeper.service._stats import PrometheusStats
from ratekeeper.service.proto.envoy.service.ratelimit.v3 import rls_pb2
from ratekeeper.testing import ManualClock

from .test_engine import BrokenStore, desc
from .test_fast_paths import POLICIES, _call

DEGRADED = "X-RateLimit-Degraded"


def _service(policies: Path = POLICIES) -> tuple[Service, BrokenStore, PrometheusStats]:
    stats = PrometheusStats()
    store = BrokenStore()
    service = Service(PolicyHolder(policies, stats=stats), store, stats=stats,
                      clock=ManualClock(1_000_000.0))
    return service, store, stats


def _request(user: str) -> bytes:
    req = rls_pb2.RateLimitRequest(domain="t")
    entry = req.descriptors.add().entries.add()
    entry.key, entry.value = "user", user
    data: bytes = req.SerializeToString()
    return data


def _grpc(servicer: RateLimitServicer, data: bytes) -> rls_pb2.RateLimitResponse:
    # The context is only used to abort (an error); these calls are answered.
    answer = asyncio.run(servicer.ShouldRateLimit(data, None))
    resp: rls_pb2.RateLimitResponse = rls_pb2.RateLimitResponse.FromString(answer)
    return resp


def _headers(resp: rls_pb2.RateLimitResponse) -> dict[str, str]:
    return {h.key: h.value for h in resp.response_headers_to_add}


def _requests_total(stats: PrometheusStats, transport: str, result: str) -> float:
    line = (f'ratekeeper_requests_total{{result="{result}",transport="{transport}"}} ')
    for text in stats.render()[0].decode().splitlines():
        if text.startswith(line):
            return float(text[len(line):])
    return 0.0


@pytest.mark.parametrize("limit_headers", [None, LimitHeaders()], ids=["ours", "envoy-go"])
def test_fail_open_grpc_answer_says_it_is_degraded(limit_headers: LimitHeaders | None) -> None:
    service, store, stats = _service()
    servicer = RateLimitServicer(service, limit_headers)
    data = _request("degraded-grpc")
    seen = []
    # Down, up, down, up on one descriptor: a remembered answer never carries the other's mark.
    for down in (True, False, True, False, True):
        store.down = down
        resp = _grpc(servicer, data)
        assert resp.overall_code == rls_pb2.RateLimitResponse.OK  # failure = "open"
        seen.append(_headers(resp).get(DEGRADED))
    assert seen == ["open", None, "open", None, "open"]
    assert _requests_total(stats, "grpc", "degraded") == 3
    assert _requests_total(stats, "grpc", "ok") == 2


def test_fail_closed_grpc_answer_names_the_closed_policy(tmp_path: Path) -> None:
    closed = tmp_path / "closed.toml"
    closed.write_text(POLICIES.read_text().replace('failure = "open"', 'failure = "closed"', 1))
    service, _, stats = _service(closed)
    resp = _grpc(RateLimitServicer(service), _request("degraded-closed"))
    assert resp.overall_code == rls_pb2.RateLimitResponse.OVER_LIMIT
    assert _headers(resp)[DEGRADED] == "closed"
    assert _requests_total(stats, "grpc", "degraded") == 1


def test_fail_open_http_check_answer_lists_the_degraded_field() -> None:
    service, store, stats = _service()
    app = create_app(service)
    body = b'{"domain":"t","descriptors":[{"user":"degraded-http"}]}'

    def post() -> dict[str, Any]:
        sent = asyncio.run(_call(app, body))
        assert sent[0]["status"] == 200
        out: dict[str, Any] = json.loads(sent[1]["body"])
        return out

    down = post()
    assert down["allowed"] is True and down["degraded"] is True
    assert down["headers"][DEGRADED] == "open"
    store.down = False
    up = post()
    assert up["degraded"] is False and DEGRADED not in up["headers"]
    assert _requests_total(stats, "http", "degraded") == 1
    assert _requests_total(stats, "http", "ok") == 1


def test_degraded_check_answer_is_the_general_encoding_byte_for_byte() -> None:
    service, _, _ = _service()
    res = asyncio.run(service.engine.check("t", [desc(("user", "degraded-bytes"))]))
    assert res.degraded
    assert check_answer(res) == dumps(result_json(res))
    assert dict(json.loads(check_answer(res))["headers"])[DEGRADED] == "open"
