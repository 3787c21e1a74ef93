"""A log's client that is not an IP address (a host name written with ``HostnameLookups``,
an anonymised address) is a client of its own in replay and recommend, and the CLI says so
once; the live `ClientIP` still keys such a peer ``ip:unknown`` (a TCP peer is always an
address, and garbage never widens a limit)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ratekeeper.policy._loader import parse_policies_text
from ratekeeper.policy._request import ClientIP, RequestInfo
from ratekeeper.replay import _hot
from ratekeeper.replay._events import LogEvent
from ratekeeper.replay._replay import replay

CLI = [sys.executable, "-m", "ratekeeper"]

#: A token bucket per client, burst 2, refilling 1 a minute: the third request of a
#: client within a second is its first rejection.
BURST_2 = '''
[http]
domain = "web"
descriptors = [["client_ip"]]

[[domains.web.descriptors]]
key = "client_ip"
limits = [{ name = "per-client", algorithm = "token-bucket", rate = "1/minute", burst = 2 }]
'''

#: Two requests from each of three host names, two invalid (anonymised) addresses and one
#: real address, all within one second: no client is over its burst of 2.
CLIENTS = ["piweba3y.prodigy.com", "unicomp6.unicomp.net", "burger.letters.com",
           "10.0.0.x", "2001:db8::zzzz", "198.51.100.7"]
LINES = [f'{c} - - [01/Jul/1995:00:00:0{i} -0400] "GET /a HTTP/1.0" 200 10'
         for i in range(2) for c in CLIENTS]


def event(t: float, client: str, line: int) -> LogEvent:
    return LogEvent(t, client, "GET", "/a", 200, 10, None, None, None, {}, {}, line)


def events() -> list[LogEvent]:
    return [event(1_000.0 + i / 100, c, i + 1)
            for i, c in enumerate(c for _ in range(2) for c in CLIENTS)]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure"])
def test_each_client_that_is_not_an_address_has_a_counter_of_its_own(
        compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not compiled:
        monkeypatch.setattr(_hot, "COMPILED", None)
    elif _hot.COMPILED is None:
        pytest.skip("the compiled replay path (_replay_hot_c) is not built here")
    out = list(replay(parse_policies_text(BURST_2), events()))
    assert [r.verdict for r in out] == ["allowed"] * 12
    keys = {r.decision.check.descriptors[0].entries for r in out if r.decision is not None}
    assert keys == {(("client_ip", c),) for c in CLIENTS}


def test_a_third_request_of_one_named_client_is_rejected_and_no_other_clients() -> None:
    evs = [*events(), event(1_000.5, "burger.letters.com", 13)]
    out = list(replay(parse_policies_text(BURST_2), evs))
    assert [r.verdict for r in out] == ["allowed"] * 12 + ["rejected"]


def test_no_client_in_the_log_is_still_one_unknown_client() -> None:
    evs = [event(1_000.0 + i / 10, c, i + 1) for i, c in enumerate(["-", "", "-"])]
    out = list(replay(parse_policies_text(BURST_2), evs))
    assert [r.verdict for r in out] == ["allowed", "allowed", "rejected"]
    assert out[0].decision is not None
    assert out[0].decision.check.descriptors[0].entries == (("client_ip", "unknown"),)


def test_the_live_client_ip_still_keys_a_peer_that_is_not_an_address_as_unknown() -> None:
    cip = ClientIP()
    for peer in ("piweba3y.prodigy.com", "10.0.0.x"):
        assert cip(RequestInfo("GET", "/", {}, peer)) == "ip:unknown"


def _write(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "hosts.log"
    log.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    pol = tmp_path / "burst2.toml"
    pol.write_text(BURST_2)
    return log, pol


def test_replay_says_once_how_many_clients_and_lines_are_not_addresses(
        tmp_path: Path) -> None:
    log, pol = _write(tmp_path)
    out = tmp_path / "out.json"
    res = subprocess.run([*CLI, "replay", "--policies", str(pol), "--log", str(log),
                          "--json", str(out)], capture_output=True, text=True, timeout=60,
                         check=False)
    assert res.returncode == 0, res.stderr
    note = "5 clients (10 lines) are not IP addresses"
    assert res.stderr.count(note) == 1, res.stderr
    assert re.search(r"^clients not IP addresses +5 \(10 lines\)$", res.stdout, re.M), \
        res.stdout
    data = json.loads(out.read_text())
    assert (data["named_clients"], data["named_lines"]) == (5, 10)
    assert data["policies"][0]["rejected"] == 0
    assert data["policies"][0]["clients"] == 6


def test_recommend_surveys_each_named_client_apart(tmp_path: Path) -> None:
    log, _ = _write(tmp_path)
    out = tmp_path / "rec.json"
    res = subprocess.run([*CLI, "recommend", "--log", str(log), "--json", str(out)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("5 clients (10 lines) are not IP addresses") == 1, res.stderr
    data = json.loads(out.read_text())
    (lim,) = data["limits"]
    assert lim["keys"] == 6, lim
