"""`recommend` on synthetic traffic with a known answer, and `required_burst` by hand."""

from __future__ import annotations

import io
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ratekeeper.replay import LogEvent, recommend
from ratekeeper.replay._cli import Progress
from ratekeeper.replay._recommend import nice_ceil, required_burst

T0 = 1_700_000_000.0
HEAVY = "10.9.9.9"
SPAN = 120


def ev(t: float, client: str) -> LogEvent:
    return LogEvent(t, client, "GET", "/", 200, 0, None, None, None, {}, {}, 0)


def traffic() -> list[LogEvent]:
    """99 clients sending bursts of 10 requests every 2 s (5 req/s, bursts of 10), and one
    sending 50 req/s evenly, for 120 s."""
    evs = []
    for i in range(99):
        off = i * 0.017
        evs += [ev(T0 + off + 2 * k, f"10.0.0.{i + 1}") for k in range(SPAN // 2)
                for _ in range(10)]
    evs += [ev(T0 + j * 0.02, HEAVY) for j in range(SPAN * 50)]
    evs.sort(key=lambda e: e.t)
    return evs


def heavy_admitted(rate: float, burst: float) -> int:
    """The heavy client's admissions under a token bucket, by a plain loop."""
    tokens, last, n = burst, 0.0, 0
    for j in range(SPAN * 50):
        t = j * 0.02
        tokens = min(burst, tokens + (t - last) * rate)
        last = t
        if tokens >= 1 - 1e-9:
            tokens -= 1
            n += 1
    return n


def test_the_recommendation_admits_the_99_and_caps_the_heavy_one() -> None:
    evs = traffic()
    rec = recommend(lambda: evs, target=0.99)
    (lim,) = rec.limits
    assert (lim.rate, lim.burst, lim.algorithm) == (5.0, 10, "token-bucket")
    assert (lim.keys, lim.keys_affected) == (100, 1)
    assert lim.heaviest[0] == (f"client_ip={HEAVY}", pytest.approx(45 * (SPAN - 0.02) + 1,
                                                                    abs=1e-6))
    assert lim.rates["max"] == 50.0 and lim.rates["p99"] == 5.0
    at_rate = {p.burst: p.keys_affected for p in lim.curve if p.rate == 5.0}
    assert at_rate[10] == 1 and at_rate[1] == 100
    assert at_rate[max(at_rate)] == 0  # a burst as large as the heavy one's backlog: none
    assert {p.rate for p in lim.curve} == {2.5, 5.0, 10.0}
    # what it would have done: the 99 untouched, the heavy one capped to 5/s
    assert rec.comparison is not None
    (res,) = rec.comparison.policies
    assert (res.clients, res.clients_affected) == (100, 1)
    assert [k.key for k in res.top_clients] == [HEAVY]
    assert res.rejected == SPAN * 50 - heavy_admitted(5.0, 10)
    assert res.requests == len(evs)
    assert rec.overrides == ("per-client.algorithm=token-bucket", "per-client.rate=5/s",
                             "per-client.burst=10")
    assert rec.to_json()["limits"][0]["share_affected"] == 0.01


def test_a_target_of_all_clients_admits_the_heavy_one_too() -> None:
    evs = traffic()
    rec = recommend(lambda: evs, target=1.0, replay=False)
    (lim,) = rec.limits
    assert (lim.rate, lim.keys_affected) == (50.0, 0)
    # at 50/s the light clients' bursts of 10 need 10, the heavy one's even stream 1
    assert lim.burst == 10
    assert rec.comparison is None


def test_required_burst_is_the_virtual_schedules_largest_backlog() -> None:
    assert required_burst([0, 0, 0], rate=1) == 3
    assert required_burst([0, 1, 2, 3], rate=1) == 1
    assert required_burst([0, 0.5, 1.0, 1.5], rate=1) == pytest.approx(2.5)
    assert required_burst([0, 0, 10, 10], rate=1, cost=2) == 4
    assert required_burst([], rate=1) == 0


def test_nice_ceil_rounds_up_to_two_significant_digits() -> None:
    assert [nice_ceil(x) for x in (5, 4.03, 123, 0.0101, 99.5)] == [5, 4.1, 130, 0.011, 100]
    assert math.isclose(nice_ceil(1 / 3), 0.34)


def test_a_bad_target_is_refused() -> None:
    for bad in (0, 1.5, -0.1, True):
        with pytest.raises(ValueError, match="between 0 and 1"):
            recommend(lambda: [], target=bad)


def scanner_heavy() -> list[LogEvent]:
    """40 clients of the site, client k sending k % 10 + 1 requests at once every 10 s for
    10 min (all answered 200); 3 scanners probing 20 paths a second for 10 s, all 404."""
    evs = []
    for c in range(40):
        evs += [LogEvent(T0 + 10 * j + c * 0.01, f"10.0.1.{c}", "GET", "/", 200, 0, None,
                         None, None, {}, {}, 0) for j in range(60) for _ in range(c % 10 + 1)]
    for s in range(3):
        evs += [LogEvent(T0 + 100 * s + j * 0.05, f"203.0.113.{s}", "GET", f"/probe{j}",
                         404, 0, None, None, None, {}, {}, 0) for j in range(200)]
    evs.sort(key=lambda e: e.t)
    return evs


def need_by_hand(times: list[float], rate: float) -> float:
    """A token bucket's smallest capacity that admits all of `times` at `rate`: simulate
    a bucket of capacity c (full at the start) for growing whole c."""
    c = 1
    while True:
        tokens, last, ok = float(c), times[0], True
        for t in times:
            tokens = min(c, tokens + (t - last) * rate)
            last = t
            if tokens < 1 - 1e-9:
                ok = False
                break
            tokens -= 1
        if ok:
            return c
        c += 1


def test_scanners_are_shown_apart_and_do_not_size_the_burst() -> None:
    evs = scanner_heavy()
    by_client: dict[str, list[float]] = {}
    errors: dict[str, int] = {}
    for e in evs:
        by_client.setdefault(e.client, []).append(e.t - T0)
        errors[e.client] = errors.get(e.client, 0) + (e.status == 404)
    site = [c for c in by_client if errors[c] < len(by_client[c]) / 2]
    scanners = sorted(set(by_client) - set(site))
    assert len(site) == 40 and len(scanners) == 3
    # at target 1.0 the rate is the heaviest site client's peak minute / 60 s (10 requests
    # every 10 s: 60 a minute, 1/s), and the burst that client's need at it
    heaviest_site = max(need_by_hand(by_client[c], 1.0) for c in site)
    rec = recommend(lambda: evs, target=1.0, replay=False)
    (lim,) = rec.limits
    assert (lim.rate, lim.burst) == (1.0, heaviest_site) == (1.0, 10)
    assert lim.keys == 40 and lim.keys_affected == 0
    assert sorted(k for k, *_ in lim.abusive) == [f"client_ip={c}" for c in scanners]
    assert all(n == 200 and share == 1.0 for _, _, n, share in lim.abusive)
    assert "at least 10 requests, 50% or more answered 4xx other than 429" in rec.text()
    assert "abusive, left out (3): client_ip=203.0.113." in rec.text()
    assert rec.to_json()["limits"][0]["abusive"][0]["requests"] == 200


def test_abusive_keys_drive_the_burst_only_when_included() -> None:
    evs = scanner_heavy()
    rec = recommend(lambda: evs, target=1.0, replay=False, abusive_share=None)
    (lim,) = rec.limits
    # the scanners' 200 requests in 10 s are the heaviest minute: 200/60 -> 3.4/s
    assert lim.rate == 3.4 and lim.keys == 43 and lim.abusive == ()
    scanner = [e.t - T0 for e in evs if e.client == "203.0.113.0"]
    assert lim.burst == need_by_hand(scanner, 3.4) > 10
    assert "abusive keys (left out): none, every key counts" in rec.text()


def test_a_bad_abusive_share_is_refused_with_what_is_accepted() -> None:
    with pytest.raises(ValueError, match=r"above 0 and at most 1 .*or None.*got 50"):
        recommend(lambda: [], abusive_share=50, replay=False)


def test_a_bucket_the_log_is_too_long_for_is_refused_before_the_replay() -> None:
    evs = [ev(T0 + 30.0 * i, "10.0.0.1") for i in range(2100)]  # 1050 minutes
    with pytest.raises(ValueError, match=r"bucket 60 s: the log spans 62,970 s.*e\.g\. 120"):
        recommend(lambda: evs, bucket=60.0)
    assert recommend(lambda: evs).comparison.bucket == 120.0  # type: ignore[union-attr]


def combined(evs: list[LogEvent]) -> str:
    return "".join(
        f'{e.client} - - [{time.strftime("%d/%b/%Y:%H:%M:%S", time.gmtime(e.t))} +0000] '
        f'"GET {e.path} HTTP/1.1" '
        f'{e.status} 0 "-" "-"\n' for e in evs)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "import sys; from ratekeeper.cli import "
                           "main; sys.exit(main())", *args], capture_output=True, text=True,
                          check=False)


def test_the_command_states_the_rule_and_leaves_scanners_out_unless_told(
        tmp_path: Path) -> None:
    # whole seconds (the combined format's resolution): the scanners at 20 a second
    evs = [e for e in scanner_heavy() if e.client.startswith("203.")]
    evs = [e._replace(t=math.floor(e.t)) for e in evs] + [
        ev(T0 + 10 * j, f"10.0.1.{c}") for c in range(40) for j in range(60)
        for _ in range(c % 10 + 1)]
    evs.sort(key=lambda e: e.t)
    log = tmp_path / "access.log"
    log.write_text(combined(evs), encoding="utf-8")
    out = run_cli("recommend", "--log", str(log), "--target", "100")
    assert out.returncode == 0, out.stderr
    assert 'rate = "1/s", burst = 10' in out.stdout
    assert "abusive keys (left out): at least 10 requests, 50% or more answered 4xx" \
        in out.stdout
    assert "\r" not in out.stderr  # no progress into a pipe
    every = run_cli("recommend", "--log", str(log), "--target", "100", "--include-abusive")
    assert 'burst = 10 ' not in every.stdout and "every key counts" in every.stdout


def test_the_command_refuses_a_bucket_too_small_for_the_log(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_text(combined([ev(T0 + 30.0 * i, "10.0.0.1") for i in range(2100)]),
                   encoding="utf-8")
    out = run_cli("recommend", "--log", str(log), "--bucket", "60")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "ratekeeper recommend: --bucket 60 s: the log spans 62,970 s" in out.stderr
    assert "(e.g. 120)" in out.stderr


def test_progress_can_be_forced_onto_a_stream_that_is_not_a_terminal() -> None:
    pipe = io.StringIO()
    Progress(pipe)("rates", 65536)
    assert pipe.getvalue() == ""
    forced = Progress(pipe, interval=0.0, force=True)
    forced("rates", 65536)
    forced.done()
    assert "rates: 65,536 events" in pipe.getvalue()
