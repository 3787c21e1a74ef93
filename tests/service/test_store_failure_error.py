"""A store failure answered with an error (issue 32, item 1): ``--failure error`` (env
``RATEKEEPER_FAILURE``) answers a check the store could not decide with gRPC UNAVAILABLE /
HTTP 503, as envoyproxy/ratelimit answers a cache error, so that Envoy's ``failure_mode_deny``
decides (tests/envoy/test_store_failure.py shows both ways through a real Envoy). ``open``,
``closed`` and ``local`` choose that failure policy for a policies file that cannot say one
(envoyproxy/ratelimit's YAML); without the option the policies' ``[service] failure`` decides.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
import pytest

from ratekeeper.policy._holder import PolicyHolder
from ratekeeper.service._cli import _failure_choice, add_serve
from ratekeeper.service._grpc import RateLimitServicer
from ratekeeper.service._http import create_app
from ratekeeper.service._server import _loader
from ratekeeper.service._service import STORE_FAILED, Service
from ratekeeper.service._stats import PrometheusStats
from ratekeeper.service.proto.envoy.service.ratelimit.v3 import rls_pb2
from ratekeeper.testing import ManualClock

from .test_degraded_answers import _request, _requests_total
from .test_engine import BrokenStore
from .test_fast_paths import POLICIES, _call

YAML = b"""domain: t
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
"""


class Aborted(Exception):
    pass


class Context:
    """What a grpc.aio servicer context does on abort: remember the status, then raise."""

    code: Any = None
    detail = ""

    async def abort(self, code: Any, detail: str) -> None:
        self.code, self.detail = code, detail
        raise Aborted


def _service(store_failure: Any, config: Path = POLICIES, failure: Any = None
             ) -> tuple[Service, BrokenStore, PrometheusStats]:
    stats = PrometheusStats()
    store = BrokenStore()
    holder = PolicyHolder(config, stats=stats, loader=_loader(failure))
    return Service(holder, store, stats=stats, clock=ManualClock(1_000_000.0),
                   store_failure=store_failure), store, stats


def test_store_failure_under_error_policy_is_a_grpc_unavailable_not_an_answer() -> None:
    """envoyproxy/ratelimit test/service/ratelimit_test.go::TestCacheError: the cache fails,
    ShouldRateLimit returns no response but an error (counted as redis_error)."""
    service, store, stats = _service("error")
    servicer = RateLimitServicer(service)
    ctx = Context()
    with pytest.raises(Aborted):
        asyncio.run(servicer.ShouldRateLimit(_request("cache-error"), ctx))
    assert ctx.code == grpc.StatusCode.UNAVAILABLE
    assert ctx.detail == STORE_FAILED
    assert _requests_total(stats, "grpc", "store_error") == 1
    store.down = False  # the store back: answered again
    answer = asyncio.run(servicer.ShouldRateLimit(_request("cache-error"), Context()))
    assert rls_pb2.RateLimitResponse.FromString(answer).overall_code == \
        rls_pb2.RateLimitResponse.OK


def test_store_failure_under_error_policy_is_an_http_503_problem() -> None:
    service, _, stats = _service("error")
    app = create_app(service)
    sent = asyncio.run(_call(app, b'{"domain":"t","descriptors":[{"user":"cache-error"}]}'))
    assert sent[0]["status"] == 503
    problem = json.loads(sent[1]["body"])
    assert problem["status"] == 503 and problem["detail"] == STORE_FAILED
    assert _requests_total(stats, "http", "store_error") == 1


def test_failure_option_chooses_closed_for_a_yaml_config(tmp_path: Path) -> None:
    """A YAML file cannot say `failure`; --failure closed rejects while the store is down."""
    config = tmp_path / "config.yaml"
    config.write_bytes(YAML)
    service, _, _ = _service("decide", config, failure="closed")
    assert service.holder.current.settings.failure == "closed"
    resp = rls_pb2.RateLimitResponse.FromString(asyncio.run(
        RateLimitServicer(service).ShouldRateLimit(_request("closed"), Context())))
    assert resp.overall_code == rls_pb2.RateLimitResponse.OVER_LIMIT
    assert service.holder.reload()  # a reload keeps the chosen policy
    assert service.holder.current.settings.failure == "closed"


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_serve(p)
    return p.parse_args(list(argv))


@pytest.mark.parametrize(("argv", "env", "chosen"), [
    ((), {}, None),
    ((), {"RATEKEEPER_FAILURE": "error"}, "error"),
    (("--failure", "closed"), {"RATEKEEPER_FAILURE": "error"}, "closed"),
])
def test_failure_flag_wins_over_the_environment_and_unset_leaves_the_policies(
        argv: tuple[str, ...], env: dict[str, str], chosen: str | None) -> None:
    assert _failure_choice(_args(*argv), env) == chosen


def test_bad_failure_environment_value_is_refused_naming_it_and_the_choices() -> None:
    with pytest.raises(ValueError, match=r"RATEKEEPER_FAILURE='deny'.*open, closed, local, "
                                         r"error"):
        _failure_choice(_args(), {"RATEKEEPER_FAILURE": "deny"})
