"""Side-by-side benchmark of in-memory rate limiters, reported as ratios.

This is a benchmark, not a test: it never fails on a slow number. It compares
``ratekeeper``'s in-memory limiter with peer libraries (``limits``,
``throttled-py``, ``token-bucket``, ``pyrate-limiter``) and with ``bare``, a
hand-written loop doing the minimum any limiter must do per decision.

Absolute numbers drift on a shared machine, so every figure that matters is a
ratio measured under the same conditions:

* Throughput: interleaved rounds. In each round every contender runs one batch
  of N calls (the order rotates between rounds); per round we take the
  contender's time divided by ``bare``'s time in the same round, and report the
  median of those ratios (``x bare``: 1.00 = as fast as bare, 8.00 = eight
  times the cost per decision).
* Memory: each contender runs in a fresh subprocess, hits K distinct keys
  ``user:{i}`` once each, and reports growth per key from ``tracemalloc`` and
  (in a second subprocess, without tracemalloc) from RSS. The key strings are
  part of every figure, including the plain ``dict[str, float]`` baseline.

Run ``python bench/bench_memory.py --help`` for the options; see
``bench/README.md`` for the method and how to read the output.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.metadata
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

Hit = Callable[[str], object]  # true when admitted (a bool, or ratekeeper's Decision)

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"

HOT_KEY = "user:hot"
MANY_KEYS = 10_000
SETTLE_S = 0.02  # pause after each batch so peers' background timers drain
CHILD_TIMEOUT_S = 1800  # one memory subprocess; limits' fills at 1e6 keys take minutes


# --------------------------------------------------------------------------- limits


@dataclass(frozen=True)
class Spec:
    """A limit in neutral terms: ``rate`` events per ``period`` seconds, ``burst`` at once."""

    label: str
    rate: int
    period: int
    burst: int

    @property
    def interval(self) -> float:
        return self.period / self.rate


# Nearly every call admitted: the measured path is the admit path.
ADMIT = Spec("admit", 1_000_000_000, 1, 1_000_000_000)
# Nearly every call rejected: one admit per key per minute, and the warm-up spends it.
REJECT = Spec("reject", 1, 60, 1)
# Memory: each key is hit once and must be remembered for an hour, so no store
# may legitimately drop it during the fill; a second hit on a key must be rejected.
MEMORY = Spec("memory", 1, 3600, 1)


class Skip(Exception):
    """A contender cannot run here (library missing, API not there yet)."""


# --------------------------------------------------------------------------- contenders


@dataclass(frozen=True)
class Contender:
    name: str
    dist: str | None  # distribution name, for the version column
    thread_safe: str
    make: Callable[[Spec, int], Hit] = field(repr=False)  # (spec, max_keys) -> hit


def _need(module: str, pip_name: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise Skip(f"{pip_name} not installed (pip install {pip_name}): {exc}") from exc


def make_bare(spec: Spec, max_keys: int) -> Hit:
    """now = monotonic(); one dict lookup; one compare; one float store on admit."""
    d: dict[str, float] = {}
    get = d.get
    mono = time.monotonic
    interval = spec.interval

    def hit(key: str) -> bool:
        now = mono()
        if get(key, 0.0) <= now:
            d[key] = now + interval
            return True
        return False

    return hit


def _limits_maker(strategy: str) -> Callable[[Spec, int], Hit]:
    def make(spec: Spec, max_keys: int) -> Hit:
        _need("limits", "limits")
        from limits import RateLimitItemPerSecond, storage, strategies  # noqa: PLC0415

        cls = strategies.STRATEGIES[strategy]  # fixed-window, moving-window, ...
        # Window limiters have no burst: the window amount is the burst.
        item = RateLimitItemPerSecond(spec.burst, multiples=spec.period)
        limiter = cls(storage.MemoryStorage())
        return partial(limiter.hit, item)

    return make


def _throttled_maker(using: str) -> Callable[[Spec, int], Hit]:
    def make(spec: Spec, max_keys: int) -> Hit:
        _need("throttled", "throttled-py")
        from throttled import MemoryStore, Throttled  # noqa: PLC0415

        unit = {1: "s", 60: "m", 3600: "h"}[spec.period]
        throttle = Throttled(
            using=using,
            quota=f"{spec.rate}/{unit} burst {spec.burst}",
            # The default MemoryStore is a global LRU capped at 1024 keys.
            store=MemoryStore(options={"MAX_SIZE": max_keys}),
        )
        limit = throttle.limit

        def hit(key: str) -> bool:
            return not limit(key).limited

        return hit

    return make


def make_token_bucket(spec: Spec, max_keys: int) -> Hit:
    token_bucket = _need("token_bucket", "token-bucket")
    limiter = token_bucket.Limiter(
        spec.rate / spec.period, spec.burst, token_bucket.MemoryStorage()
    )
    consume: Hit = limiter.consume
    return consume


def make_pyrate(spec: Spec, max_keys: int) -> Hit:
    _need("pyrate_limiter", "pyrate-limiter")
    from pyrate_limiter import (  # noqa: PLC0415
        GCRA,
        AbstractBucket,
        BucketFactory,
        Limiter,
        MonotonicClock,
        Rate,
        RateItem,
        StateBucket,
    )

    rates = [Rate(spec.rate, spec.period * 1000, burst=spec.burst)]

    class PerKeyFactory(BucketFactory):
        """The per-name routing pattern from pyrate-limiter's README, with a GCRA StateBucket."""

        def __init__(self) -> None:
            self.clock = MonotonicClock()
            self.buckets: dict[str, AbstractBucket] = {}

        def wrap_item(self, name: str, weight: int = 1) -> RateItem:
            return RateItem(name, self.clock.now(), weight=weight)

        def get(self, item: RateItem) -> AbstractBucket:
            bucket = self.buckets.get(item.name)
            if bucket is None:
                bucket = self.create(StateBucket, rates, algorithm=GCRA())
                self.buckets[item.name] = bucket
            return bucket

    limiter = Limiter(PerKeyFactory())
    # blocking=True is the default and would sleep on a rejection.
    acquire = partial(limiter.try_acquire, blocking=False)  # -> bool for in-memory buckets
    return acquire  # type: ignore[return-value]


def _ratekeeper_rate(spec: Spec) -> list[str]:
    if spec.period == 1:
        return [f"{spec.rate}/s"]
    if spec.period == 60:
        return [f"{spec.rate}/m", f"{spec.rate}/min", f"{spec.rate}/minute", f"{spec.rate}/60s"]
    if spec.period == 3600:
        return [f"{spec.rate}/h", f"{spec.rate}/hour", f"{spec.rate}/3600s"]
    return [f"{spec.rate}/{spec.period}s"]


def _import_ratekeeper() -> Any:
    # Benchmark the working tree, not whatever may be installed.
    if SRC.is_dir() and str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    try:
        rk = importlib.import_module("ratekeeper")
        for name in ("Limit", "Limiter", "MemoryStore"):
            getattr(rk, name)
    except (ImportError, AttributeError) as exc:
        raise Skip(
            f"ratekeeper core not importable yet ({type(exc).__name__}: {exc}); "
            "expected `from ratekeeper import Limit, Limiter, MemoryStore`"
        ) from exc
    return rk


def _ratekeeper_maker(algorithm: str) -> Callable[[Spec, int], Hit]:
    def make(spec: Spec, max_keys: int) -> Hit:
        rk = _import_ratekeeper()
        errors: list[str] = []
        for rate in _ratekeeper_rate(spec):
            try:
                limit = rk.Limit(algorithm, rate, burst=spec.burst)
                break
            except Exception as exc:
                errors.append(f"{rate!r}: {type(exc).__name__}: {exc}")
        else:
            raise Skip(f"ratekeeper Limit({algorithm!r}, ...) rejected {'; '.join(errors)}")
        try:
            limiter = rk.Limiter(limit, store=rk.MemoryStore(max_keys=max_keys))
            rk_hit = limiter.hit
            rk_hit("bench:probe").allowed  # noqa: B018 - fail here, not mid-measurement
        except Exception as exc:
            raise Skip(
                f"ratekeeper Limiter/MemoryStore failed: {type(exc).__name__}: {exc}"
            ) from exc
        # `limiter.hit` itself, as the yardstick calls it: its Decision is true when admitted.
        return rk_hit  # type: ignore[return-value]

    return make


CONTENDERS: list[Contender] = [
    Contender("bare", None, "no (reference)", make_bare),
    Contender("limits fixed-window", "limits", "yes*", _limits_maker("fixed-window")),
    Contender("limits moving-window", "limits", "yes*", _limits_maker("moving-window")),
    Contender(
        "limits sliding-window-ctr", "limits", "mostly*", _limits_maker("sliding-window-counter")
    ),
    Contender("throttled gcra", "throttled-py", "yes", _throttled_maker("gcra")),
    Contender("throttled token-bucket", "throttled-py", "yes", _throttled_maker("token_bucket")),
    Contender("token-bucket", "token-bucket", "no", make_token_bucket),
    Contender("pyrate-limiter gcra", "pyrate-limiter", "yes", make_pyrate),
    Contender("ratekeeper gcra", "ratekeeper", "yes", _ratekeeper_maker("gcra")),
    Contender("ratekeeper token-bucket", "ratekeeper", "yes", _ratekeeper_maker("token-bucket")),
]
BY_NAME = {c.name: c for c in CONTENDERS}

THREAD_NOTES = """\
thread-safe, from reading each library's in-memory code path:
  bare            plain dict read-then-write; two threads can both admit (reference only).
  limits          MemoryStorage takes a per-key RLock for incr/acquire_entry; the expiry timer
                  pops the lock object on expiry, so a thread can briefly get a fresh lock for a
                  key another thread holds (rare lost update). sliding-window-counter does
                  check-then-incr outside any lock and undoes an over-admit with decr().
  throttled-py    every memory atomic action runs under one store-wide threading.Lock.
  token-bucket    no lock; MemoryStorage's docstring says races are "mitigated but not
                  completely eliminated" (replenish() replaces the list consume() decrements).
  pyrate-limiter  Limiter.try_acquire holds one Limiter-wide RLock (all keys serialize).
  ratekeeper      MemoryStore holds one store-wide threading.Lock around each decision
                  (src/ratekeeper/stores/memory.py when this harness was written; re-check)."""


# --------------------------------------------------------------------------- throughput


@dataclass
class Scenario:
    label: str
    short: str
    spec: Spec
    many: bool


SCENARIOS = [
    Scenario("one hot key, admit path (1e9/s, burst 1e9)", "hot-admit", ADMIT, many=False),
    Scenario("one hot key, reject path (1/min, burst 1)", "hot-reject", REJECT, many=False),
    Scenario(f"{MANY_KEYS:,} keys cycled, admit path", "10k-admit", ADMIT, many=True),
    Scenario(f"{MANY_KEYS:,} keys cycled, reject path", "10k-reject", REJECT, many=True),
]


@dataclass
class ThroughputRow:
    name: str
    calls_per_s: float | None = None
    ns_per_call: float | None = None
    x_bare: float | None = None
    admitted: float | None = None
    skipped: str | None = None
    times: list[float] = field(default_factory=list)


def _key_sequence(calls: int, many: bool) -> list[str]:
    if not many:
        return [HOT_KEY] * calls
    keys = [f"user:{i}" for i in range(MANY_KEYS)]
    return (keys * math.ceil(calls / MANY_KEYS))[:calls]


def run_scenario(
    scenario: Scenario, contenders: list[Contender], rounds: int, calls: int
) -> list[ThroughputRow]:
    seq = _key_sequence(calls, scenario.many)
    warm = seq[: min(len(seq), MANY_KEYS)]
    rows = {c.name: ThroughputRow(c.name) for c in contenders}
    hits: dict[str, Hit] = {}
    admitted: dict[str, int] = {}
    for c in contenders:
        try:
            hit = c.make(scenario.spec, 2 * MANY_KEYS)
            sum(map(bool, map(hit, warm)))
        except Skip as exc:
            rows[c.name].skipped = str(exc)
            continue
        except Exception as exc:  # a peer or a half-written core blew up: report, go on
            rows[c.name].skipped = f"error during warm-up: {type(exc).__name__}: {exc}"
            continue
        hits[c.name] = hit
        admitted[c.name] = 0

    for r in range(rounds):
        names = list(hits)
        k = r % len(names) if names else 0
        for name in names[k:] + names[:k]:
            hit = hits[name]
            gc.collect()
            try:
                t0 = time.perf_counter()
                # Results by truth value, as the yardstick uses them (`if hit(key):`): a
                # contender's own result type (ratekeeper's Decision) needs no adapter frame.
                ok = sum(map(bool, map(hit, seq)))
                dt = time.perf_counter() - t0
            except Exception as exc:
                rows[name].skipped = f"error in round {r + 1}: {type(exc).__name__}: {exc}"
                del hits[name]
                continue
            rows[name].times.append(dt)
            admitted[name] += ok
            time.sleep(SETTLE_S)

    bare_times = rows["bare"].times if "bare" in hits else None
    for name in hits:
        row = rows[name]
        med = statistics.median(row.times)
        row.calls_per_s = calls / med
        row.ns_per_call = med / calls * 1e9
        row.admitted = admitted[name] / (rounds * calls)
        if bare_times:
            row.x_bare = statistics.median(
                t / b for t, b in zip(row.times, bare_times, strict=True)
            )
    return [rows[c.name] for c in contenders]


# --------------------------------------------------------------------------- memory


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: peak RSS is the best portable figure
        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def memory_child(name: str, mode: str, keys: int) -> dict[str, Any]:
    """Runs inside a fresh interpreter; returns growth after ``keys`` distinct keys."""
    contender = BY_NAME[name]
    if mode == "tracemalloc":
        tracemalloc.start(1)
    hit = contender.make(MEMORY, max(2 * keys, 2_000_000))
    hit("bench:warmup")  # lazily-built structures and threads are not per-key cost
    gc.collect()
    before_rss = rss_bytes()
    before_tm = tracemalloc.get_traced_memory()[0] if mode == "tracemalloc" else 0

    t0 = time.perf_counter()
    for i in range(keys):
        hit(f"user:{i}")
    fill_s = time.perf_counter() - t0

    gc.collect()
    after_tm = tracemalloc.get_traced_memory()[0] if mode == "tracemalloc" else 0
    after_rss = rss_bytes()
    # Every key was admitted once and must still be remembered (1 per hour, burst 1).
    retained = not hit("user:0") and not hit(f"user:{keys - 1}")
    out: dict[str, Any] = {"name": name, "mode": mode, "keys": keys, "fill_s": fill_s}
    out["retained"] = retained
    if mode == "tracemalloc":
        out["bytes_per_key"] = (after_tm - before_tm) / keys
    else:
        out["bytes_per_key"] = (after_rss - before_rss) / keys
    return out


@dataclass
class MemoryRow:
    name: str
    keys: int
    tracemalloc: float | None = None
    rss: float | None = None
    retained: bool | None = None
    fill_s: float | None = None
    skipped: str | None = None


def run_memory(contenders: list[Contender], keys: int, timeout: float) -> list[MemoryRow]:
    rows: list[MemoryRow] = []
    for c in contenders:
        row = MemoryRow(c.name, keys)
        rows.append(row)
        for mode in ("tracemalloc", "rss"):
            cmd = [sys.executable, str(Path(__file__).resolve()), "--_child", c.name]
            cmd += ["--_mode", mode, "--keys-mem", str(keys)]
            try:
                proc = subprocess.run(
                    cmd, check=False, capture_output=True, text=True, timeout=timeout
                )
            except subprocess.TimeoutExpired:
                row.skipped = f"{mode} child timed out after {timeout:.0f}s"
                break
            lines = proc.stdout.strip().splitlines()
            if proc.returncode != 0 or not lines:
                tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                row.skipped = f"{mode} child failed (rc={proc.returncode}): {tail}"
                break
            res = json.loads(lines[-1])
            if "skipped" in res:
                row.skipped = res["skipped"]
                break
            if mode == "tracemalloc":
                row.tracemalloc = res["bytes_per_key"]
            else:
                row.rss = res["bytes_per_key"]
                row.fill_s = res["fill_s"]  # the untraced fill time
            row.retained = (
                res["retained"] if row.retained is None else row.retained and res["retained"]
            )
        print(f"  memory: {c.name:<28} {_fmt_mem(row)}", file=sys.stderr, flush=True)
    return rows


def _fmt_mem(row: MemoryRow) -> str:
    if row.skipped:
        return f"skipped: {row.skipped}"
    return f"{row.tracemalloc:.0f} B/key (tracemalloc), {row.rss:.0f} B/key (RSS)"


# --------------------------------------------------------------------------- output


def _versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for dist in ("limits", "throttled-py", "token-bucket", "pyrate-limiter", "ratekeeper"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    if out["ratekeeper"] == "not installed":
        try:
            rk = _import_ratekeeper()
            out["ratekeeper"] = f"{getattr(rk, '__version__', '?')} (working tree)"
        except Skip:
            out["ratekeeper"] = "not importable"
    return out


def _table(headers: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def _n(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def render(
    contenders: list[Contender],
    through: dict[str, list[ThroughputRow]],
    memory: list[MemoryRow],
) -> str:
    out: list[str] = []
    skipped: dict[str, str] = {}
    scenarios = [sc for sc in SCENARIOS if sc.short in through]
    tp = {sc.short: {r.name: r for r in through[sc.short]} for sc in scenarios}
    mem = {m.name: m for m in memory}
    dict_baseline = mem["bare"].tracemalloc if "bare" in mem else None

    for trows in through.values():
        skipped.update({r.name: r.skipped for r in trows if r.skipped})
    skipped.update({m.name: m.skipped for m in memory if m.skipped})

    # -- summary
    first = scenarios[0].short if scenarios else None
    headers = ["contender"]
    if first:
        headers.append(f"calls/s {first}")
    headers += [f"x bare {sc.short}" for sc in scenarios]
    headers += ["thread-safe", "B/key tracemalloc", "B/key RSS"]
    rows: list[list[str]] = []
    for c in contenders:
        row = [c.name]
        if first:
            t = tp[first].get(c.name)
            row.append(_n(t.calls_per_s if t else None, ",.0f"))
        row += [_n(tp[sc.short][c.name].x_bare, ".2f") for sc in scenarios]
        m = mem.get(c.name)
        row += [c.thread_safe, _n(m.tracemalloc if m else None, ".0f")]
        row += [_n(m.rss if m else None, ".0f")]
        rows.append(row)
    right = set(range(1, len(headers))) - {len(headers) - 3}
    out.append("== Summary ==")
    out.append(_table(headers, rows, right))
    out.append(
        "x bare = time per decision / bare's time per decision in the same round, median over\n"
        "rounds (1.00 = as cheap as bare; 10.00 = ten times the cost). '-' = skipped, see below."
    )
    for sc in scenarios:
        out.append(f"  {sc.short:<10} = {sc.label}")

    # -- throughput detail
    for sc in scenarios:
        out.append("")
        out.append(f"== Throughput: {sc.label} ==")
        drows: list[list[str]] = []
        for r in through[sc.short]:
            admitted = None if r.admitted is None else 100 * r.admitted
            drows.append(
                [
                    r.name,
                    "skipped" if r.skipped else _n(r.calls_per_s, ",.0f"),
                    _n(r.ns_per_call, ",.0f"),
                    _n(r.x_bare, ".2f"),
                    _n(admitted, ".2f"),
                ]
            )
        headers = ["contender", "calls/s (median)", "ns/call", "x bare", "admitted %"]
        out.append(_table(headers, drows, {1, 2, 3, 4}))

    # -- memory detail
    if memory:
        out.append("")
        out.append(
            f"== Memory: growth per distinct key, {memory[0].keys:,} keys "
            f"(1/hour burst 1, one hit each), fresh subprocess per figure =="
        )
        mrows = []
        for m in memory:
            ratio = m.tracemalloc / dict_baseline if dict_baseline and m.tracemalloc else None
            retained = "-" if m.retained is None else ("yes" if m.retained else "NO")
            mrows.append(
                [
                    m.name,
                    "skipped" if m.skipped else _n(m.tracemalloc, ".0f"),
                    _n(m.rss, ".0f"),
                    _n(ratio, ".2f"),
                    retained,
                    _n(m.fill_s, ".2f"),
                ]
            )
        headers = ["contender", "B/key tracemalloc", "B/key RSS", "x dict", "retained", "fill s"]
        out.append(_table(headers, mrows, {1, 2, 3, 5}))
        out.append(
            "bare = a plain dict[str, float]; the key strings are included in every figure.\n"
            "retained = after the fill, a second hit on the first and the last key was rejected\n"
            "(a store that dropped keys would show NO and a misleadingly small figure)."
        )

    out.append("")
    out.append(THREAD_NOTES)
    if skipped:
        out.append("")
        out.append("Skipped:")
        out.extend(f"  {name}: {reason}" for name, reason in skipped.items())
    return "\n".join(out)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small run, well under a minute")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 7; quick 3)")
    p.add_argument("--calls", type=int, help="calls per batch (default 200000; quick 10000)")
    p.add_argument(
        "--keys-mem", type=int, help="distinct keys for memory (default 1000000; quick 20000)"
    )
    p.add_argument("--json", type=Path, metavar="OUT", help="also write results as JSON")
    p.add_argument("--only", help="comma-separated contender names (bare is always kept)")
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--list", action="store_true", help="list contender names and exit")
    p.add_argument("--_child", help=argparse.SUPPRESS)
    p.add_argument("--_mode", default="rss", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    keys_mem = args.keys_mem or (20_000 if args.quick else 1_000_000)
    if args._child:
        try:
            res = memory_child(args._child, args._mode, keys_mem)
        except Skip as exc:
            res = {"name": args._child, "skipped": str(exc)}
        print(json.dumps(res))
        return 0

    if args.list:
        print("\n".join(c.name for c in CONTENDERS))
        return 0

    rounds = args.rounds or (3 if args.quick else 7)
    calls = args.calls or (10_000 if args.quick else 200_000)
    contenders = CONTENDERS
    if args.only:
        wanted = {"bare", *(n.strip() for n in args.only.split(","))}
        unknown = wanted - set(BY_NAME)
        if unknown:
            p.error(f"unknown contender(s): {', '.join(sorted(unknown))}; see --list")
        contenders = [c for c in CONTENDERS if c.name in wanted]

    versions = _versions()
    header = (
        f"python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} cpus; "
        f"rounds={rounds} calls/batch={calls:,} keys-mem={keys_mem:,}\n"
        "versions: " + ", ".join(f"{k} {v}" for k, v in versions.items())
    )
    print(header, file=sys.stderr, flush=True)

    started = time.time()
    through: dict[str, list[ThroughputRow]] = {}
    if not args.skip_throughput:
        for sc in SCENARIOS:
            print(f"  throughput: {sc.label} ...", file=sys.stderr, flush=True)
            through[sc.short] = run_scenario(sc, contenders, rounds, calls)
    memory: list[MemoryRow] = []
    if not args.skip_memory:
        memory = run_memory(contenders, keys_mem, timeout=CHILD_TIMEOUT_S)
    dict_baseline = next((m.tracemalloc for m in memory if m.name == "bare"), None)

    print()
    print(header)
    print(render(contenders, through, memory), flush=True)
    elapsed = time.time() - started
    print(f"\n(total {elapsed:.0f}s)")

    if args.json:
        doc = {
            "meta": {
                "python": platform.python_version(),
                "implementation": platform.python_implementation(),
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "rounds": rounds,
                "calls": calls,
                "keys_mem": keys_mem,
                "many_keys": MANY_KEYS,
                "versions": versions,
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
                "elapsed_s": elapsed,
                "limits": {s.label: vars(s) for s in (ADMIT, REJECT, MEMORY)},
                "scenarios": {sc.short: sc.label for sc in SCENARIOS},
            },
            "contenders": {
                c.name: {"thread_safe": c.thread_safe, "dist": c.dist} for c in contenders
            },
            "throughput": {
                label: [
                    {k: v for k, v in vars(r).items() if k != "times"} | {"batch_s": r.times}
                    for r in rows
                ]
                for label, rows in through.items()
            },
            "memory": [vars(m) for m in memory],
            "memory_dict_baseline_bytes_per_key": dict_baseline,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
