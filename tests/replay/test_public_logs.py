"""``ratekeeper replay`` on public access logs nobody on this project wrote
(tests/replay/data/public/SOURCES.md says where each comes from), run as a user first runs
it: only ``--policies`` and ``--log``. Each answer is checked against a count written here
with `re` and a per-client token bucket, not with the project's parser."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

PUBLIC = Path(__file__).parent / "data" / "public"
CLI = [sys.executable, "-m", "ratekeeper"]

#: One limit: a token bucket per client address, 0.5/s (30/minute), burst 5.
PER_ADDRESS = '''
[http]
domain = "web"
descriptors = [["client_ip"]]

[[domains.web.descriptors]]
key = "client_ip"
limits = [{ name = "per-address", algorithm = "token-bucket", rate = "30/minute", burst = 5 }]
'''

_LINE = re.compile(r'(\S+) \S+ \S+ \[([^\]]+)\] "')


def bucket_rejections(path: Path, rate: float, burst: int) -> dict[str, int]:
    """Rejections per client of a token bucket (full at a client's first request, one token
    a request, `rate` tokens a second up to `burst`), the requests in true time order."""
    requests = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _LINE.match(line)
        assert m is not None, line
        t = datetime.strptime(m[2], "%d/%b/%Y:%H:%M:%S %z").timestamp()
        requests.append((t, m[1]))
    requests.sort(key=lambda r: r[0])  # stable: equal times keep their line order
    tokens: dict[str, tuple[float, float]] = {}
    rejected: dict[str, int] = defaultdict(int)
    for t, client in requests:
        have, last = tokens.get(client, (float(burst), t))
        have = min(float(burst), have + (t - last) * rate)
        if have >= 1:
            have -= 1
        else:
            rejected[client] += 1
        tokens[client] = (have, t)
    return dict(rejected)


def replay(tmp_path: Path, log: Path) -> subprocess.CompletedProcess[str]:
    pol = tmp_path / "per-address.toml"
    pol.write_text(PER_ADDRESS)
    return subprocess.run([*CLI, "replay", "--policies", str(pol), "--log", str(log)],
                          capture_output=True, text=True, timeout=120, check=False)


def table_row(out: str, label: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(label))


def test_elastic_apache_sample_shuffled_within_a_minute_replays_exactly(tmp_path: Path) -> None:
    """Its lines are up to 59 s out of order: the default measures that first, so nothing is
    clamped and the rejections are the bucket's own."""
    log = PUBLIC / "elastic-apache.log"
    want = bucket_rejections(log, 0.5, 5)
    r = replay(tmp_path, log)
    assert r.returncode == 0, r.stderr
    assert table_row(r.stdout, "rejected").split()[-1] == str(sum(want.values()))
    assert table_row(r.stdout, "clients affected").split()[-2].startswith(f"{len(want)}/")
    assert "clamped" not in r.stdout + r.stderr


def test_common_log_format_is_detected_without_format(tmp_path: Path) -> None:
    """The elastic sample cut to Common Log Format (its first seven fields, as Apache's
    ``common`` writes them): read as such with no ``--format``, not 100 % malformed."""
    common = tmp_path / "common.log"
    common.write_text("".join(" ".join(line.split(" ")[:10]) + "\n" for line in
                              (PUBLIC / "elastic-apache.log").read_text().splitlines()))
    want = bucket_rejections(common, 0.5, 5)
    r = replay(tmp_path, common)
    assert r.returncode == 0, r.stderr
    assert table_row(r.stdout, "requests").split()[-1] == "1200"
    assert table_row(r.stdout, "rejected").split()[-1] == str(sum(want.values()))
    assert "malformed" not in r.stderr


def test_log_with_no_readable_line_is_an_error_naming_the_format_tried(tmp_path: Path) -> None:
    """The sample's README is no access log: exit 2, the reason and the format tried, no
    all-zero table."""
    readme = PUBLIC / "SOURCES.md"
    r = replay(tmp_path, readme)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "no readable line" in r.stderr and "'combined'" in r.stderr, r.stderr
    assert "--format" in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_lines_still_clamped_are_reported_and_fail_the_run_unless_accepted(
        tmp_path: Path) -> None:
    """A window the user sets below the sample's disorder clamps lines: the table, the JSON
    (``log.clamped_lines``) and stderr say how many, and the exit status is 3 until
    ``--accept-clamped``."""
    log = PUBLIC / "elastic-apache.log"
    pol = tmp_path / "per-address.toml"
    pol.write_text(PER_ADDRESS)
    out = tmp_path / "out.json"
    args = [*CLI, "replay", "--policies", str(pol), "--log", str(log), "--order-window", "2",
            "--json", str(out)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 3, r.stderr
    clamped = json.loads(out.read_text())["log"]["clamped_lines"]
    assert clamped > 0
    assert table_row(r.stdout, "clamped lines").split()[2] == str(clamped)
    assert f"{clamped} lines were more than --order-window 2 s out of order" in r.stderr
    assert "--accept-clamped" in r.stderr
    r = subprocess.run([*args, "--accept-clamped"], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr


def test_apache_logformat_string_reads_the_elastic_sample(tmp_path: Path) -> None:
    """``--format`` takes Apache's own LogFormat for combined, as httpd.conf writes it."""
    log = PUBLIC / "elastic-apache.log"
    pol = tmp_path / "per-address.toml"
    pol.write_text(PER_ADDRESS)
    fmt = '%h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-Agent}i"'
    r = subprocess.run([*CLI, "replay", "--policies", str(pol), "--log", str(log),
                        "--format", fmt], capture_output=True, text=True, timeout=120,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert table_row(r.stdout, "rejected").split()[-1] == str(
        sum(bucket_rejections(log, 0.5, 5).values()))
    assert "malformed" not in r.stderr
    r = subprocess.run([*CLI, "replay", "--policies", str(pol), "--log", str(log),
                        "--format", "%h %{%Y-%m-%d}X %t"], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 2 and "'%{%Y-%m-%d}X'" in r.stderr and "Traceback" not in r.stderr


def test_an_unknown_nginx_variable_is_named_by_a_command_line_flag(tmp_path: Path) -> None:
    """The error for a variable nginx does not define points to ``--variable`` (not only to
    a Python parameter), and that flag reads the log."""
    log = Path(__file__).parent / "data" / "nginx-combined.log"
    pol = tmp_path / "per-address.toml"
    pol.write_text(PER_ADDRESS)
    fmt = ('$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
           '"$http_referer" "$client_agent"')
    args = [*CLI, "replay", "--policies", str(pol), "--log", str(log), "--format", fmt]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2 and "--variable client_agent" in r.stderr, r.stderr
    r = subprocess.run([*args, "--variable", "client_agent"], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    request = re.compile(r'\S+ - \S+ \[[^\]]+\] "[A-Z]+ \S+ HTTP/')
    want = sum(1 for line in log.read_text().splitlines() if request.match(line))
    assert table_row(r.stdout, "requests").split()[-1] == str(want)


def _nice_ceil(x: float) -> float:
    """`x` rounded up to two significant digits (0.2167 -> 0.22)."""
    step = 10.0 ** (math.floor(math.log10(x)) - 1)
    return round(math.ceil(x / step - 1e-9) * step, 12)


def _nearest_rank(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[max(1, math.ceil(q * len(xs) - 1e-9)) - 1]


def requests_of(path: Path) -> list[tuple[float, str, int]]:
    """(time, client, status) of each line, in true time order."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _LINE.match(line)
        assert m is not None, line
        status = int(line.rsplit(" ", 2)[1])
        out.append((datetime.strptime(m[2], "%d/%b/%Y:%H:%M:%S %z").timestamp(), m[1],
                    status))
    out.sort(key=lambda r: r[0])
    return out


def least_burst(times: list[float], rate: float) -> int:
    """The smallest whole capacity of a token bucket at `rate` that admits all of `times`."""
    burst = 1
    while True:
        have, last = float(burst), times[0]
        for t in times:
            have = min(float(burst), have + (t - last) * rate)
            last = t
            if have < 1 - 1e-9:
                break
            have -= 1
        else:
            return burst
        burst += 1


def recommended(path: Path, target: float = 0.99, window: float = 60.0
                ) -> tuple[float, int, list[str]]:
    """`recommend`'s stated rule, counted here: abusive clients (>= 10 requests, >= 50 % of
    them 4xx but 429) left out; the rate the `target` quantile of the clients' busiest
    aligned `window` divided by it, rounded up to two digits; the burst the `target`
    quantile of each client's least burst at that rate. -> (rate, burst, abusive)."""
    reqs = requests_of(path)
    by: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for t, c, s in reqs:
        by[c].append((t, s))
    abusive = sorted(c for c, rs in by.items() if len(rs) >= 10 and 2 * sum(
        1 for _, s in rs if 400 <= s < 500 and s != 429) >= len(rs))
    counted = {c: [t for t, _ in rs] for c, rs in by.items() if c not in abusive}
    span = reqs[-1][0] - reqs[0][0]
    w = max(min(window, span), 1.0)
    peaks = [max(defaultdict(int, {k: sum(1 for t in ts if math.floor(t / window) == k)
                                   for k in {math.floor(t / window) for t in ts}}).values())
             / w for ts in counted.values()]
    rate = _nice_ceil(_nearest_rank(peaks, target))
    burst = int(_nearest_rank([least_burst(ts, rate) for ts in counted.values()], target))
    return rate, burst, abusive


def recommend(tmp_path: Path, log: Path) -> dict[str, Any]:
    out = tmp_path / "rec.json"
    r = subprocess.run([*CLI, "recommend", "--log", str(log), "--json", str(out)],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def test_nasa_trace_host_names_are_clients_of_their_own(tmp_path: Path) -> None:
    """The 1995 NASA-HTTP trace (Common Log Format, ``HostnameLookups``: most clients are
    host names): each host is its own client, so the rejections are the bucket's own, and
    the run says once how many clients were names."""
    log = PUBLIC / "nasa-http-aug95.log"
    want = bucket_rejections(log, 0.5, 5)
    clients = {line.split(" ", 1)[0] for line in log.read_text().splitlines()}
    names = {c for c in clients if not re.fullmatch(r"\d+\.\d+\.\d+\.\d+", c)}
    named_lines = sum(1 for line in log.read_text().splitlines()
                      if line.split(" ", 1)[0] in names)
    r = replay(tmp_path, log)
    assert r.returncode == 0, r.stderr
    assert table_row(r.stdout, "rejected").split()[-1] == str(sum(want.values()))
    assert table_row(r.stdout, "clients affected").split()[-2] == f"{len(want)}/{len(clients)}"
    top = table_row(r.stdout, "top rejected")
    for client, n in want.items():
        assert f"client_ip={client} {n}" in top, top
    note = f"{len(names)} clients ({named_lines} lines) are not IP addresses"
    assert r.stderr.count(note) == 1, r.stderr
    assert len(names) > len(clients) / 2 and sum(want.values()) > 0


def test_nasa_trace_recommendation_is_the_stated_rule_counted_here(tmp_path: Path) -> None:
    log = PUBLIC / "nasa-http-aug95.log"
    rate, burst, abusive = recommended(log)
    (lim,) = recommend(tmp_path, log)["limits"]
    assert (lim["rate"], lim["burst"]) == (rate, burst)
    assert sorted(a["key"] for a in lim["abusive"]) == [f"client_ip={c}" for c in abusive]
    assert lim["keys"] == len({line.split(" ", 1)[0] for line in log.read_text().splitlines()
                               } - set(abusive))
