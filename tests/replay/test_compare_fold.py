"""`compare`'s figures are the plain fold of each candidate's own `replay`.

`compare` counts a request admitted at once at the same time as the one before it without
calling `Series.add` or `DelaySketch.add`, and its first candidate reads the events itself
(the others through the tee). Here each candidate is replayed alone and its answers are
folded the straightforward way, one `Series.add`, `DelaySketch.add` and `SpaceSaving.add`
per request; `compare`'s JSON must be the same, figure by figure, series and quantiles
included (small `max_buckets`, so the series halves on the way).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ratekeeper.policy import Policies
from ratekeeper.policy._loader import parse_policies_text
from ratekeeper.replay import Candidate, compare, read_log
from ratekeeper.replay._compare import (
    DelaySketch,
    Series,
    SpaceSaving,
    client_resolver,
    rejected_counter,
)
from ratekeeper.replay._events import LogEvent
from ratekeeper.replay._replay import replay
from tests.replay.test_fast_path import PER_IP, POLICIES, SYNTHETIC_FORMAT, synthetic_log


def fold(name: str, policies: Policies, events: list[LogEvent], client_of: Any, *,
         gap: float, bucket: float | None, max_buckets: int, top: int) -> dict[str, Any]:
    """One candidate's figures, computed request by request (the reference)."""
    counts = dict.fromkeys(("admitted", "delayed", "rejected", "not_limited",
                            "shadow_rejected"), 0)
    last: dict[str, float] = {}
    rejected_load: dict[str, bool] = {}
    rejections: dict[str, int] = {}
    page_loads = page_loads_rejected = 0
    series = Series(1.0 if bucket is None else bucket, max_buckets, fixed=bucket is not None)
    delays = DelaySketch()
    top_clients, top_counters = SpaceSaving(1000), SpaceSaving(1000)
    for r in replay(policies, events):
        ev, d, c = r.event, r.decision, client_of(r.event)
        if c not in last or ev.t - last[c] > gap:
            page_loads += 1
            rejected_load[c] = False
        last[c] = ev.t
        rejections.setdefault(c, 0)
        verdict = "not_limited" if d is None else d.verdict
        if verdict == "rejected":
            assert d is not None
            counts["rejected"] += 1
            if not rejected_load[c]:
                rejected_load[c] = True
                page_loads_rejected += 1
            rejections[c] += 1
            top_clients.add(c)
            top_counters.add(rejected_counter(policies, d))
            series.add(ev.t, 2)
        elif verdict == "delayed":
            assert d is not None
            counts["delayed"] += 1
            delays.add(d.decision.delay)
            series.add(ev.t, 1)
        else:
            counts["admitted"] += 1
            if verdict == "not_limited":
                counts["not_limited"] += 1
            if verdict == "shadow-rejected":
                counts["shadow_rejected"] += 1
            delays.add(0.0)
            series.add(ev.t, 0)
    clients = len(last)
    affected = sum(1 for n in rejections.values() if n)
    return {
        "name": name, "source": policies.source,
        "requests": counts["admitted"] + counts["delayed"] + counts["rejected"], **counts,
        "clients": clients, "clients_affected": affected, "page_loads": page_loads,
        "page_loads_rejected": page_loads_rejected,
        "delay_p50": delays.quantile(0.5), "delay_p99": delays.quantile(0.99),
        "delay_max": delays.max,
        "clients_affected_share": affected / clients if clients else 0.0,
        "page_load_share": page_loads_rejected / page_loads if page_loads else 0.0,
        "top_clients": [{"key": k.key, "count": k.count, "error": k.error}
                        for k in top_clients.top(top)],
        "top_counters": [{"key": k.key, "count": k.count, "error": k.error}
                         for k in top_counters.top(top)],
        "series": series.to_json(),
    }


def test_compare_is_the_plain_fold_of_each_candidates_replay(tmp_path: Path) -> None:
    synthetic_log(tmp_path / "access.log", 3000)
    with read_log(tmp_path / "access.log", SYNTHETIC_FORMAT) as reader:
        events = list(reader)
    cands = [Candidate("several", parse_policies_text(POLICIES)),
             Candidate("per-ip", parse_policies_text(PER_IP)),
             Candidate("dry-run", parse_policies_text(
                 POLICIES.replace('domain = "web"\n', 'domain = "web"\ndry_run = true\n', 1)))]
    who = client_resolver(cands[0].policies)
    settings = {"gap": 0.5, "bucket": None, "max_buckets": 16, "top": 5}
    got = compare(cands, events, client_of=who, **settings).to_json()
    want = [fold(c.name, c.policies, events, who.of, **settings) for c in cands]
    assert got["events"] == len(events)
    assert (got["first_t"], got["last_t"]) == (events[0].t, events[-1].t)
    for g, w in zip(got["policies"], want, strict=True):
        assert g == w, g["name"]
    # the log meets every kind of count, and the series did halve
    several, _, dry = got["policies"]
    assert several["delayed"] and several["rejected"] and several["not_limited"]
    assert dry["shadow_rejected"] and not dry["rejected"]
    assert several["series"]["width"] > 1.0


def test_a_request_back_in_time_after_the_series_halved_is_counted_in_its_new_bucket() -> None:
    # compare takes any iterable: here a rejection far ahead halves the series between two
    # requests admitted at t=5 (bucket 5 before, 0 after): the second must not reuse 5.
    policies = parse_policies_text(PER_IP.replace(
        'algorithm = "gcra", rate = "2/s", burst = 3', 'algorithm = "fixed-window", '
        'rate = "1/1000s"'))
    events = [LogEvent(t, c, "GET", "/", 200, 0, None, None, None, {}, {}, i + 1)
              for i, (t, c) in enumerate([(0.0, "198.51.100.4"), (5.0, "198.51.100.1"),
                                          (5.0, "198.51.100.2"), (50.0, "198.51.100.2"),
                                          (5.0, "198.51.100.3")])]
    settings = {"gap": 1.0, "bucket": None, "max_buckets": 8, "top": 5}
    got = compare([Candidate("p", policies)], events, **settings).to_json()["policies"][0]
    want = fold("p", policies, events, lambda e: e.client, **settings)
    assert got["rejected"] == 1
    assert got["series"] == want["series"]
    assert got["series"]["admitted"][0] == 4
