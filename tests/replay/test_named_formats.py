"""Formats a user has, named on the command line: an Apache ``LogFormat`` with a strftime
time (the netnea tutorial's ``[%{%Y-%m-%d %H:%M:%S}t.%{usec_frac}t]``, its lines written at
request end, so out of order by the longest request), and a JSON Lines log whose keys are
not the usual ones (``--field time=ts --field client=remote``). Each answer is checked
against a count written here: a per-client token bucket over the requests in true order."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ratekeeper import ConfigError
from ratekeeper.replay import read_log
from ratekeeper.replay._formats import apache_format

CLI = [sys.executable, "-m", "ratekeeper"]

#: A token bucket per client, 1/s, burst 3.
PER_CLIENT = '''
[http]
domain = "web"
descriptors = [["client_ip"]]

[[domains.web.descriptors]]
key = "client_ip"
limits = [{ name = "per-client", algorithm = "token-bucket", rate = "1/s", burst = 3 }]
'''

#: The netnea tutorial's extended LogFormat (Apache tutorial 5), as its httpd.conf writes it.
NETNEA = ('%h %{GEOIP_COUNTRY_CODE}e %u [%{%Y-%m-%d %H:%M:%S}t.%{usec_frac}t] "%r" %>s %b '
          '"%{Referer}i" "%{User-Agent}i" "%{Content-Type}i" %{remote}p %v %A %p %R '
          '%{BALANCER_WORKER_ROUTE}e %X "%{cookie}n" %{UNIQUE_ID}e %{SSL_PROTOCOL}x '
          '%{SSL_CIPHER}x %I %O %{ratio}n%% %D %{ModSecTimeIn}e %{ApplicationTime}e '
          '%{ModSecTimeOut}e %{ModSecAnomalyScoreInPLs}e %{ModSecAnomalyScoreOutPLs}e '
          '%{ModSecAnomalyScoreIn}e %{ModSecAnomalyScoreOut}e')

T0 = datetime(2015, 10, 5, 12, 0, 0, tzinfo=timezone.utc)


def bucket_rejections(requests: list[tuple[float, str]], rate: float, burst: int) -> int:
    """Rejections of a token bucket per client (full at its first request), `requests`
    (time, client) taken in time order."""
    tokens: dict[str, tuple[float, float]] = {}
    rejected = 0
    for t, client in sorted(requests, key=lambda r: r[0]):
        have, last = tokens.get(client, (float(burst), t))
        have = min(float(burst), have + (t - last) * rate)
        if have >= 1:
            have -= 1
        else:
            rejected += 1
        tokens[client] = (have, t)
    return rejected


def netnea_log(path: Path, n: int = 600) -> list[tuple[float, str]]:
    """`n` lines in the netnea format, each stamped with its request's start (as ``%t``
    is) but written when it ended (start + ``%D``, up to 276 s for a slow one), so the file
    is out of order by the longest request. -> (start, client) of each request."""
    rng = random.Random(5)
    clients = [f"192.0.2.{i}" for i in range(1, 9)]
    reqs = []
    for i in range(n):
        start = T0 + timedelta(microseconds=i * 250_000 + rng.randrange(1000))
        duration_us = 276_000_000 if i == 40 else rng.randrange(200, 900_000)
        reqs.append((start, start + timedelta(microseconds=duration_us), duration_us,
                     rng.choice(clients)))
    lines = []
    for start, _end, d, client in sorted(reqs, key=lambda r: r[1]):  # written at the end
        lines.append(f'{client} US - [{start:%Y-%m-%d %H:%M:%S}.{start:%f}] "GET /index.html '
                      f'HTTP/1.1" 200 45 "-" "curl/7.35.0" "-" 52063 www.example.com '
                      f'127.0.0.1 443 proxy-server - + "-" Vh{d:08d} TLSv1.2 '
                      f'ECDHE-RSA-AES256-GCM-SHA384 434 1637 -% {d} 1438 0 1437 0 0 0 0')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [(s.timestamp(), c) for s, _, _, c in reqs]


def run(tmp_path: Path, log: Path, *args: str) -> subprocess.CompletedProcess[str]:
    pol = tmp_path / "per-client.toml"
    pol.write_text(PER_CLIENT)
    return subprocess.run([*CLI, "replay", "--policies", str(pol), "--log", str(log), *args],
                          capture_output=True, text=True, timeout=120, check=False)


def table_row(out: str, label: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(label))


def test_an_apache_strftime_time_with_microseconds_is_read_to_the_microsecond() -> None:
    fmt = apache_format('%h [%{%Y-%m-%d %H:%M:%S}t.%{usec_frac}t] "%r" %>s %b')
    ev = fmt.parse('192.0.2.1 [2015-10-05 12:00:01.123456] "GET /a HTTP/1.1" 200 5', 1)
    assert ev is not None
    assert ev.t == (T0 + timedelta(seconds=1, microseconds=123456)).timestamp()
    fmt = apache_format('%h [%{%d/%b/%Y:%H:%M:%S %z}t.%{msec_frac}t] "%r" %>s %b')
    ev = fmt.parse('192.0.2.1 [05/Oct/2015:14:00:01 +0200.250] "GET /a HTTP/1.1" 200 5', 1)
    assert ev is not None and ev.t == (T0 + timedelta(seconds=1.25)).timestamp()


def test_the_netnea_log_format_replays_exactly_with_its_disorder_measured(
        tmp_path: Path) -> None:
    log = tmp_path / "netnea.log"
    requests = netnea_log(log)
    want = bucket_rejections(requests, 1.0, 3)
    r = run(tmp_path, log, "--format", NETNEA)
    assert r.returncode == 0, r.stderr
    assert table_row(r.stdout, "requests").split()[-1] == str(len(requests))
    assert table_row(r.stdout, "rejected").split()[-1] == str(want)
    assert "clamped" not in r.stdout + r.stderr and "malformed" not in r.stderr
    assert want > 0


@pytest.mark.parametrize(("spec", "needle"), [
    ("%h [%{%Y-%m-%d %H:%M:%S %Q}t] %r", "'%Q'"),
    ("%h [%{%Y-%m-%d %H:%M}t] %r", "has no %S"),
    ("%h [%t.%{usec_frac}t] %r", "fraction of the time right before it"),
    ("%h %{msec}t %r", "%{sec}t"),
])
def test_an_apache_time_replay_cannot_read_is_an_error_naming_it(spec: str,
                                                                 needle: str) -> None:
    with pytest.raises(ConfigError, match=None) as e:
        apache_format(spec)
    assert needle in str(e.value), str(e.value)


def jsonl_log(path: Path) -> list[tuple[float, str]]:
    rng = random.Random(3)
    reqs = [(T0.timestamp() + i * 0.2, rng.choice(["198.51.100.1", "198.51.100.2"]))
            for i in range(200)]
    path.write_text("".join(json.dumps({"when": t, "remote": c, "req": {"line": "GET /x HTTP/1.1"},
                                        "code": 200}) + "\n" for t, c in reqs))
    return reqs


def test_json_lines_keys_are_named_with_field_flags(tmp_path: Path) -> None:
    log = tmp_path / "app.jsonl"
    requests = jsonl_log(log)
    r = run(tmp_path, log, "--field", "time=when", "--field", "client=remote",
            "--field", "request=req.line", "--field", "status=code")
    assert r.returncode == 0, r.stderr
    assert table_row(r.stdout, "requests").split()[-1] == "200"
    assert table_row(r.stdout, "rejected").split()[-1] == str(
        bucket_rejections(requests, 1.0, 3))
    assert table_row(r.stdout, "clients affected").split()[-2].endswith("/2")
    with read_log(log, "jsonl") as events:  # without the flags: no time, nothing read
        assert list(events) == []


def test_a_bad_field_flag_is_an_error_naming_it(tmp_path: Path) -> None:
    log = tmp_path / "app.jsonl"
    jsonl_log(log)
    r = run(tmp_path, log, "--field", "when=time")
    assert r.returncode == 2 and "--field 'when=time'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = run(tmp_path, log, "--field", "time=when", "--format", "combined")
    assert r.returncode == 2 and "is not jsonl" in r.stderr, r.stderr
