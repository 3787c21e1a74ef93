"""``ratekeeper replay`` and ``ratekeeper recommend``: the I/O around `compare` and
`recommend` (files, stdin, gzip, the progress bar, the table, ``--json``).

    ratekeeper replay --policies A.toml [--policies B.toml ...] [--policy LIMIT.FIELD=VALUE,...]
                      --log FILE|- [--format F] [--gap 1] [--bucket 1] [--json OUT]
                      [--html OUT] [--svg DIR] [--png DIR]
    ratekeeper recommend --log FILE|- [--policies P] [--target 99] [--window 60]
                         [--format F] [--json OUT] [--html OUT] [--svg DIR] [--png DIR]

Each ``--policy`` adds a candidate: the first ``--policies`` file with those limits changed
(``--policy per-client.burst=40,per-client.rate=10/s``). A log's malformed lines are counted
and shown on stderr, never fatal. The progress bar goes to stderr, only when it is a terminal.
``--html`` writes the report (`_report`), ``--svg``/``--png`` its charts, one file each.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from .._errors import ConfigError, RateKeeperError
from ..policy import PolicyError, load_policies, parse_policies
from ._compare import Candidate, Comparison, client_resolver, compare, with_overrides
from ._events import LogEvent, ReadStats
from ._formats import JsonFormat
from ._logs import LogReader, detect_format, measure_disorder, read_log, sample_of
from ._recommend import ABUSIVE_SHARE, Recommendation, check_target, recommend
from ._report import PlotExtraMissing, report_html, require_plot, write_pngs, write_svgs

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = ["Progress", "add_recommend", "add_replay", "run_recommend", "run_replay"]


class Progress:
    """A one-line progress report on `stream`, redrawn at most every `interval` seconds;
    silent unless `stream` is a terminal (piped output stays clean) or `force`d."""

    def __init__(self, stream: IO[str], *, interval: float = 0.2, force: bool = False
                 ) -> None:
        isatty = getattr(stream, "isatty", None)
        self.on = force or bool(isatty is not None and isatty())
        self.stream, self.interval = stream, interval
        self.start = self.last = time.monotonic()
        self.drawn = False

    def __call__(self, what: str, n: int) -> None:
        if not self.on:
            return
        now = time.monotonic()
        if now - self.last < self.interval:
            return
        self.last = now
        rate = n / max(now - self.start, 1e-9)
        self.stream.write(f"\r{what}: {n:,} events ({rate:,.0f}/s)   ")
        self.stream.flush()
        self.drawn = True

    def restart(self) -> None:
        self.start = self.last = time.monotonic()

    def done(self) -> None:
        if self.on and self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def _err(cmd: str, msg: str) -> int:
    print(f"ratekeeper {cmd}: {msg}", file=sys.stderr)
    return 2


def _percent(text: str) -> float:
    """``--target``: a percentage of keys (``99``, ``99.5``, ``99%``) -> a share."""
    try:
        v = float(text.strip().rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a percentage: give the share of clients to admit in full, "
            "e.g. 99 or 99.5") from None
    if not 0 < v <= 100:
        raise argparse.ArgumentTypeError(
            f"{text!r} is out of range: a percentage above 0 and at most 100, e.g. 99")
    check_target(v / 100)
    return v / 100


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds above 0")
    return v


def _reader(args: argparse.Namespace, source: Any) -> LogReader:
    grow = getattr(args, "grow_window", False)
    return read_log(source, args.format, window=args.window_order,
                    extra_variables=tuple(args.variable), grow_window=grow,
                    max_pending=STREAM_MAX_PENDING if grow else 1_000_000)


#: The order window a stream (stdin), which cannot be read twice to measure it, starts
#: with; it grows to the most a line so far was out of order (`read_log`'s `grow_window`),
#: holding at most `STREAM_MAX_PENDING` lines however far it grows (a held line of the
#: combined format is about 850 bytes: some 210 MB at most).
STREAM_WINDOW = 2.0
STREAM_MAX_PENDING = 250_000


#: What ``--field NAME=KEY`` may name: `JsonFormat`'s parameters.
JSON_FIELDS = ("time", "client", "method", "path", "request", "status", "bytes",
               "user_agent", "referer", "host", "headers")


def json_format_of(fields: list[str]) -> JsonFormat:
    """``--field time=ts --field client=remote ...`` -> the `JsonFormat` reading those names
    (a name given twice: each key tried in order; the others keep their defaults)."""
    names: dict[str, list[str]] = {}
    for f in fields:
        name, sep, key = f.partition("=")
        name, key = name.strip(), key.strip()
        if not sep or not key or name not in JSON_FIELDS:
            raise ConfigError(f"--field {f!r}: write NAME=KEY (the log's key for it, dotted "
                              f"for a nested one: client=request.remote_ip), NAME one of "
                              f"{', '.join(JSON_FIELDS)}")
        names.setdefault(name, []).append(key)
    if len(names.get("headers", ())) > 1:
        raise ConfigError(f"--field headers= names one object of headers, got "
                          f"{names['headers']}")
    kwargs: dict[str, Any] = {k: tuple(v) for k, v in names.items() if k != "headers"}
    if "headers" in names:
        kwargs["headers"] = names["headers"][0]
    return JsonFormat(**kwargs)


def _settle_log(args: argparse.Namespace, source: str) -> None:
    """Before the read: ``--field`` makes the format JSON Lines with those names, ``--format
    auto`` becomes the format the first lines are in, and an unset ``--order-window`` the
    disorder a first pass over the file measures (a stream keeps `STREAM_WINDOW`). Raises
    what opening the log raises."""
    if args.field and not isinstance(args.format, JsonFormat):
        if args.format not in ("auto", "jsonl", "json"):
            raise ConfigError(f"--field names the keys of a JSON Lines log, and --format "
                              f"{args.format!r} is not jsonl: drop one of them")
        args.format = json_format_of(args.field)
    if args.format == "auto":
        if source != "-":
            args.format = detect_format(sample_of(source))
        else:
            peek = getattr(sys.stdin.buffer, "peek", None)
            head = peek(1 << 16) if peek is not None else b""
            args.format = ("combined" if head[:2] == b"\x1f\x8b"
                           else detect_format(head.decode("utf-8", "replace")))
    if args.window_order is None:
        args.grow_window = source == "-"
        args.window_order = (STREAM_WINDOW if source == "-"
                             else measure_disorder(source, args.format,
                                                   extra_variables=tuple(args.variable)))


def _check_read(cmd: str, args: argparse.Namespace, stats: ReadStats) -> int:
    """After the read: no event at all is an error (2), clamped lines are one (3) unless
    ``--accept-clamped``; 0 otherwise."""
    if stats.events == 0:
        why = (f"{stats.malformed_total} of its {stats.lines} lines are malformed"
               if stats.malformed_total else f"it has {stats.lines} lines and no request")
        return _err(cmd, f"no readable line in {args.log}: {why}, read as format "
                    f"{args.format!r}; name the log's format with --format (combined, common, "
                    "jsonl, or an nginx log_format string)")
    if stats.late and not args.accept_clamped:
        grown = "" if stats.grown_window is None else (
            f" (standard input: the window grew to {stats.grown_window:g} s as later lines "
            "came, too late for these)")
        print(f"ratekeeper {cmd}: {stats.late} lines were more than --order-window "
              f"{args.window_order:g} s out of order{grown} and were clamped to the time of "
              "the line before them, so the figures are not exact: raise --order-window, "
              "or pass --accept-clamped to accept them", file=sys.stderr)
        return 3
    return 0


def _clamped_row(stats: ReadStats) -> str:
    return f"\nclamped lines: {stats.late} (out of order beyond --order-window)" \
        if stats.late else ""


def _add_log(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log", required=True, metavar="FILE",
                   help="the access log (gzip'd or not), or - for stdin")
    p.add_argument("--format", default="auto",
                   help="auto (the default: combined, common or jsonl, as the first lines "
                   "read), combined, common, jsonl, trace, an nginx log_format string "
                   "('$remote_addr ...') or an Apache LogFormat string ('%%h %%l %%u %%t ...')")
    p.add_argument("--order-window", dest="window_order", type=float, default=None,
                   metavar="S", help="seconds a line may be out of order (default: a file is "
                   f"read once first to measure it; stdin starts at {STREAM_WINDOW:g} and "
                   "grows to the most a line so far was out of order)")
    p.add_argument("--field", action="append", default=[], metavar="NAME=KEY",
                   help="a JSON Lines log's key for NAME (time, client, method, path, "
                   "request, status, bytes, user_agent, referer, host, headers), e.g. "
                   "--field time=ts --field client=request.remote_ip; the log is then read "
                   "as jsonl")
    p.add_argument("--variable", action="append", default=[], metavar="NAME",
                   help="a variable your nginx configuration defines (map, set) that the "
                   "--format log_format uses; repeat for each")
    p.add_argument("--accept-clamped", action="store_true",
                   help="exit 0 even when lines were clamped (out of order beyond the "
                   "window)")
    p.add_argument("--gap", type=_positive, default=1.0, metavar="S",
                   help="one client's requests at most S seconds apart are one page load "
                   "(default 1)")
    p.add_argument("--bucket", type=_positive, default=None, metavar="S",
                   help="seconds per point of the time series, kept as given (default: "
                   "chosen from 1 s, 2 s, 10 s, 30 s, 1 min ... 1 day for at most 1000 "
                   "points)")
    p.add_argument("--json", default=None, metavar="OUT",
                   help="also write every figure as JSON to OUT (- for stdout)")
    p.add_argument("--html", default=None, metavar="OUT",
                   help="also write the report to OUT: one HTML file that loads nothing "
                   "(tables, charts, and the figures as JSON)")
    p.add_argument("--svg", default=None, metavar="DIR",
                   help="also write each chart of the report as DIR/<chart>.svg")
    p.add_argument("--png", default=None, metavar="DIR",
                   help="also write each chart as DIR/<chart>.png (needs matplotlib: "
                   "pip install 'ratekeeper[plot]')")


def add_replay(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policies", action="append", required=True, metavar="FILE",
                   help="a policies file with an [http] part; repeat to compare several")
    p.add_argument("--policy", action="append", default=[], metavar="LIMIT.FIELD=VALUE,...",
                   help="one more candidate: the first --policies file with these limits "
                   "changed, e.g. per-client.burst=40,per-client.rate=10/s")
    _add_log(p)


def add_recommend(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policies", default=None, metavar="FILE",
                   help="survey this file's limits (default: one limit per client IP)")
    p.add_argument("--target", type=_percent, default=0.99, metavar="PERCENT",
                   help="admit every request of this percentage of clients, cap the rest "
                   "(default 99)")
    p.add_argument("--window", type=_positive, default=60.0, metavar="S",
                   help="the long window of the clients' sustained rates (default 60 s)")
    p.add_argument("--abusive-share", type=_percent, default=ABUSIVE_SHARE,
                   metavar="PERCENT", help="a client with at least 10 requests, this "
                   "percentage of them answered 4xx other than 429, is abusive: shown apart "
                   "and left out of the proposal (default 50)")
    p.add_argument("--include-abusive", action="store_true",
                   help="count every client, scanners included, in the proposal")
    p.add_argument("--progress", action="store_true",
                   help="show progress on stderr even when it is not a terminal")
    _add_log(p)


def _load_toml(path: str) -> dict[str, Any]:
    try:
        data: dict[str, Any] = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise PolicyError([], path) from e
    return data


def _write_json(path: str, value: dict[str, Any]) -> None:
    text = json.dumps(value, indent=1)
    if path == "-":
        print(text)
    else:
        Path(path).write_text(text + "\n", encoding="utf-8")


def _report_stats(cmd: str, stats: ReadStats, comparison: Comparison | None) -> None:
    if stats.malformed_total or stats.late:
        print(f"ratekeeper {cmd}: {stats.summary()}", file=sys.stderr)
    note = "" if comparison is None else comparison.named_note()
    if note:  # once: a host-name log (HostnameLookups) is not an error, but it is news
        print(f"ratekeeper {cmd}: {note}", file=sys.stderr)


def _stats_json(stats: ReadStats) -> dict[str, Any]:
    return {"lines": stats.lines, "events": stats.events, "malformed": stats.malformed,
            "skipped": stats.skipped, "reordered": stats.reordered, "late": stats.late,
            "clamped_lines": stats.late - stats.dropped,
            "grown_order_window": stats.grown_window,
            "examples": [str(e) for e in stats.examples]}


def _check_png(cmd: str, args: argparse.Namespace) -> int:
    """Before any work: ``--png`` without matplotlib says what to install."""
    if args.png is not None:
        try:
            require_plot()
        except PlotExtraMissing as e:
            return _err(cmd, f"--png: {e} (--svg DIR)")
    return 0


def _write_report(cmd: str, args: argparse.Namespace, comparison: Comparison | None,
                  rec: Recommendation | None, log: dict[str, Any]) -> int:
    try:
        if args.html is not None:
            title = f"ratekeeper {cmd}: {'stdin' if args.log == '-' else args.log}"
            Path(args.html).write_text(report_html(comparison, rec, title=title, log=log),
                                       encoding="utf-8")
        if args.svg is not None:
            write_svgs(args.svg, comparison, rec)
        if args.png is not None:
            write_pngs(args.png, comparison, rec)
    except OSError as e:
        return _err(cmd, f"cannot write the report: {e}")
    return 0


def run_replay(args: argparse.Namespace) -> int:
    if _check_png("replay", args):
        return 2
    cands: list[Candidate] = []
    try:
        for path in args.policies:
            cands.append(Candidate(_unique(path, cands), load_policies(path)))
        for ov in args.policy:
            overrides = [o for o in ov.split(",") if o.strip()]
            data = with_overrides(_load_toml(args.policies[0]), overrides)
            source = f"{args.policies[0]} [{','.join(overrides)}]"
            cands.append(Candidate(_unique(",".join(overrides), cands),
                                   parse_policies(data, source=source)))
    except PolicyError as e:
        return _err("replay", str(e) if e.issues else f"cannot read {e.source}: {e.__cause__}")
    except ValueError as e:
        return _err("replay", str(e))
    try:
        _settle_log(args, args.log)
        reader = _reader(args, args.log)
    except (RateKeeperError, OSError) as e:
        return _err("replay", f"--log: {e}")
    progress = Progress(sys.stderr)
    with reader:
        try:
            result = compare(cands, reader, client_of=client_resolver(cands[0].policies),
                             gap=args.gap, bucket=args.bucket,
                             progress=lambda n: progress("replay", n))
        except ValueError as e:  # a --bucket the log is too long for
            progress.done()
            return _err("replay", f"--{e}")
    progress.done()
    if reader.stats.events == 0:
        return _check_read("replay", args, reader.stats)
    if args.json != "-":
        print(result.table() + _clamped_row(reader.stats))
    if args.json is not None:
        _write_json(args.json, {**result.to_json(), "log": _stats_json(reader.stats)})
    _report_stats("replay", reader.stats, result)
    return (_write_report("replay", args, result, None, _stats_json(reader.stats))
            or _check_read("replay", args, reader.stats))


def _unique(name: str, cands: list[Candidate]) -> str:
    names = {c.name for c in cands}
    out, i = name, 2
    while out in names:
        out, i = f"{name} #{i}", i + 1
    return out


@contextmanager
def _rereadable(source: str) -> Iterator[str]:
    """`source` as a path that can be read more than once (stdin is spooled to a file)."""
    if source != "-":
        yield source
        return
    with tempfile.NamedTemporaryFile(prefix="rk-recommend-", suffix=".log") as f:
        shutil.copyfileobj(sys.stdin.buffer, f)
        f.flush()
        yield f.name


def run_recommend(args: argparse.Namespace) -> int:
    if _check_png("recommend", args):
        return 2
    data = None
    if args.policies is not None:
        try:
            load_policies(args.policies)  # the located errors of a bad file
            data = _load_toml(args.policies)
        except PolicyError as e:
            return _err("recommend", str(e) if e.issues
                        else f"cannot read {e.source}: {e.__cause__}")
        if "http" not in data:
            return _err("recommend", f"{args.policies} has no [http] part: nothing says how a "
                        "request becomes descriptors (docs/policies.md)")
    if args.log != "-":
        try:
            _settle_log(args, args.log)
            _reader(args, args.log).close()  # a bad format or a missing file, before spooling
        except (RateKeeperError, OSError) as e:
            return _err("recommend", f"--log: {e}")
    progress = Progress(sys.stderr, force=args.progress)
    last: list[LogReader] = []
    with _rereadable(args.log) as path:
        if args.log == "-":
            try:
                _settle_log(args, path)  # the spooled stdin is a file: measured as one
            except (RateKeeperError, OSError) as e:
                return _err("recommend", f"--log: {e}")

        def events() -> Iterator[LogEvent]:
            progress.restart()
            with _reader(args, path) as reader:
                last[:] = [reader]
                yield from reader

        try:
            rec = recommend(events, data, target=args.target, window=args.window,
                            gap=args.gap, bucket=args.bucket,
                            source=args.policies or "<per-client>",
                            abusive_share=None if args.include_abusive
                            else args.abusive_share, progress=progress)
        except ValueError as e:  # a --bucket the log is too long for
            progress.done()
            return _err("recommend", f"--{e}")
    progress.done()
    if args.json != "-":
        print(rec.text() + (_clamped_row(last[0].stats) if last else ""))
    if args.json is not None:
        _write_json(args.json, {**rec.to_json(), "log": _stats_json(last[0].stats)})
    if last:
        _report_stats("recommend", last[0].stats, rec.comparison)
    return (_write_report("recommend", args, None, rec,
                          _stats_json(last[0].stats) if last else {})
            or (_check_read("recommend", args, last[0].stats) if last else 0))
