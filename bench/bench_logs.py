"""How fast the replay log readers read, and in how much memory.

    .venv/bin/python bench/bench_logs.py [--lines 1000000] [--format combined] [--gzip]

Writes a generated ``combined`` log of `--lines` lines to a temporary file (2,000 clients,
IPv4 and IPv6, ~50 requests per second of log time, a few lines out of order by up to 1 s as
nginx writes them at request end), then reads it with `ratekeeper.replay.read_log` and
prints lines/s and the peak memory: tracemalloc's peak of Python allocations during the
read (run separately, since tracing slows it) and the process's peak RSS. A reader in
constant memory has the same peak for 100k and 1M lines: run both to see it.
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from ratekeeper.replay import read_log

AGENTS = ['Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0',
          'curl/8.5.0', 'bot \\x22quoted\\x22/1.0', 'python-httpx/0.27']
PATHS = ["/", "/api/users/42", "/api/search?q=rate+limit", "/static/app.js",
         "/index.html?page=2"]


def generate(path: Path, n: int, seed: int = 1, compress: bool = False) -> None:
    rng = random.Random(seed)
    clients = [f"10.{i // 250}.{i % 250}.{rng.randint(1, 254)}" for i in range(1500)] + [
        f"2001:db8::{i:x}" for i in range(500)]
    t0 = 1_700_000_000.0
    opener = gzip.open if compress else open
    with opener(path, "wt", encoding="utf-8") as f:
        for i in range(n):
            t = t0 + i / 50.0 - (rng.random() if i % 97 == 0 else 0.0)
            stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(t))
            f.write(f'{rng.choice(clients)} - - [{stamp}] "GET {rng.choice(PATHS)} HTTP/1.1" '
                    f'200 {rng.randint(0, 50_000)} "-" "{rng.choice(AGENTS)}"\n')


def read(path: Path, fmt: str) -> tuple[int, int, float]:
    t = time.perf_counter()
    with read_log(path, fmt) as events:
        n = sum(1 for _ in events)
        lines = events.stats.lines
    return lines, n, time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--format", default="combined")
    ap.add_argument("--gzip", action="store_true", help="read it gzip'd")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / ("access.log.gz" if args.gzip else "access.log")
        generate(path, args.lines, compress=args.gzip)
        size = os.path.getsize(path)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        lines, events, secs = read(path, args.format)
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        tracemalloc.start()
        read(path, args.format)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    print(f"python {sys.version.split()[0]}, {args.format}{' gzip' if args.gzip else ''}, "
          f"{lines} lines ({size / 1e6:.1f} MB) -> {events} events")
    print(f"read: {secs:.2f} s, {lines / secs:,.0f} lines/s, {size / secs / 1e6:.1f} MB/s")
    print(f"memory: tracemalloc peak {peak / 1e6:.2f} MB during a read; "
          f"peak RSS {rss1 / 1024:.1f} MB (before the read {rss0 / 1024:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
