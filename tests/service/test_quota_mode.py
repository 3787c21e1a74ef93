"""envoyproxy/ratelimit's ``quota_mode`` (issue 32, item 3): a quota-mode descriptor is
charged and its status says OVER_LIMIT when over, but the answer is OVER_LIMIT only when every
quota-mode descriptor of the request is over (or an ordinary one is); global shadow mode still
answers OK. The Go project's examples/ratelimit/config/ (copied unchanged, at
f2fb15770f7fd1c88ca6c3a1b58ee513917ace96) loads and serves.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from ratekeeper.policy._holder import PolicyHolder
from ratekeeper.policy._loader import load_policies
from ratekeeper.service._grpc import RateLimitServicer
from ratekeeper.service._service import Service
from ratekeeper.service.proto.envoy.service.ratelimit.v3 import rls_pb2
from ratekeeper.stores.memory import MemoryStore
from ratekeeper.testing import ManualClock

CONFIGS = Path(__file__).parent / "envoy_configs"
OK, OVER = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT

QUOTA_YAML = """domain: quota-domain
descriptors:
  - key: regular
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: quota1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
"""


def _servicer(config: Path) -> RateLimitServicer:
    service = Service(PolicyHolder(config), MemoryStore(), clock=ManualClock(1_000_020.0))
    return RateLimitServicer(service)


def _ask(servicer: RateLimitServicer, domain: str, *descriptors: tuple[str, str]
         ) -> tuple[int, list[int]]:
    req = rls_pb2.RateLimitRequest(domain=domain)
    for key, value in descriptors:
        e = req.descriptors.add().entries.add()
        e.key, e.value = key, value
    resp = rls_pb2.RateLimitResponse.FromString(
        asyncio.run(servicer.ShouldRateLimit(req.SerializeToString(), None)))
    return resp.overall_code, [s.code for s in resp.statuses]


@pytest.fixture
def quota(tmp_path: Path) -> RateLimitServicer:
    (tmp_path / "quota.yaml").write_text(QUOTA_YAML)
    return _servicer(tmp_path / "quota.yaml")


def test_quota_mode_only_some_over_the_limit_answers_ok(quota: RateLimitServicer) -> None:
    """envoyproxy/ratelimit test/service/ratelimit_test.go::
    TestServiceQuotaModeOnlySomeOverTheLimit: quota1 (1/min) over, quota2 (2/min) not: OK,
    quota1's own status OVER_LIMIT."""
    both = (("quota1", "limit"), ("quota2", "limit"))
    assert _ask(quota, "quota-domain", *both) == (OK, [OK, OK])  # t=0: 1st of each
    assert _ask(quota, "quota-domain", *both) == (OK, [OVER, OK])  # quota2 has its 2nd


def test_quota_mode_only_all_over_the_limit_answers_over_limit(
        quota: RateLimitServicer) -> None:
    """...::TestServiceQuotaModeOnlyAllOverTheLimit: every quota descriptor over."""
    both = (("quota1", "limit"), ("quota2", "limit"))
    for _ in range(2):
        _ask(quota, "quota-domain", *both)
    assert _ask(quota, "quota-domain", *both) == (OVER, [OVER, OVER])


def test_quota_mode_descriptor_over_beside_a_regular_one_under_is_over_limit(
        quota: RateLimitServicer) -> None:
    """...::TestServiceMixedPerDescriptorModes (the only quota descriptor over: OVER_LIMIT)
    and TestServiceMixedPerDescriptorModesUnderLimit (nothing over: OK)."""
    pair = (("regular", "limit"), ("quota1", "limit"))
    assert _ask(quota, "quota-domain", *pair) == (OK, [OK, OK])
    assert _ask(quota, "quota-domain", *pair) == (OVER, [OK, OVER])


def test_regular_descriptor_over_rejects_whatever_the_quota_ones_say(
        quota: RateLimitServicer) -> None:
    """...::TestServicePerDescriptorQuotaMode: the regular limit over is OVER_LIMIT though
    the quota-mode one is under."""
    for _ in range(5):
        _ask(quota, "quota-domain", ("regular", "limit"))
    assert _ask(quota, "quota-domain", ("regular", "limit"), ("quota2", "limit")) == \
        (OVER, [OVER, OK])


def test_quota_mode_with_global_shadow_mode_answers_ok(tmp_path: Path) -> None:
    """...::TestServiceQuotaModeWithShadowMode: shadow mode answers OK overall."""
    config = tmp_path / "quota.yaml"
    config.write_text(QUOTA_YAML)
    snap = load_policies(config)
    shadowed = dataclasses.replace(snap, settings=dataclasses.replace(snap.settings,
                                                                     shadow_mode=True))
    service = Service(PolicyHolder(config, loader=lambda _: shadowed), MemoryStore(),
                      clock=ManualClock(1_000_020.0))
    servicer = RateLimitServicer(service)
    _ask(servicer, "quota-domain", ("quota1", "limit"))
    assert _ask(servicer, "quota-domain", ("quota1", "limit")) == (OK, [OVER])


def test_go_examples_config_directory_loads_unchanged_and_answers_its_quota_rules() -> None:
    """envoyproxy/ratelimit examples/ratelimit/config/ (example.yaml's service_1, 1 per
    minute in quota mode) as its integration-test/scripts/quota.sh asks it."""
    servicer = _servicer(CONFIGS / "examples_config")
    assert _ask(servicer, "rl", ("service", "service_1")) == (OK, [OK])
    assert _ask(servicer, "rl", ("service", "service_1")) == (OVER, [OVER])
