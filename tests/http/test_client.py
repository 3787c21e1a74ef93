"""Client identification: trusted proxies, chain walking, IPv6 grouping, key functions.

The security property: a forwarding header changes the key only when the TCP peer is a
trusted proxy, and then only up to the first untrusted hop from the right. Garbage never
crashes and never yields a key the client could vary at will (that would widen its limit).
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper import InvalidKey
from ratekeeper.core import check_key
from ratekeeper.http import APIKey, ClientIP, RequestInfo, User, safe_key

PROXIES = ["10.0.0.0/8", "2001:db8:ffff::/48"]


def req(peer: str | None, **headers: str) -> RequestInfo:
    return RequestInfo("GET", "/", {k.replace("_", "-"): v for k, v in headers.items()}, peer)


# (peer, X-Forwarded-For, expected key) with trusted proxies 10/8 and 2001:db8:ffff::/48
XFF_CASES = [
    ("203.0.113.7", None, "ip:203.0.113.7"),
    # Untrusted peer: its own header is ignored, whatever it says.
    ("203.0.113.7", "198.51.100.1", "ip:203.0.113.7"),
    ("203.0.113.7", "10.0.0.1", "ip:203.0.113.7"),
    # Trusted proxy: the rightmost untrusted entry is the client.
    ("10.0.0.2", "198.51.100.1", "ip:198.51.100.1"),
    ("10.0.0.2", "1.1.1.1, 198.51.100.1", "ip:198.51.100.1"),  # forged left part ignored
    ("10.0.0.2", "1.1.1.1, 198.51.100.1, 10.1.1.1", "ip:198.51.100.1"),  # two proxies
    ("10.0.0.2", "10.9.9.9, 10.1.1.1", "ip:10.9.9.9"),  # all trusted: leftmost
    # Garbage stops at the last trusted hop (narrower, never wider).
    ("10.0.0.2", "garbage", "ip:10.0.0.2"),
    ("10.0.0.2", "1.1.1.1, garbage, 10.1.1.1", "ip:10.1.1.1"),
    ("10.0.0.2", "unknown", "ip:10.0.0.2"),
    ("10.0.0.2", "", "ip:10.0.0.2"),
    ("10.0.0.2", " , ", "ip:10.0.0.2"),
    ("10.0.0.2", "1.2.3.4.5", "ip:10.0.0.2"),
    ("10.0.0.2", "01.2.3.4", "ip:10.0.0.2"),
    ("10.0.0.2", "١.٢.٣.٤", "ip:10.0.0.2"),  # non-ASCII digits are not an address
    # Ports and brackets.
    ("10.0.0.2", "198.51.100.1:5555", "ip:198.51.100.1"),
    ("10.0.0.2", "[2001:db8:1:2::99]:443", "ip:2001:db8:1:2::/64"),
    ("10.0.0.2", "[2001:db8:1:2::99", "ip:10.0.0.2"),
    ("10.0.0.2", "198.51.100.1:99999999", "ip:10.0.0.2"),
    # IPv6: grouped by /64; mapped IPv4 is IPv4; zone ids dropped.
    ("2001:db8:1:2::1", None, "ip:2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff:ffff:ffff:ffff", None, "ip:2001:db8:1:2::/64"),
    ("::ffff:203.0.113.7", None, "ip:203.0.113.7"),
    ("10.0.0.2", "::ffff:198.51.100.1", "ip:198.51.100.1"),
    ("10.0.0.2", "fe80::1%eth0", "ip:fe80::/64"),
    ("2001:db8:ffff::5", "2001:db8:2:3::4", "ip:2001:db8:2:3::/64"),
    # Unknown peer.
    (None, "198.51.100.1", "ip:unknown"),
    ("not-an-ip", "198.51.100.1", "ip:unknown"),
]


@pytest.mark.parametrize(("peer", "xff", "key"), XFF_CASES)
def test_x_forwarded_for(peer: str | None, xff: str | None, key: str) -> None:
    ip = ClientIP(PROXIES)
    headers = {} if xff is None else {"x_forwarded_for": xff}
    assert ip(req(peer, **headers)) == key


FORWARDED_CASES = [
    ("203.0.113.7", "for=198.51.100.1", "ip:203.0.113.7"),
    ("10.0.0.2", "for=198.51.100.1", "ip:198.51.100.1"),
    ("10.0.0.2", 'for=1.1.1.1, for="198.51.100.1:80";proto=https', "ip:198.51.100.1"),
    ("10.0.0.2", 'for="[2001:db8:cafe::17]:4711"', "ip:2001:db8:cafe::/64"),
    ("10.0.0.2", "For=198.51.100.1;by=10.0.0.2, for=10.3.3.3", "ip:198.51.100.1"),
    ("10.0.0.2", "for=_hidden", "ip:10.0.0.2"),
    ("10.0.0.2", "for=unknown", "ip:10.0.0.2"),
    ("10.0.0.2", "proto=https", "ip:10.0.0.2"),
    ("10.0.0.2", 'for="1.1.1.1, for=2.2.2.2"', "ip:10.0.0.2"),
    ("10.0.0.2", '", for=198.51.100.1', "ip:198.51.100.1"),  # a forged open quote
    ("10.0.0.2", 'for="198.51.100.1', "ip:10.0.0.2"),
]


@pytest.mark.parametrize(("peer", "fwd", "key"), FORWARDED_CASES)
def test_forwarded(peer: str, fwd: str, key: str) -> None:
    ip = ClientIP(PROXIES, header="forwarded")
    assert ip(req(peer, forwarded=fwd)) == key


def test_only_the_configured_header_is_read() -> None:
    # A proxy that appends to X-Forwarded-For passes a forged Forwarded through untouched.
    r = req("10.0.0.2", x_forwarded_for="198.51.100.1", forwarded="for=6.6.6.6")
    assert ClientIP(PROXIES)(r) == "ip:198.51.100.1"
    assert ClientIP(PROXIES, header="forwarded")(r) == "ip:6.6.6.6"
    r = req("10.0.0.2", forwarded="for=6.6.6.6")
    assert ClientIP(PROXIES)(r) == "ip:10.0.0.2"


def test_no_trusted_proxies_by_default() -> None:
    assert ClientIP()(req("10.0.0.2", x_forwarded_for="198.51.100.1")) == "ip:10.0.0.2"


def test_unix_socket_peer() -> None:
    r = req(None, x_forwarded_for="198.51.100.1")
    assert ClientIP(["unix"])(r) == "ip:198.51.100.1"
    assert ClientIP(["10.0.0.0/8"])(r) == "ip:unknown"


def test_prefixes() -> None:
    assert ClientIP(ipv6_prefix=48)(req("2001:db8:1:2::1")) == "ip:2001:db8:1::/48"
    assert ClientIP(ipv6_prefix=128)(req("2001:db8:1:2::1")) == "ip:2001:db8:1:2::1"
    assert ClientIP(ipv4_prefix=24)(req("203.0.113.7")) == "ip:203.0.113.0/24"


def test_huge_header_read_from_the_right() -> None:
    forged = ", ".join(f"1.1.{i % 256}.{i // 256}" for i in range(20000))
    r = req("10.0.0.2", x_forwarded_for=forged + ", 198.51.100.1, 10.1.1.1")
    assert ClientIP(PROXIES)(r) == "ip:198.51.100.1"
    # The cut can fall inside an address: the partial first piece is discarded.
    r = req("10.0.0.2", x_forwarded_for="x" * 100_000 + ",198.51.100.1")
    assert ClientIP(PROXIES, max_header_length=64)(r) == "ip:198.51.100.1"


def test_many_trusted_hops_stop_at_max_hops() -> None:
    chain = ", ".join(["198.51.100.1"] + [f"10.0.0.{i}" for i in range(1, 40)])
    r = req("10.0.0.2", x_forwarded_for=chain)
    # 16 trusted hops examined, then stop at the last trusted one: a proxy address.
    key = ClientIP(PROXIES, max_hops=16)(r)
    assert key.startswith("ip:10.0.0.")
    assert ClientIP(PROXIES, max_hops=64)(r) == "ip:198.51.100.1"


@pytest.mark.parametrize(
    "bad",
    [["10.0.0.0/33"], ["not-a-net"], ["10.0.0.1/8/9"]],
)
def test_invalid_trusted_proxy(bad: list[str]) -> None:
    with pytest.raises(ValueError, match="trusted proxy"):
        ClientIP(bad)


def test_config_errors() -> None:
    with pytest.raises(TypeError, match="list of CIDRs"):
        ClientIP("10.0.0.0/8")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="header"):
        ClientIP(header="x-real-ip")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ipv6_prefix"):
        ClientIP(ipv6_prefix=129)


def test_api_key() -> None:
    k = APIKey()
    assert k(req("1.2.3.4", x_api_key="s3cret")) == APIKey.key_for("s3cret")
    assert "s3cret" not in APIKey.key_for("s3cret")
    assert k(req("1.2.3.4")) is None
    assert k(req("1.2.3.4", x_api_key="  ")) is None
    assert k(req("1.2.3.4", x_api_key="x" * 5000)) is None
    valid = APIKey(valid={"good"}.__contains__)
    assert valid(req("1.2.3.4", x_api_key="good")) == APIKey.key_for("good")
    assert valid(req("1.2.3.4", x_api_key="invented")) is None
    bearer = APIKey("authorization", scheme="Bearer")
    assert bearer(req("1.2.3.4", authorization="Bearer tok")) == APIKey.key_for("tok")
    assert bearer(req("1.2.3.4", authorization="Basic tok")) is None


def test_api_key_validator_errors_mean_invalid() -> None:
    def boom(value: str) -> bool:
        raise RuntimeError("db down")

    assert APIKey(valid=boom)(req("1.2.3.4", x_api_key="k")) is None


def test_user() -> None:
    u = User(lambda r: r.headers.get("x-user"))
    assert u(req("1.2.3.4", x_user="42")) == "user:42"
    assert u(req("1.2.3.4")) is None


def test_safe_key() -> None:
    assert safe_key("user:42") == "user:42"
    assert safe_key("x" * 1000).startswith("h:")
    assert safe_key("a\nb").startswith("h:")
    assert safe_key("") .startswith("h:")
    assert safe_key("\udcff").startswith("h:")


def _core_accepts(key: str) -> bool:
    try:
        check_key(key)
    except InvalidKey:
        return False
    return True


@settings(max_examples=300)
@given(st.one_of(
    st.text(max_size=40),
    st.builds(lambda n, c: c * n, st.integers(0, 700), st.sampled_from(["k", "é", "\n", " "])),
))
def test_safe_key_passes_exactly_the_keys_the_core_accepts_and_hashes_the_rest(key: str) -> None:
    # One rule for a valid key (the core's check_key): the HTTP layer keeps every key the
    # core would store and hashes every other into one it does store, never raising.
    out = safe_key(key)
    assert _core_accepts(out)
    assert (out == key) == _core_accepts(key)


def test_request_info_from_asgi_joins_repeated_headers() -> None:
    scope = {
        "type": "http", "method": "get", "path": "/x", "client": ("10.0.0.2", 1),
        "headers": [(b"X-Forwarded-For", b"1.1.1.1"), (b"x-forwarded-for", b"198.51.100.1")],
    }
    r = RequestInfo.from_asgi(scope)
    assert (r.method, r.path, r.peer) == ("GET", "/x", "10.0.0.2")
    assert r.headers["x-forwarded-for"] == "1.1.1.1, 198.51.100.1"
    assert ClientIP(PROXIES)(r) == "ip:198.51.100.1"
    assert RequestInfo.from_asgi({"type": "websocket", "path": "/ws"}).method == "WEBSOCKET"


def test_request_info_from_wsgi() -> None:
    env = {"REQUEST_METHOD": "POST", "PATH_INFO": "", "REMOTE_ADDR": "",
           "HTTP_X_API_KEY": "k", "CONTENT_TYPE": "text/plain"}
    r = RequestInfo.from_wsgi(env)
    assert (r.method, r.path, r.peer) == ("POST", "/", None)
    assert r.headers == {"x-api-key": "k", "content-type": "text/plain"}


# -- property tests: garbage never crashes, never widens ------------------------------------

latin1 = st.text(st.characters(min_codepoint=0, max_codepoint=255), max_size=300)
ips = st.ip_addresses()


@st.composite
def ip_forms(draw: st.DrawFn) -> str:
    """An address written the ways proxies (and attackers) write them."""
    addr = draw(ips)
    s = str(addr)
    form = draw(st.sampled_from(["plain", "port", "bracket", "quoted", "zone", "mapped"]))
    if addr.version == 4:
        return {
            "port": f"{s}:{draw(st.integers(0, 70000))}",
            "quoted": f'"{s}"',
            "mapped": f"::ffff:{s}",
        }.get(form, s)
    return {
        "port": f"[{s}]:{draw(st.integers(0, 70000))}",
        "bracket": f"[{s}]",
        "quoted": f'"[{s}]"',
        "zone": f"{s}%eth{draw(st.integers(0, 9))}",
    }.get(form, s)


entry = st.one_of(latin1, ip_forms(), st.sampled_from(["unknown", "_hidden", "", " ", ";", '"']))
chain = st.lists(entry, max_size=40).map(", ".join)
header_values = st.one_of(latin1, chain, st.text(max_size=200))


@settings(max_examples=300, deadline=None)
@given(xff=header_values, fwd=header_values, peer=st.one_of(ips.map(str), latin1))
def test_untrusted_peer_key_ignores_headers(xff: str, fwd: str, peer: str) -> None:
    ip = ClientIP(PROXIES)
    base = ip(req(peer))
    if peer.strip() and ip.resolve(req(peer)) is not None and ip.is_trusted(
        ip.resolve(req(peer))  # type: ignore[arg-type]
    ):
        return  # a trusted peer: covered below
    assert ip(req(peer, x_forwarded_for=xff, forwarded=fwd)) == base
    assert ClientIP(PROXIES, header="forwarded")(req(peer, x_forwarded_for=xff,
                                                     forwarded=fwd)) == base


@settings(max_examples=300, deadline=None)
@given(forged=header_values, client=ips, hops=st.integers(0, 5))
def test_forged_prefix_never_changes_the_key_behind_trusted_proxies(
    forged: str, client: ipaddress.IPv4Address | ipaddress.IPv6Address, hops: int
) -> None:
    """Whatever the client put in front, the proxies' appended entries decide."""
    ip = ClientIP(PROXIES)
    if ip.is_trusted(client if client.version == 4 or client.ipv4_mapped is None
                     else client.ipv4_mapped):
        return
    tail = [str(client)] + [f"10.0.{i}.1" for i in range(hops)]
    r = req("10.0.0.2", x_forwarded_for=", ".join([forged, *tail]))
    assert ip(r) == ip.key_of(ip.resolve(req(str(client))))
    fwd = ", ".join([forged, *(f'for="[{a}]"' if ":" in a else f"for={a}" for a in tail)])
    ipf = ClientIP(PROXIES, header="forwarded")
    assert ipf(req("10.0.0.2", forwarded=fwd)) == ip.key_of(ip.resolve(req(str(client))))


@settings(max_examples=300, deadline=None)
@given(xff=header_values, fwd=header_values)
def test_trusted_peer_garbage_keys_are_bounded(xff: str, fwd: str) -> None:
    """From a trusted proxy, the key is the proxy or an address that is in the header."""
    for header in ("x-forwarded-for", "forwarded"):
        ip = ClientIP(PROXIES, header=header)  # type: ignore[arg-type]
        r = req("10.0.0.2", x_forwarded_for=xff, forwarded=fwd)
        key = ip(r)
        assert key.startswith("ip:") and key.isprintable() and len(key) < 64
        addr = ip.resolve(r)
        assert addr is not None
        assert str(addr) == "10.0.0.2" or ip.is_trusted(addr) or str(addr) in _normalised(
            xff if header == "x-forwarded-for" else fwd
        )


def _normalised(value: str) -> str:
    """Every address written in `value`, in canonical form (for membership checks)."""
    out = []
    for piece in value.replace(";", ",").replace("=", ",").split(","):
        s = piece.strip().strip('"').strip("[]")
        for cand in (s, s.rsplit(":", 1)[0].strip("[]"), s.split("]")[0].strip("["),
                     s.split("%")[0]):
            try:
                a = ipaddress.ip_address(cand.split("%")[0])
            except ValueError:
                continue
            out.append(str(a))
            if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
                out.append(str(a.ipv4_mapped))
    return " ".join(out)
