"""Who is the client? Request views and key functions, shared by every adapter. No I/O.

Rules of this module:

- **Forwarding headers are trusted only from trusted proxies.** ``X-Forwarded-For`` (or
  ``Forwarded``, RFC 7239: pick one, see `ClientIP`) is read only when the TCP peer is in
  `trusted_proxies`. The chain is walked from the right (the entry the nearest proxy
  appended) and the walk stops at the first address that is not a trusted proxy: that is the
  client. Everything to its left was written by the client and is ignored.
- **Garbage never widens a limit.** A malformed, empty, ``unknown`` or obfuscated entry
  stops the walk *at the last trusted hop*, so the request is keyed by that proxy's address
  (a key shared with the proxy's other clients: narrower, never wider). Headers longer than
  `max_header_length` are read from their right end only (the left end is the part a client
  controls); chains longer than `max_hops` stop at the last trusted hop examined.
- **IPv6 clients are grouped by prefix** (default /64, the smallest block an ISP hands to a
  subscriber), so one host cannot rotate through 2**64 addresses to get fresh quota.
  IPv4-mapped IPv6 addresses (``::ffff:192.0.2.1``) count as IPv4.
- **Keys are bounded, by the core's rule.** A key function's result is passed through
  `safe_key`: what the core's `check_key` would refuse (empty, too long, non-printable) is
  hashed into a key it accepts, never rejected with an exception.

Key functions take a `RequestInfo` and return a key string, or ``None`` to say "I cannot
identify this request"; the policy then falls back to the client-IP key.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from .. import core
from .._errors import InvalidKey
from ..core import check_key

__all__ = [
    "APIKey",
    "ClientIP",
    "IPAddress",
    "KeyFunc",
    "RequestInfo",
    "User",
    "safe_key",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Longest key passed to the store verbatim; longer ones are hashed (the core's bound).
MAX_KEY_LENGTH = core.MAX_KEY_LENGTH


class RequestInfo:
    """A framework-neutral view of one request, built by the ASGI, WSGI or Django adapter.

    - `method`: upper-case HTTP method (``"WEBSOCKET"`` for a websocket handshake in ASGI).
    - `path`: the decoded request path, without the query string.
    - `headers`: lower-case name -> value; repeated fields joined with ``", "`` in order.
    - `peer`: the TCP peer's address as the server reported it (``None`` for a Unix socket).
    - `native`: the framework's own object (ASGI scope, WSGI environ, Django ``HttpRequest``,
      Starlette ``Request``), for key functions that need more.
    - `client_ip`: the client's address after trusted-proxy processing (set by the policy
      before any key function runs; ``None`` when unknown).
    """

    __slots__ = ("client_ip", "headers", "method", "native", "path", "peer")

    def __init__(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        peer: str | None,
        native: Any = None,
    ) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.peer = peer
        self.native = native
        self.client_ip: IPAddress | None = None

    def __repr__(self) -> str:
        return f"RequestInfo({self.method} {self.path!r}, peer={self.peer!r})"

    @classmethod
    def from_asgi(cls, scope: Mapping[str, Any]) -> RequestInfo:
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope.get("headers") or ():
            name = bytes(raw_name).decode("latin-1").lower()
            value = bytes(raw_value).decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        client = scope.get("client")
        peer = str(client[0]) if client else None
        method = str(scope.get("method", "GET"))
        if scope.get("type") == "websocket":
            method = "WEBSOCKET"
        return cls(method.upper(), str(scope.get("path", "/")), headers, peer, scope)

    @classmethod
    def from_wsgi(cls, environ: Mapping[str, Any]) -> RequestInfo:
        headers: dict[str, str] = {}
        for name, value in environ.items():
            if name.startswith("HTTP_"):
                headers[name[5:].replace("_", "-").lower()] = str(value)
        for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            if environ.get(name):
                headers[name.replace("_", "-").lower()] = str(environ[name])
        peer = environ.get("REMOTE_ADDR") or None
        return cls(
            str(environ.get("REQUEST_METHOD", "GET")).upper(),
            str(environ.get("PATH_INFO", "")) or "/",
            headers,
            str(peer) if peer else None,
            environ,
        )


#: A key function: a request in, a key (or None: "fall back to the client IP") out.
KeyFunc = Callable[[RequestInfo], "str | None"]


def safe_key(key: str, max_length: int = MAX_KEY_LENGTH) -> str:
    """`key` unchanged if the core accepts it (`ratekeeper.core.check_key`: a non-empty,
    printable string of at most `max_length` characters), else ``"h:" + sha256`` of it,
    which it accepts. Never raises: a client's odd key is hashed, not refused."""
    try:
        return check_key(key, max_length)
    except InvalidKey:
        return "h:" + hashlib.sha256(str(key).encode("utf-8", "surrogatepass")).hexdigest()


def _parse_ip(text: str) -> IPAddress | None:
    """An address from one forwarding-chain entry, or None if it is not one.

    Accepts ``192.0.2.1``, ``192.0.2.1:8080``, ``2001:db8::1``, ``[2001:db8::1]``,
    ``[2001:db8::1]:443`` and a quoted form of each; zone ids are dropped.
    """
    # Every request parses its peer's address, and clients come back: remembered per text
    # (bounded), which also gives `ClientIP.key_of` the same object to remember its key by.
    try:
        return _IPS[text]
    except KeyError:
        pass
    addr = _parse_ip_text(text)
    if len(_IPS) >= _IPS_SIZE:
        _IPS.clear()
    _IPS[text] = addr
    return addr


_IPS: dict[str, IPAddress | None] = {}
_IPS_SIZE = 8192


def _parse_ip_text(text: str) -> IPAddress | None:
    s = text.strip()
    if len(s) >= 2 and s[0] == '"' and s[-1] == '"':
        s = s[1:-1]
    if not s or len(s) > 64:
        return None
    if s.startswith("["):
        end = s.find("]")
        if end < 0 or (end + 1 < len(s) and not _is_port(s[end + 1 :])):
            return None
        s = s[1:end]
    elif s.count(":") == 1:  # IPv4 with a port
        s, port = s.split(":")
        if not _is_port(":" + port):
            return None
    s = s.split("%", 1)[0]  # zone id (fe80::1%eth0)
    try:
        addr = ipaddress.ip_address(s)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _is_port(s: str) -> bool:
    return len(s) >= 2 and s[0] == ":" and len(s) <= 6 and s[1:].isdigit() and s[1:].isascii()


def _forwarded_for(element: str) -> str:
    """The ``for=`` value of one RFC 7239 element ("" when there is none).

    Elements are split on every comma and pairs on every semicolon, quoted or not: values a
    proxy writes (addresses, ``_obfuscated`` names, ``unknown``) contain neither, so a quoted
    comma can only come from the client's part of the header. Splitting there leaves a
    half-quoted value, which `_parse_ip` rejects; and an unterminated quote on the left
    cannot swallow the proxies' entries on the right.
    """
    for pair in element.split(";"):
        name, sep, value = pair.partition("=")
        if sep and name.strip().lower() == "for":
            return value.strip()
    return ""


class ClientIP:
    """The client's IP address as a key: ``ip:192.0.2.7`` or ``ip:2001:db8:1:2::/64``.

    - `trusted_proxies`: CIDRs (``"10.0.0.0/8"``, ``"::1"``) whose forwarding header is
      believed; ``"unix"`` also trusts a peer with no address (a Unix socket). Empty (the
      default): no header is believed, the TCP peer is the client.
    - `header`: ``"x-forwarded-for"`` (default) or ``"forwarded"`` (RFC 7239). Exactly one
      is read: a proxy that appends to one passes a client's forged copy of the other through
      untouched, so reading both would let clients choose their own key.
    - `ipv6_prefix` (default 64) / `ipv4_prefix` (default 32): addresses are grouped into
      networks of this size.
    - `max_hops` (default 16) and `max_header_length` (default 4096 characters) bound the
      work per request; see the module docstring for what happens past them.
    """

    __slots__ = (
        "_keys",
        "_trust_unix",
        "_trusted",
        "header",
        "ipv4_prefix",
        "ipv6_prefix",
        "max_header_length",
        "max_hops",
    )

    def __init__(
        self,
        trusted_proxies: Iterable[str | IPNetwork] = (),
        *,
        header: Literal["x-forwarded-for", "forwarded"] = "x-forwarded-for",
        ipv6_prefix: int = 64,
        ipv4_prefix: int = 32,
        max_hops: int = 16,
        max_header_length: int = 4096,
    ) -> None:
        if isinstance(trusted_proxies, (str, bytes)):
            raise TypeError(
                f"trusted_proxies must be a list of CIDRs, got the string {trusted_proxies!r}; "
                f"write [{trusted_proxies!r}]"
            )
        nets: list[IPNetwork] = []
        trust_unix = False
        for p in trusted_proxies:
            if p == "unix":
                trust_unix = True
                continue
            try:
                nets.append(ipaddress.ip_network(p, strict=False))
            except (ValueError, TypeError):
                raise ValueError(
                    f"trusted proxy {p!r} is not an IP address or CIDR (e.g. '10.0.0.0/8', "
                    "'2001:db8::/32') nor 'unix'"
                ) from None
        h = header.lower()
        if h not in ("x-forwarded-for", "forwarded"):
            raise ValueError(f"header must be 'x-forwarded-for' or 'forwarded', got {header!r}")
        if not (0 <= ipv6_prefix <= 128) or isinstance(ipv6_prefix, bool):
            raise ValueError(f"ipv6_prefix must be 0..128, got {ipv6_prefix!r}")
        if not (0 <= ipv4_prefix <= 32) or isinstance(ipv4_prefix, bool):
            raise ValueError(f"ipv4_prefix must be 0..32, got {ipv4_prefix!r}")
        if max_hops < 1 or max_header_length < 64:
            raise ValueError(
                f"max_hops must be >= 1 and max_header_length >= 64, got {max_hops!r}, "
                f"{max_header_length!r}"
            )
        self._trusted: tuple[IPNetwork, ...] = tuple(nets)
        self._trust_unix = trust_unix
        self.header = h
        self.ipv6_prefix = ipv6_prefix
        self.ipv4_prefix = ipv4_prefix
        self.max_hops = max_hops
        self.max_header_length = max_header_length
        # id(address) -> (address, key): `_parse_ip` hands out one object per address text
        self._keys: dict[int, tuple[IPAddress, str]] = {}

    def __repr__(self) -> str:
        trusted = [str(n) for n in self._trusted] + (["unix"] if self._trust_unix else [])
        return (
            f"ClientIP(trusted_proxies={trusted}, header={self.header!r}, "
            f"ipv6_prefix={self.ipv6_prefix}, ipv4_prefix={self.ipv4_prefix})"
        )

    def is_trusted(self, addr: IPAddress) -> bool:
        return bool(self._trusted) and any(addr in net for net in self._trusted)

    def _chain(self, value: str) -> list[str]:
        """The entries of the forwarding header, left to right, read from its right end."""
        truncated = len(value) > self.max_header_length
        if truncated:
            value = value[-self.max_header_length :]
        parts = value.split(",")
        if truncated:
            parts = parts[1:]  # the first piece may be cut in half
        if self.header == "forwarded":
            return [_forwarded_for(p) for p in parts]
        return parts

    def resolve(self, request: RequestInfo) -> IPAddress | None:
        """The client's address (None when unknown), walking trusted proxies from the right."""
        addr = _parse_ip(request.peer) if request.peer else None
        if addr is None:
            if request.peer is not None or not self._trust_unix:
                return None  # no peer address: nothing to go on
        elif not self.is_trusted(addr):
            return addr
        value = request.headers.get(self.header)
        if not value:
            return addr
        for hops, entry in enumerate(reversed(self._chain(value))):
            if hops >= self.max_hops:
                return addr
            ip = _parse_ip(entry)
            if ip is None:
                return addr  # garbage: stop at the last trusted hop
            addr = ip
            if not self.is_trusted(ip):
                return ip
        return addr

    def key_of(self, addr: IPAddress | None) -> str:
        """The key for an address: its network of the configured size."""
        if addr is None:
            return "ip:unknown"
        known = self._keys.get(id(addr))
        if known is not None and known[0] is addr:
            return known[1]
        prefix = self.ipv4_prefix if addr.version == 4 else self.ipv6_prefix
        if prefix == addr.max_prefixlen:
            key = f"ip:{addr}"
        else:
            key = f"ip:{ipaddress.ip_network((addr, prefix), strict=False)}"
        if len(self._keys) >= _IPS_SIZE:
            self._keys.clear()
        self._keys[id(addr)] = (addr, key)
        return key

    def __call__(self, request: RequestInfo) -> str:
        return self.key_of(self.resolve(request))


class APIKey:
    """Key requests by an API-key header: ``apikey:<sha256 prefix>`` (the raw secret never
    reaches the store). Returns None (fall back to the client IP) when the header is absent,
    empty, longer than `max_length`, or rejected by `valid`.

    Anyone can invent API keys, so an unvalidated API-key key gives a fresh quota per invented
    value: pass `valid` (e.g. a set's ``__contains__``) or add a per-IP limit as well.
    `key_for(secret)` gives the key of a secret, for `HTTPPolicy.exempt_keys`.
    """

    __slots__ = ("header", "max_length", "scheme", "valid")

    def __init__(
        self,
        header: str = "x-api-key",
        *,
        valid: Callable[[str], bool] | None = None,
        scheme: str | None = None,
        max_length: int = 1024,
    ) -> None:
        self.header = header.lower()
        self.valid = valid
        self.scheme = scheme.lower() if scheme else None
        self.max_length = max_length

    def __repr__(self) -> str:
        return f"APIKey(header={self.header!r}, validated={self.valid is not None})"

    @staticmethod
    def key_for(secret: str) -> str:
        digest = hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()
        return "apikey:" + digest[:32]

    def __call__(self, request: RequestInfo) -> str | None:
        value = request.headers.get(self.header, "").strip()
        if self.scheme is not None:  # e.g. scheme="bearer" for "Authorization: Bearer xyz"
            kind, _, rest = value.partition(" ")
            if kind.lower() != self.scheme:
                return None
            value = rest.strip()
        if not value or len(value) > self.max_length:
            return None
        if self.valid is not None:
            try:
                if not self.valid(value):
                    return None
            except Exception:
                return None
        return self.key_for(value)


class User:
    """Key requests by the authenticated user: ``user:<id>``, where `get_id(request)` returns
    the user's id (or None for anonymous requests, which fall back to the client IP).

    For Django: ``User(lambda r: r.native.user.pk if r.native.user.is_authenticated else
    None)`` with the middleware placed after ``AuthenticationMiddleware``; for Starlette:
    ``User(lambda r: r.native["user"].identity ...)`` after ``AuthenticationMiddleware``.
    """

    __slots__ = ("get_id",)

    def __init__(self, get_id: Callable[[RequestInfo], object]) -> None:
        self.get_id = get_id

    def __repr__(self) -> str:
        return f"User({self.get_id!r})"

    def __call__(self, request: RequestInfo) -> str | None:
        uid = self.get_id(request)
        if uid is None or uid == "":
            return None
        return f"user:{uid}"


REQUEST_MEMBERS = ("method", "path", "headers", "client")


def request_from_json(obj: Mapping[str, object], where: str = "the request") -> RequestInfo:
    """A request described as JSON, as the service's ``/v1/http`` and replay traces give it:
    ``{"method": "GET", "path": "/api/items", "headers": {"x-user": "alice"},
    "client": "203.0.113.7"}`` (``client``: the TCP peer's address; forwarding headers are
    believed only from trusted proxies). Other members are not read here (a trace's
    ``t``). Raises `ValueError` saying what is wrong."""
    method = obj.get("method", "GET")
    if not isinstance(method, str) or not method.isalpha() or len(method) > 20:
        raise ValueError(f"{where}: method must be an HTTP method such as \"GET\", "
                         f"got {method!r:.40}")
    path = obj.get("path")
    if not isinstance(path, str) or not path.startswith("/") or len(path) > 8192 \
            or not _is_text(path):
        raise ValueError(f"{where}: path must be a request path starting with '/' (text, at "
                         f"most 8192 characters), got {path!r:.60}")
    raw = obj.get("headers", {})
    if not isinstance(raw, Mapping) or len(raw) > 100 or not all(
            isinstance(k, str) and isinstance(v, str) and _is_text(k) and _is_text(v)
            for k, v in raw.items()):
        raise ValueError(f"{where}: headers must be an object of at most 100 text strings, "
                         'e.g. {"x-user": "alice"}')
    headers: dict[str, str] = {}
    for k, v in raw.items():
        name = k.lower()
        headers[name] = f"{headers[name]}, {v}" if name in headers else v
    client = obj.get("client")
    if client is not None and not (isinstance(client, str) and 0 < len(client) <= 64
                                   and _parse_ip_text(client) is not None):
        raise ValueError(f"{where}: client must be an IP address (the TCP peer's, e.g. "
                         f"\"203.0.113.7\" or \"2001:db8::1\"), got {client!r:.60}")
    return RequestInfo(method.upper(), path.split("?", 1)[0], headers, client)


def _is_text(s: str) -> bool:
    """Valid Unicode (no lone surrogate, which a JSON escape can produce)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
