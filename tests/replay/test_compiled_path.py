"""Replay's compiled hot path (`_replay_hot_c`) reads and decides exactly as the pure one.

The pure code stays the reference: `LogFormat.parse` for a line, `_replay._remembering` for
the replay loop. On random lines (IPv4 and IPv6 clients, ``-`` fields, time zones and bad
times, absolute-form targets, queries and fragments, nginx's and Apache's escapes, odd
methods, numbers that are not, truncated lines) and several nginx formats, each line must
give the same `LogEvent` (every item, its type, its fields) or the same `BadLine`; a whole
log must give the same events and the same `ReadStats`; and a replay the same decisions,
event by event, both through the one-limit path and through `decide_mapped`.
"""

from __future__ import annotations

import io
import os
import random
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratekeeper.policy._loader import parse_policies_text
from ratekeeper.policy._request import RequestInfo
from ratekeeper.replay import _hot, read_log
from ratekeeper.replay._events import LogEvent, ReadStats
from ratekeeper.replay._formats import COMBINED, COMMON, BadLine, LogFormat
from ratekeeper.replay._replay import Replayed, replay
from ratekeeper.stores.memory import MemoryStore
from tests.replay.test_fast_path import PER_IP, POLICIES, SYNTHETIC_FORMAT, outcome, synthetic_log

DATA = Path(__file__).parent / "data"


def _compiled() -> ModuleType:
    if _hot.COMPILED is None:
        if os.environ.get("CI"):  # CI builds it (RATEKEEPER_REQUIRE_EXTENSIONS in .ci/run)
            pytest.fail("the compiled replay path (_replay_hot_c) is not built")
        pytest.skip("the compiled replay path (_replay_hot_c) is not built here")
    return _hot.COMPILED


#: Formats that take every branch of `LogFormat.parse`: the request line or its method and
#: URI, each time kind, a host, a quoted status (any text: int() decides), headers.
FORMATS = [
    COMBINED,
    COMMON,
    LogFormat('$remote_addr [$msec] "$request_method" "$request_uri" "$status" '
              '$bytes_sent "$host" "$http_x_forwarded_for"', name="msec"),
    LogFormat('$time_iso8601 $remote_addr "$request" $status "$http_host" '
              '"$http_user_agent"', name="iso"),
    LogFormat('[$time_local] "$request" $status "$http_referer"', name="noclient"),
]

# Each list: the values a well-formed line has first, then the odd ones (see `_field`).
CLIENTS = ["10.1.2.3", "2001:db8::1", "::1", "-", "fe80::1%eth0", ""]
STAMPS = ["14/Nov/2023:22:13:19 +0000", "14/Nov/2023:22:13:19 -0700",
          "1/Jan/2024:00:00:00 +0530", "30/Jun/2015:23:59:60 +0000",
          "14/nov/2023:22:13:19 +0000", "31/Feb/2023:00:00:00 +0000",
          "14/Foo/2023:22:13:19 +0000", "14/Nov/2023:25:13:19 +0000"]
ISO = ["2023-11-14T22:13:19+00:00", "2023-11-14T22:13:19.250Z", "2023-11-14T22:13:19-0700",
       "2023-11-14T22:13:19", "2023-11-14T22:13:19.5+01:30", "2023-13-14T22:13:19Z"]
MSEC = ["1700000000.123", "1700000000", "0.5", "17000000001234567890.5", "1e5"]
METHODS = ["GET", "POST", "get", "GÉT", "ПОСТ", "ǅ", "M-SEARCH", "", "\x00", "G\u00a0T"]
TARGETS = ["/", "/a/b", "/a?x=1", "/a#frag", "/a?x=1#f", "/a#f?x", "/#top", "/?", "/?#",
           "//double", "/\\x22q\\x22", "/caf\\xC3\\xA9", "/a%20b", "?x", "#f",
           "http://example.com/a?b", "https://h:8080", "http://h/", "ftp://x/y#z", "*",
           "example.com:443", "", "-"]
PROTOCOLS = [" HTTP/1.1", " HTTP/2.0", "", " HTTP/1.1 extra", "  HTTP/1.1"]
NUMBERS = ["200", "-", "0", "007", "499", "12345678901234567890", "99999999999999999999999",
           "1_0", " 12", "٣٠٠", "abc", "+5", "-3", "", "٣"]
TEXTS = ["-", "Mozilla/5.0 (X11)", 'bot \\x22quoted\\x22/1.0', 'Apache \\"q\\" ua',
         "back\\\\slash", "\\u00e9t\\u00e9", "caf\\xC3\\xA9", "bad\\xFF",
         "tab\\tand\\n", "ü nicode", "https://ref.example/?q=1", "", "trailing\\"]
HOSTS = ["-", "example.com", "EXAMPLE.com:8080", "[::1]:80", ""]
RESTS = ["", ' "extra"', " 0.123 upstream", " -"]
#: how many of each list's first values a well-formed line takes
GOOD = {id(CLIENTS): 5, id(STAMPS): 5, id(ISO): 5, id(MSEC): 4, id(METHODS): 6,
        id(TARGETS): 13, id(PROTOCOLS): 2, id(NUMBERS): 5, id(TEXTS): 11, id(HOSTS): 4,
        id(RESTS): 4}


def _field(draw: st.DrawFn, values: list[str]) -> str:
    """One of `values`: seven times in eight one a well-formed line has, else any."""
    good = GOOD[id(values)] if draw(st.integers(0, 7)) else len(values)
    return draw(st.sampled_from(values[:good]))


@st.composite
def lines(draw: st.DrawFn) -> tuple[int, str]:
    """A format (by index) and a line for it: mostly well formed, some fields odd, some
    lines cut short."""
    i = draw(st.integers(0, len(FORMATS) - 1))

    def pick(values: list[str]) -> str:
        return _field(draw, values)

    client = pick(CLIENTS)
    if draw(st.integers(0, 9)):
        request = pick(METHODS) + " " + pick(TARGETS) + pick(PROTOCOLS)
    else:
        request = draw(st.sampled_from(["-", "", "GET", "GET /", "GET  /a HTTP/1.1",
                                        "\\x22GET / HTTP/1.1", "GET /a\\\"b HTTP/1.1"]))
    status, size = pick(NUMBERS), pick(NUMBERS)
    ref, ua, xff, host = pick(TEXTS), pick(TEXTS), pick(TEXTS), pick(HOSTS)
    if i in (0, 1):
        line = f'{client} - - [{pick(STAMPS)}] "{request}" {status} {size}'
        if i == 0:
            line += f' "{ref}" "{ua}"'
        line += pick(RESTS)
    elif i == 2:
        method, _, uri = request.partition(" ")
        line = f'{client} [{pick(MSEC)}] "{method}" "{uri}" "{status}" {size} "{host}" "{xff}"'
    elif i == 3:
        line = f'{pick(ISO)} {client} "{request}" {status} "{host}" "{ua}"'
    else:
        line = f'[{pick(STAMPS)}] "{request}" {status} "{ref}"'
    if draw(st.integers(0, 9)) == 0:
        line = line[:draw(st.integers(0, len(line)))]  # truncated
    elif draw(st.integers(0, 19)) == 0:
        line += "\r"
    return i, line


def parsed(fmt_parse: object, line: str) -> object:
    """What one parse gives, comparable: the event's items with their types and its fields
    as a dict, or the BadLine's (reason, why, skip), or None."""
    try:
        ev = fmt_parse(line, 17)  # type: ignore[operator]
    except BadLine as b:
        return ("bad", b.reason, b.why, b.skip)
    if ev is None:
        return None
    assert type(ev) is LogEvent
    assert type(ev.fields).__name__ == "_LineFields"
    return ([(type(x), x) for x in ev[:10]], dict(ev.fields), ev.line, ev.headers)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines())
def test_a_compiled_parse_gives_the_pure_parses_event_or_error_for_any_line(
        case: tuple[int, str]) -> None:
    compiled = _compiled()
    i, line = case
    fmt = FORMATS[i]
    assert parsed(compiled.Parser(fmt).parse, line) == parsed(fmt.parse, line)


#: (format index, line, what the pure parse makes of it): every outcome, named.
TABLE = [
    (0, '10.1.2.3 - - [14/Nov/2023:22:13:19 +0000] "GET /a?x=1#f HTTP/1.1" 200 5 "-" '
        '"bot \\x22q\\x22"', "event"),
    (0, '2001:db8::1 - - [14/Nov/2023:22:13:19 -0700] "GET http://h.example/p?q HTTP/1.1" '
        '- - "r" "Apache \\"q\\" ua" "extra" 1', "event"),
    (0, '::1 - - [14/Nov/2023:22:13:19 +0000] "-" 400 0 "-" "-"', "no-request"),
    (0, '::1 - - [14/Nov/2023:22:13:19 +0000] "GET" 400 0 "-" "-"', "request"),
    (0, '::1 - - [14/Nov/2023:22:13:19 +0000] "\x00 / HTTP/1.1" 400 0 "-" "-"', "request"),
    (0, '::1 - - [31/Feb/2023:22:13:19 +0000] "GET / HTTP/1.1" 200 0 "-" "-"', "time"),
    (0, '::1 - - [14/Nov/2023:22:13', "format"),
    (0, "   ", None),
    (1, '- - - [1/Jan/2024:00:00:00 +0530] "ǅ /x HTTP/2.0" 007 - 0.1', "event"),
    (2, '::1 [1700000000.5] "GET" "/a?b" "1_0" - "-" "-"', "event"),
    (2, '::1 [1700000000.5] "GET" "/a" "abc" 5 "h" "-"', "status"),
    (2, '::1 [1700000000.5] "GET" "/a" "12345678901234567890" 5 "h" "-"', "event"),
    (3, '2023-11-14T22:13:19.250Z ::1 "GET / HTTP/1.1" 200 "example.com" "ua"', "event"),
    (3, '2023-13-14T22:13:19Z ::1 "GET / HTTP/1.1" 200 "example.com" "ua"', "time"),
    (4, '[14/Nov/2023:22:13:19 +0000] "POST //x#y HTTP/1.1" 200 "https://r/?q"', "event"),
]


@pytest.mark.parametrize(("i", "line", "outcome"), TABLE)
def test_a_compiled_parse_gives_the_pure_parses_outcome_for_each_kind_of_line(
        i: int, line: str, outcome: str | None) -> None:
    compiled = _compiled()
    fmt = FORMATS[i]
    pure = parsed(fmt.parse, line)
    assert (pure if pure is None or pure[0] != "bad" else pure[1]) \
        == (outcome if outcome != "event" else pure)  # the table says what the line is
    assert parsed(compiled.Parser(fmt).parse, line) == pure


def _read(raw: bytes, fmt: object, compiled: bool, monkeypatch: pytest.MonkeyPatch,
          **options: Any) -> tuple[list[tuple[object, ...]], ReadStats]:
    """Every event of `raw` (in the order handed out, each with the stats' line count
    when it came out) and the final `ReadStats`."""
    with monkeypatch.context() as m:
        if not compiled:
            m.setattr(_hot, "COMPILED", None)
        options.setdefault("window", 1.0)
        with read_log(io.BytesIO(raw), fmt, **options) as events:  # type: ignore[arg-type]
            out = [(*ev[:10], dict(ev.fields), ev.line, events.stats.lines,
                    events.stats.late) for ev in events]
        return out, events.stats


def random_log(rng: random.Random, n: int) -> bytes:
    """`n` combined lines, a second or two out of order here and there, with bad lines,
    blank ones, a line over the length limit, escapes, and no newline at the end."""
    out = []
    for k in range(n):
        t = 1_700_000_000 + k // 20 - (rng.choice([1, 3]) if rng.random() < 0.04 else 0)
        stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(t))
        r = rng.random()
        if r < 0.03:
            out.append(rng.choice(["", "garbage", f'1.2.3.4 - - [{stamp}] "-" 400 0 "-" "-"',
                                   '1.2.3.4 - - [31/Feb/2023:00:00:00 +0000] "GET / H" 200 1'
                                   ' "-" "-"']))
            continue
        if r < 0.035:
            out.append("x" * (1 << 20) + " long")
            continue
        out.append(f'{rng.choice(CLIENTS[:3])} - - [{stamp}] "{rng.choice(METHODS[:4])} '
                   f'{rng.choice(TARGETS)} HTTP/1.1" {rng.choice(["200", "429", "-"])} '
                   f'{rng.choice(["0", "512", "-"])} "{rng.choice(TEXTS)}" '
                   f'"{rng.choice(TEXTS)}"')
    return ("\n".join(out)).encode()  # the last line has no newline


@pytest.mark.parametrize(("seed", "options"), [
    (1, {}), (2, {"late": "drop"}), (3, {"window": 0}), (4, {"max_pending": 7}),
    (5, {"window": 30.0, "late": "drop"})])
def test_a_compiled_read_gives_the_same_events_and_read_stats(
        seed: int, options: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    _compiled()
    raw = random_log(random.Random(seed), 3000)
    fast, fast_stats = _read(raw, "combined", True, monkeypatch, **options)
    pure, pure_stats = _read(raw, "combined", False, monkeypatch, **options)
    assert fast == pure
    assert fast_stats == pure_stats
    assert pure_stats.malformed and pure_stats.skipped
    if not options:
        assert pure_stats.reordered and pure_stats.late
    if options.get("late") == "drop" and options.get("window") != 30.0:
        assert pure_stats.dropped
    assert "too-long" in pure_stats.malformed
    # and a truncated last line that is bad
    fast, fast_stats = _read(raw + b"\n1.2.3.4 - - [14/N", "combined", True, monkeypatch)
    pure, pure_stats = _read(raw + b"\n1.2.3.4 - - [14/N", "combined", False, monkeypatch)
    assert (fast, fast_stats) == (pure, pure_stats)
    assert pure_stats.malformed["truncated"] >= 1


def _request_slots(r: Replayed) -> tuple[object, ...] | None:
    """Every slot of the request a decision was made for, and the request's type."""
    if r.decision is None:
        return None
    req = r.decision.check.request
    return (type(req), *(getattr(req, n) for n in RequestInfo.__slots__))


class _OtherStore(MemoryStore):
    """A memory store that is not exactly one: replay decides through `decide_mapped`."""


#: A queue (delayed verdicts on the one-limit path); with a max_delay (the plan's refund).
LEAKY = '''
[http]
domain = "web"
descriptors = [["client_ip"]]

[[http.routes]]
name = "heavy"
path = "/login"
cost = 2

[[domains.web.descriptors]]
key = "client_ip"
limits = [{ name = "q", algorithm = "leaky-bucket", rate = "5/s", burst = 4 }]
'''
LEAKY_MAX_DELAY = LEAKY.replace("[http]\n", "[http]\nmax_delay = 0.5\n")


@pytest.mark.parametrize("text", [POLICIES, PER_IP, LEAKY, LEAKY_MAX_DELAY],
                         ids=["several", "per-ip", "leaky", "leaky-max-delay"])
@pytest.mark.parametrize("store", [None, _OtherStore], ids=["memory", "not-exactly-memory"])
def test_a_compiled_replay_decides_each_event_as_the_pure_loop(
        text: str, store: type[MemoryStore] | None, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _compiled()
    synthetic_log(tmp_path / "access.log", 3000)
    with read_log(tmp_path / "access.log", SYNTHETIC_FORMAT) as events:
        evs = list(events)
    policies = parse_policies_text(text)

    def run(compiled: bool) -> list[tuple[object, ...]]:
        with monkeypatch.context() as m:
            if not compiled:
                m.setattr(_hot, "COMPILED", None)
            return [(*outcome(r), r.event, _request_slots(r)) for r in
                    replay(policies, evs, store=None if store is None else store())]

    fast, pure = run(True), run(False)
    assert len(fast) == len(pure) == len(evs)
    for a, b in zip(fast, pure, strict=True):
        assert a == b, f"line {a[0]}: compiled {a[1:]} != pure {b[1:]}"
    assert {"allowed", "rejected"} <= {o[1] for o in pure}
    if text in (LEAKY, LEAKY_MAX_DELAY):
        assert "delayed" in {o[1] for o in pure}
