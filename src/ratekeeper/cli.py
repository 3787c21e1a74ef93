"""The `ratekeeper` command.

    ratekeeper simulate ALGORITHM --rate RATE [--burst N] [--nodelay | --delay D]
                        [--store URL] --trace FILE|- [--summary] [--events]
    ratekeeper simulate --policies FILE [--format FORMAT] [--store URL] --trace FILE|-
                        [--summary] [--events]

`simulate` replays a JSON Lines trace of ``{"t": seconds, "key": "...", "cost": 1}`` events
through a policy on the trace's own clock and prints one JSON object per event, in order:
the event's ``t`` and ``key``, then ``allowed``, ``remaining``, ``retry_after`` (0 when
allowed, null when the cost can never be admitted), ``reset_after`` and ``delay`` (0 unless
an admitted request is queued). It answers "what would this policy have done to
this traffic?" before you deploy it; with ``--store redis://...`` the same replay runs
through the Redis scripts (on the trace's clock, so the answers must be identical);
``--store`` takes every store URL the API and the service take (`ratekeeper.stores.open_store`).

With ``--policies``, the trace is of HTTP requests and the policies file's ``[http]`` part
decides each exactly as the middleware would (`ratekeeper.replay.replay`): JSON Lines such
as ``{"t": 0.5, "method": "POST", "path": "/login", "client": "203.0.113.7", "headers":
{"x-user": "ann"}}`` by default, or an access log (``--format combined``, ``common``,
``jsonl`` or an nginx ``log_format`` string). Each output line gives the event's ``t``,
``method``, ``path`` and ``client``, its ``verdict`` (``allowed``, ``delayed``,
``rejected``, ``shadow-*`` or ``not_limited``) and ``status``, then the decision.

The other subcommands live beside what they drive and are imported here, explicitly:
``inspect`` (`ratekeeper.stores._cli`, needs the redis extra), ``serve`` and
``check-config`` (`ratekeeper.service._cli`; ``serve`` needs the service extra). A missing
extra does not hide its subcommand: running it says what to install.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

from ._errors import RateKeeperError
from ._json import decision_json
from ._types import ALGORITHMS, Limit
from .limiter import Limiter
from .stores import open_store
from .testing import ManualClock

__all__ = ["build_parser", "decision_json", "main"]

_Add = Callable[[argparse.ArgumentParser], None]
_Run = Callable[[argparse.Namespace], int]


def _events(stream: IO[str]) -> Iterator[tuple[int, dict[str, Any] | str]]:
    for lineno, raw in enumerate(stream, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            ev = json.loads(line)
        except ValueError as e:
            yield lineno, f"line {lineno}: not JSON ({e}): {line[:80]!r}"
            continue
        if not isinstance(ev, dict):
            yield lineno, f'line {lineno}: expected an object like {{"t": 0.5, "key": "a"}}'
            continue
        yield lineno, ev


#: A replay is not a request path: it waits for a slow store rather than fail over.
REPLAY_TIMEOUT = 5.0


def _open_store(url: str | None) -> Any:
    # A fresh namespace per run, on the trace's clock; keys expire on their own.
    return open_store(url, prefix=f"rk-sim-{uuid.uuid4().hex[:12]}:", client_clock=True,
                      timeout=REPLAY_TIMEOUT)


def simulate(args: argparse.Namespace) -> int:
    if args.policies is not None:
        return _simulate_policies(args)
    if args.algorithm is None or args.rate is None:
        # A usage error, as argparse reports one (it cannot say "these two, or that one").
        print("usage: ratekeeper simulate ALGORITHM --rate RATE ... --trace FILE\n"
              "       ratekeeper simulate --policies FILE ... --trace FILE\n"
              "ratekeeper simulate: error: give an ALGORITHM and --rate, or --policies FILE",
              file=sys.stderr)
        raise SystemExit(2)
    try:
        limit = Limit(
            args.algorithm,
            args.rate,
            burst=args.burst,
            nodelay=args.nodelay,
            delay=args.delay or 0,
            name="simulated",
        )
    except RateKeeperError as e:
        print(f"ratekeeper simulate: {e}", file=sys.stderr)
        return 2
    try:
        store = _open_store(args.store)
    except RateKeeperError as e:
        print(f"ratekeeper simulate: --store: {e}", file=sys.stderr)
        return 2
    clock = ManualClock()
    try:
        stream: IO[str] = (
            sys.stdin if args.trace == "-" else open(args.trace, encoding="utf-8")  # noqa: SIM115
        )
    except OSError as e:
        print(f"ratekeeper simulate: cannot read {args.trace!r}: {e.strerror}", file=sys.stderr)
        return 2
    limiter = Limiter(limit, store, clock=clock, failure="raise")
    show_events = args.events or not args.summary
    per_key: dict[str, list[int]] = {}
    errors = 0
    out = sys.stdout
    try:
        for lineno, ev in _events(stream):
            if isinstance(ev, str):
                errors += 1
                print(json.dumps({"error": ev}), file=out)
                continue
            try:
                t = ev.get("t", clock.now)
                if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
                    raise ValueError(f'"t" must be a finite number of seconds, got {t!r}')
                key = ev.get("key", "default")
                cost = ev.get("cost", 1)
                clock.set(float(t))
                d = limiter.hit(str(key) if isinstance(key, (int, float)) else key, cost)
            except (RateKeeperError, ValueError) as e:
                errors += 1
                print(json.dumps({"error": f"line {lineno}: {e}"}), file=out)
                continue
            if show_events:
                print(json.dumps({"t": t, "key": key, **decision_json(d)}), file=out)
            row = per_key.setdefault(str(key), [0, 0, 0])
            row[0 if d.allowed and not d.delay else 1 if d.allowed else 2] += 1
    finally:
        if stream is not sys.stdin:
            stream.close()
    if args.summary:
        _print_summary(per_key, limit, out)
    if errors:
        print(f"ratekeeper simulate: {errors} event(s) could not be replayed", file=sys.stderr)
        return 1
    return 0


def _simulate_policies(args: argparse.Namespace) -> int:
    """``simulate --policies``: a request trace (or access log) through a policies file."""
    from .policy import PolicyError, load_policies  # noqa: PLC0415
    from .replay import read_log  # noqa: PLC0415
    from .replay._replay import REQUESTS_FORMAT, replay  # noqa: PLC0415

    if args.algorithm is not None or args.rate is not None:
        print("ratekeeper simulate: --policies decides with the file's limits; drop the "
              "ALGORITHM and --rate", file=sys.stderr)
        return 2
    try:
        policies = load_policies(args.policies)
    except PolicyError as e:
        print(f"ratekeeper simulate: {e}", file=sys.stderr)
        return 2
    if policies.http is None:
        print(f"ratekeeper simulate: {args.policies} has no [http] part: nothing says how a "
              "request becomes descriptors (docs/policies.md)", file=sys.stderr)
        return 2
    try:
        store = _open_store(args.store)
    except RateKeeperError as e:
        print(f"ratekeeper simulate: --store: {e}", file=sys.stderr)
        return 2
    fmt = REQUESTS_FORMAT if args.format == "requests" else args.format
    try:
        reader = read_log(args.trace, fmt, window=0.0 if args.format == "requests" else 2.0)
    except (RateKeeperError, OSError) as e:
        print(f"ratekeeper simulate: --trace: {e}", file=sys.stderr)
        return 2
    status = policies.http.status
    show_events = args.events or not args.summary
    counts: dict[str, int] = {}
    out = sys.stdout
    with reader:
        for r in replay(policies, reader, store=store):
            counts[r.verdict] = counts.get(r.verdict, 0) + 1
            if not show_events:
                continue
            ev = r.event
            row: dict[str, Any] = {"t": ev.t, "method": ev.method, "path": ev.path,
                                   "client": ev.client, "verdict": r.verdict,
                                   "status": status if r.verdict == "rejected" else 200}
            if r.decision is not None:
                row.update(decision_json(r.decision.decision))
            print(json.dumps(row), file=out)
    stats = reader.stats
    if args.summary:
        print(f"policies: {args.policies} ({policies.summary()})", file=out)
        for verdict in ("allowed", "delayed", "rejected", "shadow-rejected", "shadow-delayed",
                        "not_limited"):
            print(f"{verdict:<16} {counts.get(verdict, 0):>8}", file=out)
    if stats.malformed_total:
        # An access log's odd lines are counted and shown, never fatal; a request trace is
        # the user's own file, and a bad line in it is an error (as for ALGORITHM traces).
        print(f"ratekeeper simulate: {stats.summary()}", file=sys.stderr)
        return 1 if args.format == "requests" else 0
    return 0


def _print_summary(per_key: dict[str, list[int]], limit: Limit, out: IO[str]) -> None:
    width = max([len("total"), *(len(k) for k in per_key)])
    print(f"policy: {_describe(limit)}", file=out)
    print(f"{'key':<{width}}  {'admitted':>8}  {'delayed':>7}  {'rejected':>8}", file=out)
    tot = [0, 0, 0]
    for k in sorted(per_key):
        a, dl, r = per_key[k]
        tot = [tot[0] + a, tot[1] + dl, tot[2] + r]
        print(f"{k:<{width}}  {a:>8}  {dl:>7}  {r:>8}", file=out)
    print(f"{'total':<{width}}  {tot[0]:>8}  {tot[1]:>7}  {tot[2]:>8}", file=out)


def _describe(limit: Limit) -> str:
    """The policy as the command line gave it: ``leaky-bucket 10r/s burst=20 nodelay``."""
    words = [limit.algorithm, str(limit.rate)]
    if limit.burst is not None and limit.algorithm in ("token-bucket", "gcra", "leaky-bucket"):
        words.append(f"burst={limit.burst:g}")
    if limit.nodelay:
        words.append("nodelay")
    if limit.delay:
        words.append(f"delay={limit.delay}")
    return " ".join(words)


def _add_simulate(p: argparse.ArgumentParser) -> None:
    p.add_argument("algorithm", nargs="?", choices=list(ALGORITHMS),
                   help="the algorithm to replay (or give --policies)")
    p.add_argument("--rate", help='e.g. "10/s", "100/minute", "3/2s", "10r/s"')
    p.add_argument("--policies", default=None, metavar="FILE",
                   help="a policies file with an [http] part: the trace is of HTTP requests, "
                   "decided as the middleware would")
    p.add_argument("--format", default="requests",
                   help="with --policies: the trace's format: requests (JSON Lines of "
                   '{"t", "method", "path", "client", "headers"}, the default), combined, '
                   "common, jsonl, or an nginx log_format string")
    p.add_argument(
        "--burst",
        type=float,
        default=None,
        help="bucket capacity (token-bucket, gcra) or nginx burst (leaky-bucket)",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--nodelay", action="store_true", help="leaky-bucket: nginx nodelay")
    g.add_argument("--delay", type=int, default=None, help="leaky-bucket: nginx delay=D")
    p.add_argument(
        "--store",
        default=None,
        help="replay through a store: memory:// (the default), redis://127.0.0.1:6379/0, "
        "redis+cluster://..., ...",
    )
    p.add_argument("--trace", required=True, help="JSON Lines file of events, or - for stdin")
    p.add_argument(
        "--summary",
        action="store_true",
        help="print admitted/delayed/rejected per key instead of one line per event",
    )
    p.add_argument("--events", action="store_true", help="with --summary: print the events too")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ratekeeper", description="Exact rate limiting.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("simulate", help="replay a trace of requests through a policy")
    _add_simulate(p)
    p.set_defaults(run=simulate)
    _add_replay_commands(sub)
    for name, help_, (add, run) in _subcommands():
        sp = sub.add_parser(name, help=help_, description=help_)
        add(sp)
        sp.set_defaults(run=run)
    return parser


def _add_replay_commands(sub: Any) -> None:
    """``replay`` (candidate policies side by side over a log) and ``recommend`` (rate and
    burst from a log), in `ratekeeper.replay._cli`."""
    from .replay import _cli as replay_cli  # noqa: PLC0415

    for name, help_, add, run in (
            ("replay", "replay an access log through candidate policies, side by side",
             replay_cli.add_replay, replay_cli.run_replay),
            ("recommend", "recommend rate and burst per limit from an access log",
             replay_cli.add_recommend, replay_cli.run_recommend)):
        sp = sub.add_parser(name, help=help_, description=help_)
        add(sp)
        sp.set_defaults(run=run)


def _subcommands() -> list[tuple[str, str, tuple[_Add, _Run]]]:
    """The subcommands of the optional parts: (name, help, (add_arguments, run))."""
    out: list[tuple[str, str, tuple[_Add, _Run]]] = []
    inspect = "show a key's state, TTL and remaining quota in a Redis store"
    try:
        from .stores import _cli as inspect_cli  # noqa: PLC0415 (needs redis-py)
    except ImportError as e:
        out.append(("inspect", inspect, _missing("inspect", "redis", e)))
    else:
        out.append(("inspect", inspect, (inspect_cli.add_arguments, inspect_cli.run)))
    # Needs only the standard library (and tomli on 3.10); `serve` imports the servers when
    # it runs and says itself which extra is missing.
    from .service import _cli as service_cli  # noqa: PLC0415

    out.append(("serve", "run the decision service (HTTP JSON API and Envoy gRPC)",
                (service_cli.add_serve, service_cli.run_serve)))
    out.append(("check-config", "validate policy files; list every error",
                (service_cli.add_check, service_cli.run_check)))
    return out


def _missing(command: str, extra: str, error: ImportError) -> tuple[_Add, _Run]:
    """A subcommand whose extra is not installed: any arguments, one kind message."""

    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run(args: argparse.Namespace) -> int:
        print(f"ratekeeper {command} needs the {extra} extra: pip install "
              f"'ratekeeper[{extra}]' ({error})", file=sys.stderr)
        return 2

    return add, run


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
