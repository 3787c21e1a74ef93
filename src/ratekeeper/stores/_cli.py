"""``ratekeeper inspect``: what a Redis store holds for one key.

    ratekeeper inspect KEY --store URL [--limit SPEC]... [--prefix rk:] [--now T] [--json]

With ``--limit`` (repeatable), each limit's state for KEY is read and decoded as the
algorithm holds it, with its TTL and the decision a request of cost 1 would get now
(``remaining``; nothing is charged). SPEC is ``"ALGORITHM RATE [burst=N] [nodelay]
[delay=D] [name=NAME] [scope=global]"``, e.g. ``"gcra 10/s burst=20 name=api"``; the name
must be the one the application uses (it is part of the key, with the algorithm). Without
``--limit``, every key stored for KEY under the prefix is listed raw (the limit name and
algorithm its key names, type, TTL, value).

Remaining is computed on the server's clock, or at ``--now T`` (seconds) for a namespace
written on a client clock, such as a simulation's.

``ratekeeper.cli`` imports this module for the subcommand (`add_arguments`, `run`);
without redis-py the import fails and the CLI says what to install.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

from .._errors import ConfigError, RateKeeperError
from .._types import GLOBAL_KEY, Limit
from ._url import open_store, scheme_of
from .redis import DEFAULT_PREFIX, RedisStore, split_state_key

__all__ = ["add_arguments", "parse_limit_spec", "run"]


def parse_limit_spec(spec: str) -> Limit:
    """``"gcra 10/s burst=20 name=api"`` -> ``Limit("gcra", "10/s", burst=20, name="api")``."""
    words = shlex.split(spec)
    if len(words) < 2:
        raise ValueError(
            f"a limit is 'ALGORITHM RATE [burst=N] [nodelay] [delay=D] [name=NAME] "
            f"[scope=global]', got {spec!r}"
        )
    algorithm, rate, *options = words
    kwargs: dict[str, Any] = {}
    for opt in options:
        name, eq, value = opt.partition("=")
        if opt == "nodelay":
            kwargs["nodelay"] = True
        elif eq and name == "burst":
            kwargs["burst"] = float(value)
        elif eq and name == "delay":
            kwargs["delay"] = int(value)
        elif eq and name in ("name", "scope"):
            kwargs[name] = value
        else:
            raise ValueError(f"unknown limit option {opt!r} in {spec!r}")
    return Limit(algorithm, rate, **kwargs)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Show what a Redis store holds for KEY: state, TTL, remaining."
    p.add_argument("key", help="the rate-limit key, as the application passes it")
    p.add_argument("--store", required=True,
                   help="redis://host:port/db, redis+cluster://host:port, redis+sentinel://...")
    p.add_argument("--limit", action="append", default=[], metavar="SPEC",
                   help='e.g. "gcra 10/s burst=20 name=api" (repeatable)')
    p.add_argument("--prefix", default=DEFAULT_PREFIX,
                   help=f"key prefix (default {DEFAULT_PREFIX!r})")
    p.add_argument("--now", type=float, default=None,
                   help="decide at this time (seconds) instead of the server's clock")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--timeout", type=float, default=2.0, help="seconds (default 2)")


def _number(x: Any) -> Any:
    if isinstance(x, tuple):
        return [_number(v) for v in x]
    return x


def run(args: argparse.Namespace) -> int:
    try:
        limits = [parse_limit_spec(s) for s in args.limit]
    except (ValueError, RateKeeperError) as e:
        print(f"ratekeeper inspect: {e}", file=sys.stderr)
        return 2
    try:
        if scheme_of(args.store) == "memory":
            raise ConfigError(
                f"--store {args.store}: a memory store lives inside one process, so there is "
                "nothing to inspect from outside it; point --store at the Redis the "
                "application uses (redis://host:6379/0, redis+cluster://..., ...)")
        store = open_store(args.store, prefix=args.prefix, timeout=args.timeout,
                           client_clock=args.now is not None, breaker_failures=0)
        assert isinstance(store, RedisStore)  # every non-memory scheme is a Redis one
    except RateKeeperError as e:
        print(f"ratekeeper inspect: {e}", file=sys.stderr)
        return 2
    out = sys.stdout
    try:
        if limits:
            rows = []
            for lim in limits:
                key = args.key if lim.scope == "key" else GLOBAL_KEY
                (ks,) = store.inspect([lim], key, args.now)
                d = ks.decision
                rows.append({
                    "limit": lim.name, "algorithm": lim.algorithm, "redis_key": ks.redis_key,
                    "type": ks.kind, "ttl": ks.ttl, "immortal": ks.immortal,
                    "state": _number(ks.state), "raw": ks.raw, "now": ks.now,
                    "remaining": d.remaining, "allowed": d.allowed,
                    "retry_after": 0 if d.allowed else d.retry_after,
                    "reset_after": d.reset_after,
                })
            if args.json:
                print(json.dumps(rows), file=out)
            else:
                for r in rows:
                    life = "absent" if r["type"] == "none" else (
                        "NO EXPIRY" if r["immortal"] else f"ttl {r['ttl']:.3f}s")
                    verdict = ("allowed" if r["allowed"]
                               else f"rejected, retry in {r['retry_after']}s")
                    print(f"{r['redis_key']}  {r['algorithm']}  {life}", file=out)
                    print(f"    state {r['state']!r}  raw {r['raw']!r}", file=out)
                    print(f"    remaining {r['remaining']} (a request of 1 now: {verdict})",
                          file=out)
            return 0
        found = store.scan(args.key)
        # A state key names its limit and algorithm; None for keys this version did not write.
        named = [split_state_key(k) or (None, None) for k, _, _, _ in found]
        if args.json:
            print(json.dumps([{"redis_key": k, "limit": name, "algorithm": algo, "type": t,
                               "ttl": ttl, "raw": raw}
                              for (k, t, ttl, raw), (name, algo) in zip(found, named,
                                                                         strict=True)]),
                  file=out)
        elif not found:
            print(f"no state for {args.key!r} under prefix {args.prefix!r}", file=out)
        else:
            for (k, kind, ttl, raw), (name, algo) in zip(found, named, strict=True):
                life = "NO EXPIRY" if ttl is None else f"ttl {ttl:.3f}s"
                what = f"limit {name} ({algo})" if name is not None else "not a state key"
                print(f"{k}  {what}  {kind}  {life}  {raw!r}", file=out)
            print("(pass --limit SPEC to decode the state and compute remaining)", file=out)
        return 0
    except RateKeeperError as e:
        print(f"ratekeeper inspect: {e}", file=sys.stderr)
        return 1
    finally:
        store.close()
