"""envoyproxy/ratelimit's stats, under its names: StatsD lines and a Prometheus page.

Dashboards and alerts built on the Go service read names such as
``ratelimit.service.rate_limit.<domain>.<key>.total_hits`` (its ``src/stats/manager_impl.go``)
or, through its Prometheus sink, what statsd_exporter's mapping makes of them
(``ratelimit_service_rate_limit_total_hits{domain=...,key1=...}``, its
``src/stats/prom/default_mapper.yaml``). `GoStats` counts the same events the same way and
offers both; ratekeeper's own ``ratekeeper_*`` metrics are untouched.

Theory of operation:

- `GoStatsEngine.check` is the engine's `check` followed by `GoStats.checked`, which adds
  each descriptor's hits to plain integers in one dict: no I/O, no lock, no formatting on the
  decision path.
- `GoStats.flush_task` wakes every `GoStatsOptions.flush_interval` seconds, turns what was
  counted since the last flush into StatsD lines (``name:delta|c``; ``name:ms|ms``) and sends
  them in datagrams of at most `DATAGRAM_BYTES`, as gostats flushes its store.
- `GoStats.prometheus_page` renders the totals under the default mapping's names.

Which counter a hit goes to is envoyproxy/ratelimit's ``BaseRateLimiter`` rule
(``src/limiter/base_limiter.go``): with L the limit, ``before`` and ``after`` the count
before and after the hits, and the near threshold ``floor(L * NEAR_LIMIT_RATIO)`` (in float32,
as Go): over the limit (``after > L``), ``over_limit`` gets the hits past L (all of them when
``before >= L``) and ``near_limit`` the ones between the threshold and L; otherwise
``within_limit`` gets them all and ``near_limit`` those past the threshold. A rule in shadow
mode that is over counts the over part in ``shadow_mode`` too. Here the counts come from the
decision: admitted, ``after = L - remaining``; rejected (which charges nothing here), ``before
= L - remaining`` and ``after = before + hits``, the count Go's INCRBY would have reached.

Cardinality is bounded as ratekeeper's own metrics are: a stat's ``<key>`` is the matched
rule's configured key path (``key_value`` per level, a wildcard's pattern as written), never a
request's value, except where the configuration asks for request values (``detailed_metric``)
and for Envoy's per-descriptor ``limit`` overrides (the Go service names their stats after the
request's entries): those names are capped at `GoStatsOptions.max_request_names` distinct ones;
past it, a detailed rule counts under its configured key and an override is not counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import socket
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import uvicorn

from ..policy._engine import CheckResult, Engine
from ..policy._model import Policies
from ..policy._rules import DescriptorRequest, Rule
from ._stats import PrometheusStats

__all__ = ["DATAGRAM_BYTES", "GoNamedStats", "GoStats", "GoStatsEngine", "GoStatsOptions",
           "go_duration", "options_from_env", "sanitize_stat_name", "start_prometheus"]

log = logging.getLogger("ratekeeper.service")

#: The largest StatsD datagram sent: what fits an Ethernet frame with IP and UDP headers
#: (StatsD's own advice), so that no datagram is fragmented.
DATAGRAM_BYTES = 1432

#: The per-descriptor stats, in the order the Go service creates them.
RATE_LIMIT_STATS = ("total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode")

#: statsd_exporter's default histogram buckets (client_golang's DefBuckets), in seconds, for
#: ``ratelimit_service_response_time_seconds``.
RESPONSE_TIME_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

_IPV4 = re.compile(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}")


def sanitize_stat_name(name: str) -> str:
    """envoyproxy/ratelimit's ``utils.SanitizeStatName``: ``:`` and ``|`` (StatsD's
    separators) become ``_``, and so do the dots of an IPv4 address (so that it stays one
    name segment)."""
    name = name.replace(":", "_").replace("|", "_")
    return _IPV4.sub(lambda m: m.group(0).replace(".", "_"), name)


_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
             "h": 3600.0}
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|ms|s|m|h)")


def go_duration(text: str, what: str) -> float:
    """Seconds in a Go ``time.Duration`` string (``10s``, ``500ms``, ``1m30s``), as
    envoyproxy/ratelimit reads ``STATS_FLUSH_INTERVAL``; ValueError says what is wrong."""
    pos, total = 0, 0.0
    for m in _GO_DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    if not text or pos != len(text):
        raise ValueError(f"{what}={text!r} is not a duration: write a number and a unit "
                         "(ns, us, ms, s, m, h), e.g. 10s or 500ms")
    return total


def _float32(x: float) -> float:
    return float(struct.unpack("f", struct.pack("f", x))[0])


@dataclass(frozen=True, slots=True)
class GoStatsOptions:
    """Where and how `GoStats` reports (envoyproxy/ratelimit's settings in brackets).

    `statsd`: ``(host, port)`` to send StatsD lines to over UDP, or None (``USE_STATSD``,
    ``STATSD_HOST``, ``STATSD_PORT``); `flush_interval`: seconds between sends
    (``STATS_FLUSH_INTERVAL``, 10 s); `extra_tags`: ``(name, value)`` pairs added to every stat
    (``EXTRA_TAGS``), in gostats' form on StatsD lines (``name.__tag=value``) and as labels on
    the Prometheus page; `prometheus`: ``(host, port, path)`` to serve the Prometheus page on,
    or None (``USE_PROMETHEUS``, ``PROMETHEUS_ADDR``, ``PROMETHEUS_PATH``);
    `response_time_ms`: the page's response time histogram in milliseconds, not seconds
    (``PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS``); `near_limit_ratio`: 0 to 1
    (``NEAR_LIMIT_RATIO``, 0.8); `max_request_names`: the cap on stat names made of request
    values (``detailed_metric`` rules, overrides).
    """

    statsd: tuple[str, int] | None = None
    flush_interval: float = 10.0
    extra_tags: tuple[tuple[str, str], ...] = ()
    prometheus: tuple[str, int, str] | None = None
    response_time_ms: bool = False
    near_limit_ratio: float = 0.8
    max_request_names: int = 1000

    def __post_init__(self) -> None:
        if not 0 <= self.near_limit_ratio <= 1:
            raise ValueError(f"NEAR_LIMIT_RATIO must be from 0 to 1, got {self.near_limit_ratio}")
        if not 0 < self.flush_interval < math.inf:
            raise ValueError("STATS_FLUSH_INTERVAL must be above 0, got "
                             f"{self.flush_interval:g}s")


class _RuleNames:
    """One rule's stat names, made when its snapshot is first seen: the configured key
    (``<domain>.<key_value>...``) and its five stat names."""

    __slots__ = ("detailed", "key", "names", "shadow")

    def __init__(self, rule: Rule) -> None:
        path = ".".join(k if v is None else f"{k}_{v}" for k, v in rule.path)
        self.key = sanitize_stat_name(f"{rule.domain}.{path}")
        self.names = _stat_names(self.key)
        self.detailed = rule.detailed_metric
        self.shadow = rule.shadow_mode


def _stat_names(key: str) -> tuple[str, ...]:
    prefix = f"ratelimit.service.rate_limit.{key}."
    return tuple(prefix + s for s in RATE_LIMIT_STATS)


TOTAL_REQUESTS = "ratelimit_server.ShouldRateLimit.total_requests"
RESPONSE_TIME = "ratelimit_server.ShouldRateLimit.response_time"
REDIS_ERROR = "ratelimit.service.call.should_rate_limit.redis_error"
SERVICE_ERROR = "ratelimit.service.call.should_rate_limit.service_error"
CONFIG_LOAD_SUCCESS = "ratelimit.service.config_load_success"
CONFIG_LOAD_ERROR = "ratelimit.service.config_load_error"
GLOBAL_SHADOW_MODE = "ratelimit.service.global_shadow_mode"


class GoStats:
    """envoyproxy/ratelimit's counters (see the module's docstring). Fed from the event
    loop's thread only: `checked` by `GoStatsEngine`, `request` and `reload` by
    `GoNamedStats`."""

    def __init__(self, options: GoStatsOptions,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        #: Stat name -> total since start (the Prometheus page's values).
        self.counts: dict[str, int] = {}
        #: Milliseconds -> calls that took them, since the start and since the last flush.
        self.response_ms: dict[int, int] = {}
        self._unsent_ms: dict[int, int] = {}
        self._sent: dict[str, int] = {}
        self._snap: Policies | None = None
        self._rules: dict[Rule, _RuleNames] = {}
        self._request_names: dict[str, tuple[str, ...]] = {}
        self._capped_warned = False
        self._ratio32 = _float32(options.near_limit_ratio)
        self._clock = clock
        self._sock: socket.socket | None = None
        self._tags = "".join(f".__{k}={v}" for k, v in sorted(options.extra_tags)
                             if k and v)

    def __repr__(self) -> str:
        return (f"GoStats({len(self.counts)} stats, statsd={self.options.statsd}, "
                f"prometheus={self.options.prometheus})")

    # -- counting (the decision path) ------------------------------------------------------

    def _near(self, limit: int) -> int:
        """The near-limit threshold of `limit`: ``floor(float32(limit) * float32(ratio))``,
        as Go computes it (float32: 0.8 of 10 is 8, not 7.99...)."""
        return math.floor(_float32(_float32(limit) * self._ratio32))

    def _add(self, name: str, n: int) -> None:
        if n:
            counts = self.counts
            counts[name] = counts.get(name, 0) + n

    def _names_of(self, snap: Policies, rule: Rule,
                  d: DescriptorRequest) -> tuple[tuple[str, ...] | None, bool]:
        """The stat names a descriptor of `rule` counts under (None: not counted), and
        whether the rule is in shadow mode of its own."""
        if snap is not self._snap:  # a new snapshot: its rules' names, made once
            self._snap = snap
            self._rules = {r: _RuleNames(r) for dom in snap.domains.values()
                           for r in dom.rules}
        names = self._rules.get(rule)
        if names is not None and not names.detailed:
            return names.names, names.shadow
        # Named after the request's entries: a detailed_metric rule, an override.
        key = sanitize_stat_name(rule.domain + "." + ".".join(
            f"{k}_{v}" if (names is not None or v) else k for k, v in d.entries))
        got = self._request_names.get(key)
        if got is None:
            if len(self._request_names) >= self.options.max_request_names:
                if not self._capped_warned:
                    self._capped_warned = True
                    log.warning("envoyproxy/ratelimit stats: %d names made of request values "
                                "(detailed_metric, overrides) reached; the rest are counted "
                                "under their rule's configured key (overrides: not counted)",
                                self.options.max_request_names,
                                extra={"event": "go_stats_capped"})
                return (None if names is None else names.names), rule.shadow_mode
            got = self._request_names[key] = _stat_names(key)
        return got, rule.shadow_mode

    def checked(self, snap: Policies, descriptors: Sequence[DescriptorRequest], hits: float,
                result: CheckResult) -> None:
        """Count one answered check (its statuses are in its descriptors' order)."""
        if result.degraded:  # the Go service answers a store failure with an error
            self._add(REDIS_ERROR, 1)
        over_any = False
        for d, st in zip(descriptors, result.statuses, strict=False):
            rule = st.rule
            if rule is None or rule.unlimited:  # no limit: no stats, as Go
                continue
            names, shadow = self._names_of(snap, rule, d)
            if names is None:
                continue
            h = d.hits if d.hits is not None else hits
            n = int(h)
            total, over_n, near_n, within_n, shadow_n = names
            counts = self.counts
            counts[total] = counts.get(total, 0) + n
            dec = st.decision
            if result.degraded or dec is None:
                continue
            if dec.limit is None:  # 0 requests per unit: always over, no counter
                limit, before = 0, 0
            else:
                limit = int(dec.limit.capacity)
                before = limit - max(0, dec.remaining) - (n if dec.allowed else 0)
            after = before + n
            if after > limit:
                over_any = over_any or not shadow
                near = self._near(limit)
                if before >= limit:
                    self._add(over_n, n)
                else:
                    self._add(over_n, after - limit)
                    self._add(near_n, limit - max(near, before))
                if shadow:
                    self._add(shadow_n, n if before >= limit else after - limit)
            else:
                near = self._near(limit)
                if after > near:
                    self._add(near_n, n if before >= near else after - near)
                self._add(within_n, n)
        if over_any and snap.settings.shadow_mode:
            self._add(GLOBAL_SHADOW_MODE, 1)

    def request(self, transport: str, result: str, seconds: float) -> None:
        """One API call: a gRPC one is a ``ShouldRateLimit`` call to the Go server's
        interceptor (its count and time in whole milliseconds); a malformed one of either
        transport is its service error (``call.should_rate_limit.service_error``)."""
        if result == "invalid":
            self._add(SERVICE_ERROR, 1)
        if transport != "grpc":
            return
        self._add(TOTAL_REQUESTS, 1)
        ms = int(seconds * 1000)
        for table in (self.response_ms, self._unsent_ms):
            table[ms] = table.get(ms, 0) + 1

    def reload(self, ok: bool) -> None:
        self._add(CONFIG_LOAD_SUCCESS if ok else CONFIG_LOAD_ERROR, 1)

    # -- StatsD ----------------------------------------------------------------------------

    def statsd_lines(self) -> list[str]:
        """What was counted since the last call, as StatsD lines: a counter's increase
        (``name:n|c``; unchanged counters are not sent, as gostats), each response time
        (``name:ms|ms``, repeats of one value as one line with its sample rate)."""
        tags = self._tags
        lines = []
        sent = self._sent
        for name, total in self.counts.items():
            delta = total - sent.get(name, 0)
            if delta:
                lines.append(f"{name}{tags}:{delta}|c")
                sent[name] = total
        for ms, n in self._unsent_ms.items():
            rate = "" if n == 1 else f"|@{_sample_rate(n)!r}"
            lines.append(f"{RESPONSE_TIME}{tags}:{ms}|ms{rate}")
        self._unsent_ms = {}
        return lines

    def flush(self) -> int:
        """Send `statsd_lines` in datagrams of at most `DATAGRAM_BYTES`; the lines sent.
        A send that fails (nobody listens, the network) is dropped, as StatsD over UDP is."""
        target = self.options.statsd
        lines = self.statsd_lines()
        if target is None or not lines:
            return 0
        if self._sock is None:
            family = socket.AF_INET6 if ":" in target[0] else socket.AF_INET
            self._sock = socket.socket(family, socket.SOCK_DGRAM)
            self._sock.setblocking(False)
        for packet in _packets(lines):
            with contextlib.suppress(OSError):
                self._sock.sendto(packet, target)
        return len(lines)

    async def flush_task(self, stop: asyncio.Event) -> None:
        """`flush` every `flush_interval` seconds until `stop`, then once more."""
        interval = self.options.flush_interval
        try:
            while not stop.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), interval)
                self.flush()
        finally:
            self.flush()
            self.close()

    def close(self) -> None:
        """Close the StatsD socket (a later `flush` opens another)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # -- Prometheus ------------------------------------------------------------------------

    def prometheus_page(self) -> str:
        """The totals as envoyproxy/ratelimit's Prometheus sink serves them: the names and
        labels its default statsd_exporter mapping gives (``ratelimit_service_rate_limit_<stat>
        {domain, key1[, key2]}``, ``ratelimit_service_should_rate_limit_error{err_type}``,
        ``ratelimit_service_total_requests{grpc_method}``,
        ``ratelimit_service_response_time_seconds{grpc_method}``,
        ``ratelimit_service_config_load_success``/``_error``); a stat the mapping does not name,
        its dots as underscores (statsd_exporter's escaping)."""
        families: dict[str, dict[tuple[tuple[str, str], ...], int]] = {}
        extra = tuple(sorted(self.options.extra_tags))
        for name, total in self.counts.items():
            metric, labels = _mapped(name)
            series = families.setdefault(metric, {})
            key = (*labels, *extra)
            series[key] = series.get(key, 0) + total
        out: list[str] = []
        for metric in sorted(families):
            out.append(f"# TYPE {metric} counter")
            for labels, total in sorted(families[metric].items()):
                out.append(f"{metric}{_labels(labels)} {total}")
        if self.response_ms:
            out.extend(self._response_histogram(extra))
        return "\n".join(out) + "\n"

    def _response_histogram(self, extra: tuple[tuple[str, str], ...]) -> Iterable[str]:
        scale = 1.0 if self.options.response_time_ms else 0.001
        metric = "ratelimit_service_response_time_seconds"
        labels = (("grpc_method", "ShouldRateLimit"), *extra)
        values = sorted(self.response_ms.items())
        yield f"# TYPE {metric} histogram"
        for bound in (*RESPONSE_TIME_BUCKETS, math.inf):
            n = sum(c for ms, c in values if ms * scale <= bound)
            le = "+Inf" if bound == math.inf else repr(bound)
            yield f"{metric}_bucket{_labels((*labels, ('le', le)))} {n}"
        yield f"{metric}_sum{_labels(labels)} {sum(ms * scale * c for ms, c in values):.6g}"
        yield f"{metric}_count{_labels(labels)} {sum(c for _, c in values)}"


def _sample_rate(n: int) -> float:
    """The sample rate that stands for `n` equal values: 1/n, or the float just below it
    where ``int(1 / rate)`` would come out as n - 1 (statsd_exporter truncates)."""
    rate = 1 / n
    while int(1 / rate) < n:
        rate = math.nextafter(rate, 0)
    return rate


def _packets(lines: list[str]) -> Iterable[bytes]:
    batch: list[bytes] = []
    size = 0
    for line in lines:
        b = line.encode()
        if batch and size + len(b) + 1 > DATAGRAM_BYTES:
            yield b"\n".join(batch)
            batch, size = [], 0
        batch.append(b)
        size += len(b) + 1
    if batch:
        yield b"\n".join(batch)


_PREFIXES = (("ratelimit.service.call.should_rate_limit.",
              "ratelimit_service_should_rate_limit_error", "err_type"),
             ("ratelimit_server.ShouldRateLimit.", "", "grpc_method"))
_NAMED = {CONFIG_LOAD_SUCCESS: "ratelimit_service_config_load_success",
          CONFIG_LOAD_ERROR: "ratelimit_service_config_load_error",
          TOTAL_REQUESTS: "ratelimit_service_total_requests"}
_ESCAPE = re.compile(r"[^a-zA-Z0-9_]")


def _mapped(name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """statsd_exporter's default mapping of envoyproxy/ratelimit (its
    ``src/stats/prom/default_mapper.yaml``) for one counter: name and labels."""
    if name in _NAMED:
        labels = (("grpc_method", "ShouldRateLimit"),) if name == TOTAL_REQUESTS else ()
        return _NAMED[name], labels
    if name.startswith(_PREFIXES[0][0]):
        return _PREFIXES[0][1], (("err_type", name[len(_PREFIXES[0][0]):]),)
    prefix = "ratelimit.service.rate_limit."
    if name.startswith(prefix):
        path, _, stat = name[len(prefix):].rpartition(".")
        parts = path.split(".")
        if stat in RATE_LIMIT_STATS and len(parts) >= 2:
            # the glob `*.*.<stat>` (domain, key1), or the regex (domain, key1, key2; any
            # deeper level is dropped, so deeper keys add up in their first two levels)
            found = [("domain", parts[0]), ("key1", parts[1])]
            if len(parts) >= 3:
                found.append(("key2", parts[2]))
            return f"ratelimit_service_rate_limit_{stat}", tuple(found)
    escaped = _ESCAPE.sub("_", name)
    return ("_" + escaped if escaped[:1].isdigit() else escaped), ()


def _labels(labels: Iterable[tuple[str, str]]) -> str:
    parts = [f'{k}="{_label_value(v)}"' for k, v in labels]
    return "{" + ",".join(parts) + "}" if parts else ""


def _label_value(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _PrometheusServer(uvicorn.Server):
    """uvicorn without its own signal handling (`serve` owns the signals)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def start_prometheus(go_stats: GoStats, sock: socket.socket, path: str
                           ) -> tuple[uvicorn.Server, asyncio.Task[None]]:
    """Serve `go_stats`'s Prometheus page at `path` on the bound socket `sock` (any other
    path: 404, as the Go service's handler); returns the server (set ``should_exit`` to
    stop it) and its task, once it accepts connections."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == path and scope["method"] in ("GET", "HEAD"):
            status, body = 200, go_stats.prometheus_page().encode()
            ctype = b"text/plain; version=0.0.4; charset=utf-8"
        else:
            status, body, ctype = 404, b"404 page not found\n", b"text/plain; charset=utf-8"
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", ctype),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body",
                    "body": b"" if scope["method"] == "HEAD" else body})

    server = _PrometheusServer(uvicorn.Config(app, log_config=None, access_log=False,
                                              lifespan="off", server_header=False))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.005)
    if task.done():
        task.result()
        raise OSError("the Prometheus listener stopped during startup")
    return server, task


class GoStatsEngine(Engine):
    """The engine, with every answered check also counted by `go_stats`."""

    go_stats: GoStats

    async def check(self, domain: str, descriptors: Sequence[DescriptorRequest],
                    hits: float = 1.0) -> CheckResult:
        snap = self.policies
        result = await super().check(domain, descriptors, hits)
        self.go_stats.checked(snap, descriptors, hits, result)
        return result


class GoNamedStats(PrometheusStats):
    """ratekeeper's Prometheus metrics (unchanged), with the API calls and the policies
    loads also counted by `go_stats`."""

    def __init__(self, go_stats: GoStats) -> None:
        super().__init__()
        self.go_stats = go_stats

    def request(self, transport: str, result: str, seconds: float) -> None:
        super().request(transport, result, seconds)
        self.go_stats.request(transport, result, seconds)

    def reload(self, ok: bool, generation: int) -> None:
        super().reload(ok, generation)
        self.go_stats.reload(ok)


def options_from_env(env: Mapping[str, str], host: str) -> GoStatsOptions | None:
    """envoyproxy/ratelimit's stats settings, or None when they ask for no stats sink.

    StatsD is on with ``USE_STATSD=true``, or when ``STATSD_HOST``/``STATSD_PORT`` is set and
    ``USE_STATSD`` is not false (the Go service's default is on; here an environment that
    names no StatsD sends nothing, as ratekeeper's own /metrics is always there). The
    Prometheus page is on with ``USE_PROMETHEUS=true``, at ``PROMETHEUS_ADDR`` (``:9090``; an
    empty host is `host`, the service's own address) and ``PROMETHEUS_PATH``. ``DISABLE_STATS``
    turns both off. ValueError names a malformed setting and what it should be."""
    from ._cli import _go_bool  # noqa: PLC0415 (the CLI imports this module lazily)

    if _go_bool(env, "DISABLE_STATS"):
        return None
    if env.get("PROMETHEUS_MAPPER_YAML"):
        raise ValueError(f"PROMETHEUS_MAPPER_YAML={env['PROMETHEUS_MAPPER_YAML']!r} cannot be "
                         "honoured: the page uses the default mapping only (run "
                         "statsd_exporter with your mapping on the StatsD lines instead: "
                         "USE_STATSD=true, STATSD_HOST, STATSD_PORT); unset it")
    use_statsd = env.get("USE_STATSD", "")
    statsd = _go_bool(env, "USE_STATSD") if use_statsd else bool(
        env.get("STATSD_HOST") or env.get("STATSD_PORT"))
    prometheus = _go_bool(env, "USE_PROMETHEUS")
    if not (statsd or prometheus):
        return None
    raw_ratio = env.get("NEAR_LIMIT_RATIO") or "0.8"
    try:
        ratio = float(raw_ratio)
    except ValueError:
        raise ValueError(f"NEAR_LIMIT_RATIO={raw_ratio!r} is not a number (0 to 1, e.g. "
                         "0.8)") from None
    if not 0 <= ratio <= 1:
        raise ValueError(f"NEAR_LIMIT_RATIO={raw_ratio!r} must be from 0 to 1 (e.g. 0.8)")
    tags = []
    for pair in filter(None, env.get("EXTRA_TAGS", "").split(",")):
        k, sep, v = pair.partition(":")
        if not sep or not k.strip():
            raise ValueError(f"EXTRA_TAGS has {pair!r}, not a name:value pair (write "
                             "EXTRA_TAGS=name1:value1,name2:value2)")
        # gostats' ReplaceChars on the value; a name is a Prometheus label name as well
        k = k.strip()
        if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", k):
            raise ValueError(f"EXTRA_TAGS: tag name {k!r} must be letters, digits and _ "
                             "(not starting with a digit)")
        tags.append((k, re.sub(r"[.:|]", "_", v.strip())))
    target = None
    if statsd:
        port = _env_port(env, "STATSD_PORT", "8125")
        target = (env.get("STATSD_HOST") or "localhost", port)
    page = None
    if prometheus:
        addr = env.get("PROMETHEUS_ADDR") or ":9090"
        phost, sep, pport = addr.rpartition(":")
        if not sep:
            raise ValueError(f"PROMETHEUS_ADDR={addr!r} is not HOST:PORT (e.g. :9090)")
        path = env.get("PROMETHEUS_PATH") or "/metrics"
        if not path.startswith("/"):
            raise ValueError(f"PROMETHEUS_PATH={path!r} must start with / (e.g. /metrics)")
        page = (phost.strip("[]") or host, _env_port({"PROMETHEUS_ADDR": pport},
                                                     "PROMETHEUS_ADDR", "9090"), path)
    return GoStatsOptions(
        statsd=target,
        flush_interval=go_duration(env.get("STATS_FLUSH_INTERVAL") or "10s",
                                   "STATS_FLUSH_INTERVAL"),
        extra_tags=tuple(tags), prometheus=page,
        response_time_ms=_go_bool(env, "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"),
        near_limit_ratio=ratio)


def _env_port(env: Mapping[str, str], name: str, default: str) -> int:
    raw = env.get(name) or default
    if not raw.isdigit() or not 0 <= int(raw) <= 65535:
        raise ValueError(f"{name}: not a port number (0..65535): {raw!r}")
    return int(raw)
