"""The log readers on logs a real nginx wrote (tests/replay/data/, made by make_sample.py),
checked against plain split-based parsers written here; and on broken, truncated, gzip'd,
mixed-zone and streamed input."""

from __future__ import annotations

import gzip
import io
import json
import sys
import zlib
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from ratekeeper import ConfigError
from ratekeeper.replay import (
    MAX_LINE,
    JsonFormat,
    LineFormat,
    LogEvent,
    LogFormat,
    ReadStats,
    Source,
    read_log,
)
from tests.replay.make_sample import JSON_FORMAT, REPLAY_FORMAT

DATA = Path(__file__).parent / "data"
REPLAY_LOG = DATA / "nginx-replay.log"
COMBINED_LOG = DATA / "nginx-combined.log"
JSONL_LOG = DATA / "nginx-access.jsonl"
TRACE = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mixed-traffic.jsonl"


def events(source: Source, fmt: str | LineFormat = "combined", **kw: Any
           ) -> tuple[list[LogEvent], ReadStats]:
    with read_log(source, fmt, **kw) as r:
        return list(r), r.stats


def split_nginx(line: str) -> dict[str, str]:
    """The replay format by hand: nginx escapes every quote, so splitting on " is exact."""
    q = line.rstrip("\n").split('"')
    addr, _, user, date, tz = q[0].split()
    status, size = q[2].split()
    _request_time, msec = q[8].split()
    return {"addr": addr, "user": user, "time": f"{date[1:]} {tz[:-1]}", "request": q[1],
            "status": status, "bytes": size, "referer": q[3], "ua": q[5], "xff": q[7],
            "msec": msec, "host": q[9]}


def path_of(request: str) -> str:
    target = request.split()[1].replace("\\x22", '"')
    if target.startswith("http://"):  # absolute form: the path is after the host
        target = "/" + target.split("/", 3)[3]
    return target.split("?")[0]


def test_real_nginx_log_counts_equal_a_split_parser() -> None:
    lines = REPLAY_LOG.read_text().splitlines()
    rows = [split_nginx(x) for x in lines]
    requests = [r for r in rows if len(r["request"].split(" ")) == 3]
    evs, stats = events(REPLAY_LOG, REPLAY_FORMAT)
    assert stats.lines == len(lines) > 250
    assert len(evs) == stats.events == len(requests)
    assert stats.malformed == {"request": len(rows) - len(requests)} == {"request": 1}
    example = stats.examples[0]
    assert example.excerpt.startswith("127.0.0.1") and "HELLO" in example.excerpt
    assert Counter(e.client for e in evs) == Counter(r["addr"] for r in requests)
    assert Counter(e.method for e in evs) == Counter(r["request"].split()[0] for r in requests)
    assert Counter(e.status for e in evs) == Counter(int(r["status"]) for r in requests)
    assert sum(e.bytes or 0 for e in evs) == sum(int(r["bytes"]) for r in requests)
    assert Counter(e.path for e in evs) == Counter(path_of(r["request"]) for r in requests)
    assert sorted(e.t for e in evs) == sorted(float(r["msec"]) for r in requests)
    assert [e.t for e in evs] == sorted(e.t for e in evs)  # time order
    xff = Counter(e.headers.get("x-forwarded-for") for e in evs)
    assert xff == Counter(None if r["xff"] == "-" else r["xff"] for r in requests)
    assert Counter(e.host for e in evs) == Counter(r["host"] for r in requests)


def test_ipv6_clients_and_escaped_quotes_utf8_backslashes_are_read_as_sent() -> None:
    evs, _ = events(REPLAY_LOG, REPLAY_FORMAT)
    n6 = sum(1 for x in REPLAY_LOG.read_text().splitlines() if x.startswith("::1 "))
    assert n6 > 0 and sum(e.client == "::1" for e in evs) == n6
    agents = {e.user_agent for e in evs}
    # make_sample.py sent these exact strings; nginx wrote them as \x22, \x5C, \xC3\xA9.
    assert 'bot "quoted" \\backslash\\' in agents
    assert "caf\u00e9-client/1.0 (\u00fcml\u00e4ut)" in agents
    assert '/quote"in/path' in {e.path for e in evs}
    absolute = [e for e in evs if e.fields["request"].startswith("GET http://")]
    assert absolute and all(e.path == "/absolute" for e in absolute)


def test_the_same_requests_read_alike_from_combined_custom_and_json_logs() -> None:
    custom, _ = events(REPLAY_LOG, REPLAY_FORMAT, window=0)
    combined, cstats = events(COMBINED_LOG, "combined", window=0)
    js, jstats = events(JSONL_LOG, JsonFormat(time="msec"), window=0)
    iso, _ = events(JSONL_LOG, "jsonl", window=0)  # "time": $time_iso8601

    def key(e: LogEvent) -> tuple[object, ...]:
        return (e.client, e.method, e.path, e.status, e.bytes, e.user_agent)
    assert [key(e) for e in custom] == [key(e) for e in combined] == [key(e) for e in js]
    assert [e.t for e in js] == [e.t for e in custom]
    assert [e.t for e in combined] == [float(int(e.t)) for e in custom] == [e.t for e in iso]
    assert cstats.malformed == jstats.malformed == {"request": 1}


def test_log_format_compiled_from_nginx_conf_text() -> None:
    fmt = LogFormat('$remote_addr:$remote_port [$time_iso8601] "$request_method ${uri}" '
                    '$status "$http_x_api_key"')
    assert fmt.variables == ("remote_addr", "remote_port", "time_iso8601", "request_method",
                             "uri", "status", "http_x_api_key")
    line = '2001:db8::7:51234 [2024-03-01T12:00:00+01:00] "PATCH /v1/x" 429 "k\\x22ey"'
    ev = fmt.parse(line, 1)
    assert ev is not None
    assert (ev.client, ev.fields["remote_port"], ev.method, ev.path, ev.status) == (
        "2001:db8::7", "51234", "PATCH", "/v1/x", 429)
    assert ev.t == datetime.fromisoformat("2024-03-01T12:00:00+01:00").timestamp()
    assert ev.headers == {"x-api-key": 'k"ey'}


@pytest.mark.parametrize(("spec", "needle"), [
    ('$remote_addr [$time_local] "$request" $upstream_magic', "$upstream_magic"),
    ('$remote_addr [$time_local] "${reqest}"', "$reqest"),
    ('$remote_addr "$request"', "needs $time_local, $time_iso8601 or $msec"),
    ("remote_addr time_local", "has no $variables"),
])
def test_log_format_errors_name_what_is_wrong(spec: str, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        LogFormat(spec)
    assert needle in str(e.value)


def test_log_format_variables_of_the_users_config_are_accepted_when_declared() -> None:
    spec = '$remote_addr [$time_local] "$request" $client_tier'
    with pytest.raises(ConfigError, match=r"extra_variables=\['client_tier'\]"):
        LogFormat(spec)
    evs, _ = events(io.BytesIO(b'::1 [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1" gold\n'),
                    spec, extra_variables=("client_tier",))
    assert evs[0].fields["client_tier"] == "gold"


def test_gzip_is_recognised_by_its_bytes_not_its_name(tmp_path: Path) -> None:
    plain, _ = events(COMBINED_LOG)
    disguised = tmp_path / "access.log.1"  # rotated and compressed, no .gz suffix
    disguised.write_bytes(gzip.compress(COMBINED_LOG.read_bytes()))
    assert events(disguised)[0] == plain
    assert events(io.BytesIO(disguised.read_bytes()))[0] == plain


def test_a_truncated_gzip_file_yields_every_complete_line_and_reports_the_rest(
        tmp_path: Path) -> None:
    whole = gzip.compress(COMBINED_LOG.read_bytes())
    cut = whole[: len(whole) * 2 // 3]
    # What is really in the truncated file, by zlib directly (skip the 10-byte gzip header).
    got = zlib.decompressobj(-zlib.MAX_WBITS).decompress(cut[10:])
    complete = got.count(b"\n")
    assert 10 < complete < COMBINED_LOG.read_bytes().count(b"\n")
    path = tmp_path / "cut.gz"
    path.write_bytes(cut)
    evs, stats = events(path)
    n_hello = sum(b'"HELLO"' in x for x in got.split(b"\n")[:complete])
    assert len(evs) == complete - n_hello
    assert stats.malformed.get("truncated") == (2 if got[-1:] != b"\n" else 1)
    assert any("gzip stream ends early" in m.why for m in stats.examples)


def test_stdin_and_streams_of_bytes_text_and_gzip(monkeypatch: pytest.MonkeyPatch) -> None:
    data = COMBINED_LOG.read_bytes()
    plain, _ = events(COMBINED_LOG)
    assert events(io.StringIO(data.decode()))[0] == plain
    assert events(io.BufferedReader(io.BytesIO(gzip.compress(data))))[0] == plain
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(gzip.compress(data))))
    assert events("-")[0] == plain


def test_malformed_and_truncated_lines_are_counted_with_examples_never_fatal() -> None:
    good = '203.0.113.9 - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.1" 200 5 "-" "ua"'
    lines = [
        good,
        "total garbage",
        good.replace("10/Oct", "32/Oct"),            # no 32 October
        good.replace("Oct", "Okt"),                  # no such month
        good[:50],                                   # cut mid-line, then the log goes on
        "",                                          # blank
        good.replace('"ua"', '"caf\udcc3-\udcff"'),  # invalid UTF-8 bytes in the agent
        good.replace(" 200 ", " 2x0 "),
        good,
        good[:60],                                   # the last line, without its newline
    ]
    raw = "\n".join(lines).encode("utf-8", "surrogateescape")
    evs, stats = events(io.BytesIO(raw), max_examples=3)
    assert len(evs) == stats.events == 3
    assert evs[1].user_agent == "caf\ufffd-\ufffd"
    assert stats.lines == len(lines)
    assert stats.skipped == {"blank": 1}
    assert stats.malformed == {"format": 3, "time": 2, "truncated": 1}
    assert [(m.line, m.reason) for m in stats.examples] == [
        (2, "format"), (3, "time"), (4, "time")]
    assert "day is out of range" in stats.examples[1].why
    assert "Okt" in stats.examples[2].why
    assert "3 events" in stats.summary() and "line 2: does not match" in stats.summary()


def test_a_line_longer_than_the_limit_is_skipped_in_bounded_memory() -> None:
    good = b'::1 - - [10/Oct/2000:13:55:36 +0000] "GET / HTTP/1.1" 200 1 "-" "-"\n'
    raw = good + b"x" * (MAX_LINE + 10) + b"\n" + good
    evs, stats = events(io.BytesIO(raw))
    assert len(evs) == 2 and stats.malformed == {"too-long": 1}
    assert stats.examples[0].line == 2 and stats.lines == 3


def test_mixed_time_zones_give_one_clock() -> None:
    stamps = ["10/Oct/2000:13:55:36 -0700", "10/Oct/2000:20:55:37 +0000",
              "10/Oct/2000:22:55:38 +0200", "11/Oct/2000:02:25:39 +0530",
              "10/Oct/2000:09:55:40 -1100"]
    raw = "".join(f'::1 - - [{s}] "GET /{i} HTTP/1.1" 200 1 "-" "-"\n'
                  for i, s in enumerate(reversed(stamps)))
    evs, stats = events(io.StringIO(raw), window=10)
    expect = sorted(datetime.strptime(s, "%d/%b/%Y:%H:%M:%S %z").timestamp() for s in stamps)
    assert [e.t for e in evs] == expect == [expect[0] + i for i in range(5)]
    assert stats.reordered == 4 and stats.late == 0


def test_common_format_and_apache_escapes() -> None:
    raw = ('127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" '
           '200 2326\n'
           '::1 - - [10/Oct/2000:13:55:37 -0700] "POST /x HTTP/1.1" 204 - "-" '
           '"Apache says \\"hi\\""\n')
    evs, _ = events(io.StringIO(raw), "common")
    assert [(e.client, e.method, e.status, e.bytes) for e in evs] == [
        ("127.0.0.1", "GET", 200, 2326), ("::1", "POST", 204, 0)]
    assert evs[1].fields["rest"].endswith('"Apache says \\"hi\\""')
    comb, _ = events(io.StringIO(raw), "combined")
    assert [e.user_agent for e in comb] == ['Apache says "hi"']


def test_jsonl_field_names_are_configurable() -> None:
    raw = "\n".join(json.dumps(x) for x in [
        {"ts": 1_700_000_000_250, "ip": "::1", "req": {"verb": "GET", "url": "/a?b=1",
                                                       "headers": {"X-Key": ["k1"]}}},
        {"ts": 1_700_000_000_100, "ip": "198.51.100.7", "req": {"verb": "PUT", "url": "/b"},
         "code": 201},
        {"ip": "::2"},                               # no time
        {"ts": "soon", "ip": "::3"},                 # not a time
        [1, 2],
    ]) + "\n{broken json\n"
    fmt = JsonFormat(time="ts", client="ip", method="req.verb", path="req.url",
                     status="code", headers="req.headers")
    evs, stats = events(io.StringIO(raw), fmt)
    assert [(e.t, e.client, e.method, e.path, e.status) for e in evs] == [
        (1_700_000_000.1, "198.51.100.7", "PUT", "/b", 201),
        (1_700_000_000.25, "::1", "GET", "/a", None)]
    assert evs[1].headers == {"x-key": "k1"} and evs[1].fields["req.url"] == "/a?b=1"
    assert stats.malformed == {"time": 2, "json": 2}
    assert stats.reordered == 1


@pytest.mark.parametrize(("value", "unit", "expect"), [
    ("2000-10-10T13:55:36Z", "auto", 971186136.0),
    ("2000-10-10T13:55:36.5-07:00", "auto", 971211336.5),
    ("2000-10-10 13:55:36", "auto", 971186136.0),
    ("10/Oct/2000:13:55:36 -0700", "auto", 971211336.0),
    (971186136, "auto", 971186136.0),
    (971186136500, "auto", 971186136.5),
    ("971186136.25", "auto", 971186136.25),
    (971186136500, "ms", 971186136.5),
    ("2000-10-10T13:55:36+0000", "iso", 971186136.0),
])
def test_jsonl_times_in_every_form(value: object, unit: str, expect: float) -> None:
    line = json.dumps({"time": value, "remote_addr": "::1", "request": "GET / HTTP/1.1"})
    evs, stats = events(io.StringIO(line + "\n"), JsonFormat(time_unit=unit))
    assert stats.malformed == {}
    assert evs[0].t == pytest.approx(expect) and evs[0].method == "GET"


def test_simulate_traces_are_read_by_the_simulators_rules() -> None:
    rows = [json.loads(x) for x in TRACE.read_text().splitlines()
            if x.strip() and not x.startswith("#")]
    evs, stats = events(TRACE, "trace")
    assert len(evs) == len(rows) and stats.malformed == {}
    assert Counter(e.client for e in evs) == Counter(r.get("key", "default") for r in rows)
    assert sum(float(e.fields["cost"]) for e in evs) == sum(r.get("cost", 1) for r in rows)
    raw = '# a comment\n{"key": "a"}\n{"t": 2, "cost": 0}\n{"t": true}\n{"t": 3}\n'
    evs, stats = events(io.StringIO(raw), "trace")
    assert [(e.t, e.client) for e in evs] == [(0.0, "a"), (3.0, "default")]
    assert stats.skipped == {"comment": 1} and stats.malformed == {"field": 1, "time": 1}


@pytest.mark.parametrize(("kw", "needle"), [
    ({"format": "apache"}, "unknown log format 'apache'"),
    ({"window": -1}, "window must be"),
    ({"late": "keep"}, "late must be 'clamp' or 'drop'"),
])
def test_bad_options_raise_config_errors(kw: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        read_log(io.BytesIO(b""), **kw)  # type: ignore[arg-type]
    assert needle in str(e.value)


def test_json_format_string_of_make_sample_matches_its_log() -> None:
    # The committed JSON log was written with this format: every key is there.
    first = json.loads(JSONL_LOG.read_text().splitlines()[0])
    assert set(first) == {k.split('"')[1] for k in JSON_FORMAT.strip("{}").split(",")}
