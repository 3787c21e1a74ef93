"""Replay's remembered mappings decide exactly as mapping every request afresh.

`replay` remembers `HTTPRules.map`'s answer per (method, path, host, peer, read headers)
when the ``[http]`` part is a pure function of them, and decides a repeated request with
`decide_mapped`. Each test replays a log twice, with ``remember=True`` (the fast path) and
``remember=False`` (`decide_request` for every event), and compares the two event by event:
verdict, decision, limits, failure policy, descriptors, cost, route and the client address.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from ratekeeper.policy import Policies
from ratekeeper.policy._loader import parse_policies_text
from ratekeeper.replay import _replay as replay_module
from ratekeeper.replay import read_log
from ratekeeper.replay._events import LogEvent
from ratekeeper.replay._replay import Replayed, mapping_inputs, replay
from tests.replay.make_sample import REPLAY_FORMAT
from tests.replay.test_replay import POLICIES as SAMPLE

DATA = Path(__file__).parent / "data"

#: Several policies in one file: per-IP, tiers by header, a hashed API key, routes (one
#: replacing the defaults, one by method with its own cost), an exempt path and network,
#: an exempt key value, trusted proxies naming the client by X-Forwarded-For, IPv6 by /64.
POLICIES = '''
[http]
domain = "web"
descriptors = [["client_ip"], ["plan", "client_ip"], ["key"]]

[http.client_ip]
trusted_proxies = ["127.0.0.1", "::1"]
ipv6_prefix = 64

[http.attributes.plan]
header = "x-plan"
values = ["free", "pro"]
default = "free"

[http.attributes.key]
header = "x-api-key"
hash = true

[http.exempt]
paths = ["/health"]
networks = ["192.0.2.0/24"]
keys = { key = ["monitoring"] }

[[http.routes]]
name = "static"
path = "/static/**"
mode = "replace"
descriptors = [["route"]]

[[http.routes]]
name = "login"
path = "/login"
methods = ["POST"]
cost = 2
descriptors = [["route", "client_ip"]]

[[domains.web.descriptors]]
key = "client_ip"
limits = [{ name = "per-ip", algorithm = "gcra", rate = "5/s", burst = 8 }]

[[domains.web.descriptors]]
key = "plan"
value = "free"
  [[domains.web.descriptors.descriptors]]
  key = "client_ip"
  limits = [{ name = "free", algorithm = "fixed-window", rate = "20/10s" }]

[[domains.web.descriptors]]
key = "plan"
value = "pro"
  [[domains.web.descriptors.descriptors]]
  key = "client_ip"
  limits = [{ name = "pro", algorithm = "token-bucket", rate = "50/s", burst = 50 }]

[[domains.web.descriptors]]
key = "key"
limits = [{ name = "per-key", algorithm = "sliding-window-counter", rate = "30/10s" }]

[[domains.web.descriptors]]
key = "route"
value = "static"
limits = [{ name = "static", algorithm = "sliding-window-counter", rate = "40/s" }]

[[domains.web.descriptors]]
key = "route"
value = "login"
  [[domains.web.descriptors.descriptors]]
  key = "client_ip"
  limits = [{ name = "login", algorithm = "leaky-bucket", rate = "1/s", burst = 2 }]
'''

#: The sample's own policies (tests/replay/test_replay.py's), by client IP behind nginx.
SAMPLE_POLICIES = SAMPLE

#: Per client only: the mapping reads neither method nor path.
PER_IP = '''
[http]
domain = "web"
descriptors = [["client_ip"]]

[[domains.web.descriptors]]
key = "client_ip"
limits = [{ name = "per-ip", algorithm = "gcra", rate = "2/s", burst = 3 }]
'''

SYNTHETIC_FORMAT = ('$remote_addr - - [$time_local] "$request" $status $body_bytes_sent '
                    '"$http_x_forwarded_for" "$http_x_plan" "$http_x_api_key" "$host"')


def synthetic_log(path: Path, n: int, seed: int = 7) -> None:
    """`n` lines in `SYNTHETIC_FORMAT`, ~40 requests per second: direct and proxied clients
    (IPv4, IPv6, exempt ones), every tier and a junk one, API keys, every route."""
    rng = random.Random(seed)
    clients = [f"198.51.100.{i}" for i in range(1, 9)] + [
        f"2001:db8:{i}::{j}" for i in range(3) for j in (1, 2)] + ["192.0.2.5"]
    paths = [("GET", "/api/items"), ("GET", "/api/items?page=2"), ("GET", "/static/app.js"),
             ("POST", "/login"), ("GET", "/login"), ("GET", "/health")]
    t0 = 1_700_000_000.0
    with path.open("w") as f:
        for i in range(n):
            t = t0 + i / 40.0
            stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(t))
            method, target = rng.choice(paths)
            if rng.random() < 0.5:
                peer, xff = rng.choice(["127.0.0.1", "::1"]), rng.choice(clients)
            else:
                peer, xff = rng.choice(clients), rng.choice(["-", "203.0.113.9"])
            plan = rng.choice(["free", "pro", "gold", "-"])
            key = rng.choice(["-", "k1", "k2", "monitoring"])
            host = rng.choice(["-", "example.com", "EXAMPLE.com:8080"])
            f.write(f'{peer} - - [{stamp}] "{method} {target} HTTP/1.1" 200 {i % 977} '
                    f'"{xff}" "{plan}" "{key}" "{host}"\n')


def outcome(r: Replayed) -> tuple[object, ...]:
    """Everything a replayed event decided, but object identities."""
    d = r.decision
    if d is None:
        return (r.event.line, None)
    c = d.check
    # A result's ticket names the replay's own store (each way has one): compared without it.
    result = None if d.result is None else d.result._replace(ticket=None)
    return (r.event.line, d.verdict, d.decision, d.limits, d.failure, result, c.domain,
            c.descriptors, c.cost, c.dry_run, c.max_delay, c.route,
            (c.request.method, c.request.path, c.request.peer, dict(c.request.headers),
             c.request.client_ip))


def both_ways(policies: Policies, events: list[LogEvent]) -> tuple[list[tuple[object, ...]],
                                                                    list[tuple[object, ...]]]:
    fast = [outcome(r) for r in replay(policies, events)]
    plain = [outcome(r) for r in replay(policies, events, remember=False)]
    return fast, plain


def assert_same(fast: list[tuple[object, ...]], plain: list[tuple[object, ...]]) -> None:
    assert len(fast) == len(plain)
    for a, b in zip(fast, plain, strict=True):
        assert a == b, f"line {a[0]}: remembered {a[1:]} != mapped afresh {b[1:]}"


def events_of(path: Path, fmt: str) -> list[LogEvent]:
    with read_log(path, fmt) as events:
        return list(events)


@pytest.mark.parametrize(("sample", "fmt"), [("nginx-replay.log", REPLAY_FORMAT),
                                             ("nginx-combined.log", "combined")])
def test_the_real_nginx_samples_replay_the_same_with_remembered_mappings(
        sample: str, fmt: str) -> None:
    policies = parse_policies_text(SAMPLE_POLICIES)
    assert mapping_inputs(policies.http) is not None  # type: ignore[arg-type]
    fast, plain = both_ways(policies, events_of(DATA / sample, fmt))
    assert_same(fast, plain)
    verdicts = {o[1] for o in fast}
    assert {"allowed", "rejected", None} <= verdicts  # the sample meets every outcome


def test_a_synthetic_log_of_several_policies_replays_the_same_with_remembered_mappings(
        tmp_path: Path) -> None:
    synthetic_log(tmp_path / "access.log", 4000)
    policies = parse_policies_text(POLICIES)
    inputs = mapping_inputs(policies.http)  # type: ignore[arg-type]
    assert inputs is not None and inputs.method and inputs.path
    assert set(inputs.headers) == {"host", "x-forwarded-for", "x-plan", "x-api-key"}
    events = events_of(tmp_path / "access.log", SYNTHETIC_FORMAT)
    fast, plain = both_ways(policies, events)
    assert_same(fast, plain)
    verdicts = {o[1] for o in fast}
    assert {"allowed", "rejected", "delayed", None} <= verdicts
    routes = {o[11] for o in fast if o[1] is not None}
    assert {"", "static", "login"} <= routes


def test_a_full_memo_is_emptied_and_decides_the_same(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    synthetic_log(tmp_path / "access.log", 1500)
    monkeypatch.setattr(replay_module, "MAP_CACHE_SIZE", 7)
    events = events_of(tmp_path / "access.log", SYNTHETIC_FORMAT)
    fast, plain = both_ways(parse_policies_text(POLICIES), events)
    assert_same(fast, plain)


def test_a_per_ip_policy_remembers_by_client_only_and_decides_the_same(
        tmp_path: Path) -> None:
    synthetic_log(tmp_path / "access.log", 2000)
    policies = parse_policies_text(PER_IP)
    inputs = mapping_inputs(policies.http)  # type: ignore[arg-type]
    assert inputs is not None and not inputs.method and not inputs.path
    fast, plain = both_ways(policies, events_of(tmp_path / "access.log", SYNTHETIC_FORMAT))
    assert_same(fast, plain)
    assert {"allowed", "rejected"} <= {o[1] for o in fast}


def test_a_hook_attribute_or_limits_for_is_mapped_afresh_every_time() -> None:
    from ratekeeper.policy._http import Attribute, HTTPRules, LimitsHook  # noqa: PLC0415

    def plan_of(req: object) -> str:
        return "free"

    assert mapping_inputs(HTTPRules("web", attributes={
        "plan": Attribute("plan", hook=plan_of)})) is None
    assert mapping_inputs(HTTPRules("web", limits_for=LimitsHook(lambda req: None))) is None
    assert mapping_inputs(HTTPRules("web", cost_fn=lambda req: 2.0)) is None
    assert mapping_inputs(HTTPRules("web")) is not None
