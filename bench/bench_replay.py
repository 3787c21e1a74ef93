"""How fast a log replays through one policy, and in how much memory.

    .venv/bin/python bench/bench_replay.py [--lines 1000000] [--compare] [--tracemalloc]

Writes a generated ``combined`` log of `--lines` lines (`bench_logs.generate`: 2,000 clients,
IPv4 and IPv6, ~50 requests per second) to a temporary file, then replays it through one
per-client policy (GCRA 5/s, burst 10) on the memory store with `ratekeeper.replay.replay`
(reading and deciding; ``--compare`` also through `compare`, with its tallies) and prints
lines/s and the process's peak RSS (``--tracemalloc``: tracemalloc's peak of Python
allocations, in a slower run). Not a test: read the numbers.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_logs import generate

from ratekeeper.policy import parse_policies
from ratekeeper.replay import Candidate, compare, read_log
from ratekeeper.replay._replay import replay

POLICY = {"http": {"domain": "web", "descriptors": [["client_ip"]]},
          "domains": {"web": {"descriptors": [{"key": "client_ip", "limits": [
              {"name": "per-client", "algorithm": "gcra", "rate": "5/s", "burst": 10}]}]}}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--tracemalloc", action="store_true")
    args = ap.parse_args()
    policies = parse_policies(POLICY)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "access.log"
        generate(path, args.lines)
        if args.tracemalloc:
            tracemalloc.start()
        t = time.perf_counter()
        with read_log(path, "combined") as events:
            verdicts: dict[str, int] = {}
            for r in replay(policies, events):
                verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
            lines = events.stats.lines
        dt = time.perf_counter() - t
        print(f"replay:  {lines:,} lines in {dt:.1f} s = {lines / dt:,.0f} lines/s  {verdicts}")
        if args.compare:
            t = time.perf_counter()
            with read_log(path, "combined") as events:
                res = compare([Candidate("p", policies)], events,
                              client_of=lambda e: e.client).policies[0]
            dt = time.perf_counter() - t
            print(f"compare: {lines:,} lines in {dt:.1f} s = {lines / dt:,.0f} lines/s  "
                  f"rejected {res.rejected:,}, clients affected {res.clients_affected}")
        if args.tracemalloc:
            print(f"tracemalloc peak: {tracemalloc.get_traced_memory()[1] / 2**20:.1f} MiB")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {rss:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
