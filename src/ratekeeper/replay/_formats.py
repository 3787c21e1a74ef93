"""Line formats: one text line -> one `LogEvent`, with no I/O.

Each format has ``parse(line, lineno) -> LogEvent | None``: `None` for a line that is well
formed but not a request (blank, comment), `BadLine` for one that cannot be read (its
``reason`` is a short category for the tally, its ``why`` the message; ``skip=True`` marks a
well-formed non-request such as nginx's ``"-"`` request line).

- `LogFormat`: an nginx ``log_format`` string, compiled into one regular expression.
  `COMBINED` and `COMMON` are the nginx/Apache formats of those names, written as nginx
  formats (so one mechanism reads all three); they also accept Apache's ``\\"`` escapes and
  ``-`` for zero bytes, and ignore extra fields after the standard ones.
- `JsonFormat`: JSON Lines with configurable field names (dotted for nested objects).
- `TraceFormat`: the ``{"t": ..., "key": ..., "cost": ...}`` traces of ``ratekeeper
  simulate`` (examples/traces/), read by the simulator's rules.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Protocol

from .._errors import ConfigError
from ._events import LogEvent
from ._time import StrftimeTime, TimeCache, epoch_seconds

__all__ = [
    "COMBINED",
    "COMMON",
    "MAX_JSON_DEPTH",
    "NGINX_COMBINED",
    "NGINX_COMMON",
    "BadLine",
    "JsonFormat",
    "LineFormat",
    "LogFormat",
    "TraceFormat",
    "apache_format",
    "unescape",
]


class BadLine(Exception):
    """A line that cannot become an event: `reason` (a category), `why` (for a person)."""

    def __init__(self, reason: str, why: str, *, skip: bool = False) -> None:
        super().__init__(why)
        self.reason = reason
        self.why = why
        self.skip = skip


class LineFormat(Protocol):
    """What a reader needs of a format."""

    name: str

    def parse(self, line: str, lineno: int) -> LogEvent | None: ...


# -- escapes ---------------------------------------------------------------------------------

_ESC = re.compile(rb"\\(x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|.)", re.S)
_SIMPLE = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b"b": b"\b", b"f": b"\f"}


def _esc(m: re.Match[bytes]) -> bytes:
    g = m[1]
    if len(g) == 3 and g[:1] == b"x":
        return bytes((int(g[1:], 16),))
    if len(g) == 5 and g[:1] == b"u":
        return chr(int(g[1:], 16)).encode("utf-8", "replace")
    return _SIMPLE.get(g, g)


def unescape(s: str) -> str:
    """Undo nginx's (``\\x22``, ``\\xC3\\xA9`` for UTF-8 bytes), nginx ``escape=json``
    (``\\"``, ``\\u0001``) and Apache's (``\\"``, ``\\\\``) escapes; bytes that are not UTF-8
    become U+FFFD."""
    if "\\" not in s:
        return s
    b = _ESC.sub(_esc, s.encode("utf-8", "surrogateescape"))
    return b.decode("utf-8", "replace")


_UNESCAPED: dict[str, str] = {}


def _unescape_cached(s: str) -> str:
    """`unescape`, remembered: the same escaped user agent comes back on many lines."""
    got = _UNESCAPED.get(s)
    if got is None:
        if len(_UNESCAPED) >= 4096:  # bounded, whatever the log
            _UNESCAPED.clear()
        got = _UNESCAPED[s] = unescape(s)
    return got


def _split_target(target: str) -> tuple[str, str | None]:
    """A request target -> (path without query or fragment, host of an absolute form)."""
    host = None
    if target[:1] != "/" and "://" in target:  # absolute form, as sent to a proxy
        rest = target.split("://", 1)[1]
        cut = rest.find("/")
        host, target = (rest, "/") if cut < 0 else (rest[:cut], rest[cut:])
    q = target.find("?")
    if q >= 0:
        target = target[:q]
    h = target.find("#")
    if h >= 0:
        target = target[:h]
    return target, host


def _request(req: str) -> tuple[str, str, str | None]:
    """``GET /a?x=1 HTTP/1.1`` -> (method, path, host of an absolute target)."""
    parts = req.split(" ")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        if req in ("-", ""):
            raise BadLine("no-request", "no request line (the client sent none)", skip=True)
        raise BadLine("request", "request line is not 'METHOD TARGET PROTOCOL'")
    method = parts[0]
    if not method.isascii() or not method.isprintable():
        raise BadLine("request", f"not an HTTP method: {method[:20]!r}")
    path, host = _split_target(parts[1])
    return method, path, host


def _opt(v: str | None) -> str | None:
    return None if v is None or v in {"-", ""} else v


# -- nginx log_format ------------------------------------------------------------------------

#: The built-in nginx variables (core, http modules shipped with Debian's nginx).
_NGINX_WORDS = """
args binary_remote_addr body_bytes_sent bytes_sent connection connection_requests
connection_time content_length content_type document_root document_uri host hostname https
is_args limit_rate msec nginx_version pid pipe proxy_protocol_addr proxy_protocol_port
proxy_protocol_server_addr proxy_protocol_server_port query_string realpath_root remote_addr
remote_port remote_user request request_body request_body_file request_completion
request_filename request_id request_length request_method request_time request_uri scheme
server_addr server_name server_port server_protocol status time_iso8601 time_local
tcpinfo_rtt tcpinfo_rttvar tcpinfo_snd_cwnd tcpinfo_rcv_space uri
upstream_addr upstream_bytes_received upstream_bytes_sent upstream_cache_status
upstream_connect_time upstream_header_time upstream_queue_time upstream_response_length
upstream_response_time upstream_status realip_remote_addr realip_remote_port gzip_ratio
limit_conn_status limit_req_status http2 http3 invalid_referer secure_link
secure_link_expires date_gmt date_local fastcgi_script_name fastcgi_path_info
geoip_country_code geoip_country_name geoip_city geoip_region geoip_org
"""
_NGINX_VARIABLES = frozenset(_NGINX_WORDS.split())
_NGINX_PREFIXES = ("http_", "sent_http_", "sent_trailer_", "cookie_", "arg_",
                   "upstream_http_", "upstream_cookie_", "upstream_trailer_", "ssl_",
                   "jwt_", "geoip2_")

#: Value patterns by variable, where the type is known (others: see `_pattern`).
_TIME_LOCAL = r"\d{1,2}/[A-Za-z]{3}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4}"
_TYPED = {
    "time_local": _TIME_LOCAL,
    "time_iso8601": r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?",
    "msec": r"\d+(?:\.\d+)?",
    "status": r"\d{3}|-",
    "body_bytes_sent": r"\d+|-", "bytes_sent": r"\d+|-", "request_length": r"\d+|-",
    "connection": r"\d+", "connection_requests": r"\d+", "pid": r"\d+",
    "request_time": r"\d+(?:\.\d+)?|-",
}
_QUOTED = r'[^"\\]*(?:\\.[^"\\]*)*'  # nginx writes " as \x22, Apache as \"
#: The same, for a line with no ``\"`` in it (every nginx line): a third faster.
_QUOTED_FAST = r'[^"]*'
_BRACKETED = r"[^\]]*"
_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")

#: nginx's predefined ``combined`` format (and ``common``, which Apache names so: the same
#: without the two headers).
NGINX_COMBINED = ('$remote_addr - $remote_user [$time_local] "$request" $status '
                  '$body_bytes_sent "$http_referer" "$http_user_agent"')
NGINX_COMMON = '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent'


def _known(var: str) -> bool:
    return var in _NGINX_VARIABLES or var.startswith(_NGINX_PREFIXES)


# -- Apache LogFormat ------------------------------------------------------------------------

#: Apache ``LogFormat`` directives -> the nginx variable that logs the same thing (``%t``
#: writes its own brackets; ``%D``, microseconds, and ``%l`` have no nginx twin and are
#: fields of their own).
_APACHE = {"h": "$remote_addr", "a": "$remote_addr", "l": "$remote_ident", "u": "$remote_user",
           "t": "[$time_local]", "r": "$request", "s": "$status", ">s": "$status",
           "b": "$body_bytes_sent", "B": "$body_bytes_sent", "O": "$bytes_sent",
           "D": "$request_time_us", "T": "$request_time", "m": "$request_method",
           "U": "$uri", "q": "$is_query", "H": "$server_protocol", "v": "$server_name",
           "V": "$server_name", "p": "$server_port", "P": "$pid", "%": "%"}
_APACHE_OWN = ("remote_ident", "request_time_us", "is_query")
#: Directives replay does not use but reads as fields of their own (``fields["apache_A"]``,
#: ``fields["apache_e_unique_id"]``), so a format that logs them can be named as it is:
#: plain ones (local address, bytes received, handler, connection status, keepalives, log
#: id, file, bytes transferred) and the ``%{NAME}`` forms of environment variables, notes,
#: SSL variables, cookies, ports and process ids.
_APACHE_OPAQUE = "AIRXkLfS"
_APACHE_OPAQUE_NAMED = "enxCpP"
_APACHE_DIRECTIVE = re.compile(r"%[<>]?(?:\{([^}]*)\})?([a-zA-Z%])")


def apache_format(spec: str) -> LogFormat:
    """An Apache ``LogFormat`` string (``%h %l %u %t "%r" %>s %b``, ``%{Referer}i``) -> the
    `LogFormat` that reads its lines. A time may be ``%t``, ``%{sec}t`` or a strftime
    format, ``%{%Y-%m-%d %H:%M:%S}t``, with its fraction ``.%{usec_frac}t`` (or
    ``msec_frac``) right after it (the netnea tutorial's ``[%{%Y-%m-%d %H:%M:%S}t.%{usec_frac}t]``;
    ``begin:``/``end:`` are read as the same time). A directive without an equivalent raises
    `ConfigError` naming it (and the nginx ``log_format`` way around it)."""
    out: list[str] = []
    opaque: list[str] = []
    pos = 0
    strftime: str | None = None
    for m in _APACHE_DIRECTIVE.finditer(spec):
        out.append(spec[pos:m.start()])
        arg, letter = m[1], m[2]
        body = m[0][1:]
        if arg is not None and letter in "io":
            name = arg.strip().lower().replace("-", "_")
            out.append(f"$http_{name}" if letter == "i" else f"$sent_http_{name}")
        elif arg is not None and letter == "t":
            strftime = _apache_time(spec, m, arg.removeprefix("begin:").removeprefix("end:"),
                                    out, strftime)
        elif arg is None and (body in _APACHE or letter in _APACHE):
            out.append(_APACHE.get(body, _APACHE[letter]))
        elif (arg is None and letter in _APACHE_OPAQUE) or (
                arg and letter in _APACHE_OPAQUE_NAMED):
            own = f"apache_{letter}" + ("" if arg is None else
                                        "_" + re.sub(r"\W", "_", arg.strip()).lower())
            opaque.append(own)
            out.append(f"${{{own}}}")
        else:
            raise ConfigError(
                f"Apache LogFormat directive {m[0]!r} in {spec!r} (at column {m.start() + 1}) "
                "is not one replay reads; the directives it reads are %h %a %l %u %t %r %s "
                "%>s %b %B %O %D %T %m %U %q %H %v %V %p %P, %{Header}i/%{Header}o, "
                f"{' '.join('%' + c for c in _APACHE_OPAQUE)} and %{{NAME}}e/n/x/C/p/P as "
                "fields, and times %{sec}t, %{strftime format}t with .%{usec_frac}t or "
                ".%{msec_frac}t; or give the format as an nginx log_format string "
                "($remote_addr ...)")
        pos = m.end()
    out.append(spec[pos:])
    return LogFormat("".join(out), name=f"Apache LogFormat {spec!r}",
                     extra_variables=(*_APACHE_OWN, *opaque), strftime=strftime)


def _apache_time(spec: str, m: re.Match[str], arg: str, out: list[str],
                 strftime: str | None) -> str | None:
    """One ``%{...}t`` of `spec`: its variable appended to `out` -> the strftime format of
    the line's time so far (a fraction is appended to the time just before it)."""
    if arg == "sec":
        out.append("$msec")
        return strftime
    if arg in ("usec_frac", "msec_frac"):
        if strftime is None or out[-1:] != ["."] or out[-2:-1] != ["$time_strftime"]:
            raise ConfigError(f"Apache LogFormat {spec!r}: {m[0]!r} (at column "
                              f"{m.start() + 1}) is read as the fraction of the time right "
                              "before it, as in %{%Y-%m-%d %H:%M:%S}t.%{usec_frac}t")
        out.pop()  # the "." goes into the time's own format
        return strftime + ".%f"
    if "%" not in arg:
        raise ConfigError(f"Apache LogFormat directive {m[0]!r} in {spec!r} (at column "
                          f"{m.start() + 1}): replay reads the times %t, %{{sec}}t and "
                          "%{strftime format}t (with .%{usec_frac}t or .%{msec_frac}t)")
    if strftime is not None and strftime != arg:
        raise ConfigError(f"Apache LogFormat {spec!r} writes two different times "
                          f"({strftime!r} and {arg!r}): replay reads one")
    out.append("$time_strftime")
    return arg


def _header_name(var: str) -> str:
    return var[5:].replace("_", "-").lower()


class LogFormat:
    """An nginx ``log_format`` string, compiled: reads the lines nginx writes with it.

    `spec` is the format as in nginx.conf (the quoted parts joined, without the name):
    ``'$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent
    "$http_referer" "$http_user_agent" "$http_x_forwarded_for" $request_time'``. Its variables
    become `LogEvent.fields` (named without ``$``) and:

    - the time from ``$msec`` (most precise), else ``$time_iso8601``, else ``$time_local``
      (at least one is required);
    - client from ``$remote_addr``; method and path from ``$request`` (or
      ``$request_method`` and ``$request_uri``/``$uri``); ``$status``; bytes from
      ``$body_bytes_sent`` (else ``$bytes_sent``); host from ``$host``/``$http_host``/
      ``$server_name``; every ``$http_<name>`` is a header (``user_agent``, ``referer`` too).

    A variable between double quotes may hold anything but a bare quote (nginx escapes it);
    one that is not may hold no space. A variable nginx does not define raises `ConfigError`
    naming it: a variable your configuration makes (``map``, ``set``) goes in
    `extra_variables`. `trailing=True` ignores whatever follows the format on a line
    (``fields["rest"]``), as `COMBINED` and `COMMON` do.
    """

    __slots__ = ("_bytes", "_client", "_fast", "_headers", "_host", "_lean", "_lean_fast",
                 "_lean_headers", "_lean_index", "_lean_quoted", "_match", "_method", "_path",
                 "_quoted", "_request", "_status", "_strftime", "_time", "_time_kind",
                 "_times", "name", "regex", "spec", "variables")

    def __init__(self, spec: str, *, name: str = "log_format",
                 extra_variables: Iterable[str] = (), trailing: bool = False,
                 strftime: str | None = None) -> None:
        if not isinstance(spec, str) or "$" not in spec:
            raise ConfigError(f"log_format {spec!r} has no $variables: give the format as in "
                              "nginx.conf, e.g. '$remote_addr [$time_local] \"$request\"'")
        extra = frozenset(v.lstrip("$") for v in extra_variables)
        # `strftime`: the format of ``$time_strftime``, an Apache ``%{...}t`` time
        try:
            self._strftime = None if strftime is None else StrftimeTime(strftime)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if self._strftime is not None:
            extra |= {"time_strftime"}
        self.spec, self.name = spec, name
        parts: list[str] = []
        names: list[str] = []
        quoted: list[str] = []
        pos = 0
        for m in _VAR.finditer(spec):
            var = m[1] or m[2]
            if not (_known(var) or var in extra):
                raise ConfigError(
                    f"unknown nginx variable ${var} in log_format {spec!r} (at column "
                    f"{m.start() + 1}): it is not one nginx defines; if your configuration "
                    f"makes it (map, set), name it: --variable {var} on the command line, "
                    f"extra_variables=[{var!r}] in Python")
            parts.append(re.escape(spec[pos:m.start()]))
            before, after = spec[m.start() - 1:m.start()], spec[m.end():m.end() + 1]
            if before == '"' and after == '"':
                pat = _QUOTED
            elif before == "[" and after == "]":
                pat = _BRACKETED  # the time is checked when it is parsed
            elif var == "time_strftime" and self._strftime is not None:
                pat = self._strftime.pattern
            elif var in _TYPED:
                pat = _TYPED[var]
            else:
                pat = r"\S*"
            if var in names:  # a variable written twice: the first one names the field
                parts.append(f"(?:{pat})")
            else:
                parts.append(f"(?P<{var}>{pat})")
                names.append(var)
                if pat is _QUOTED:
                    quoted.append(var)
            pos = m.end()
        parts.append(re.escape(spec[pos:]))
        tail = r"(?: (?P<rest>.*))?" if trailing else ""
        self.regex = re.compile("".join(parts) + tail + r"\r?")
        self._match = self.regex.fullmatch
        fast = re.compile(self.regex.pattern.replace(_QUOTED, _QUOTED_FAST))
        self._fast = fast.fullmatch
        self.variables: tuple[str, ...] = tuple(names)
        self._quoted = tuple(quoted)
        have = set(names)
        self._time_kind, self._time = next(
            ((k, v) for k, v in (("msec", "msec"), ("iso", "time_iso8601"),
                                 ("strftime", "time_strftime"), ("clf", "time_local"))
             if v in have), ("", ""))
        if not self._time:
            raise ConfigError(f"log_format {spec!r} has no time: replay decides on the log's "
                              "clock, so it needs $time_local, $time_iso8601 or $msec")
        if self._time == "time_strftime" and self._strftime is None:
            raise ConfigError(f"log_format {spec!r}: $time_strftime needs its format "
                              "(strftime='%Y-%m-%d %H:%M:%S')")

        def first(*cands: str) -> str | None:
            return next((c for c in cands if c in have), None)

        self._client = first("remote_addr")
        self._request = first("request")
        self._method = first("request_method")
        self._path = first("request_uri", "uri", "document_uri")
        self._status = first("status")
        self._bytes = first("body_bytes_sent", "bytes_sent")
        self._host = first("host", "http_host", "server_name")
        self._headers = tuple((v, _header_name(v)) for v in names if v.startswith("http_"))
        self._times = TimeCache()
        # The lean regexes: the same patterns, capturing only what an event is made of (the
        # rest of `fields` is read from the line if asked for, by `_LineFields`).
        needed = [v for v in names if v in {
            self._time, self._client, self._request, self._method, self._path, self._status,
            self._bytes, self._host} or v.startswith("http_")]
        at = {v: i for i, v in enumerate(needed)}
        # where the lean match's groups() has each part of an event (-1: the format has none)
        self._lean_index = tuple(-1 if v is None else at[v] for v in (
            self._time, self._client, self._request, self._method, self._path, self._status,
            self._bytes, self._host))
        self._lean_headers = tuple((at[v], h) for v, h in self._headers)
        self._lean_quoted = tuple(i for i, v in enumerate(needed) if v in quoted)

        def lean(rx: re.Pattern[str]) -> Callable[[str], re.Match[str] | None]:
            pattern = re.sub(r"\(\?P<(\w+)>", lambda g: "(" if g[1] in at
                             else "(?:", rx.pattern)
            return re.compile(pattern).fullmatch

        self._lean = lean(self.regex)
        self._lean_fast = lean(fast)

    def __repr__(self) -> str:
        return f"LogFormat({self.spec!r}, name={self.name!r})"

    def fields_of(self, line: str) -> dict[str, str]:
        """Every variable of `line` (a line `parse` read), unescaped: `LogEvent.fields`."""
        m = (self._fast if '\\"' not in line else self._match)(line)
        if m is None:
            raise BadLine("format", f"does not match the {self.name} format")
        d: dict[str, str] = m.groupdict()
        if "\\" in line:
            for k in self._quoted:
                v = d[k]
                if "\\" in v:
                    d[k] = unescape(v)
        if "rest" in d and d["rest"] is None:
            del d["rest"]
        return d

    def parse(self, line: str, lineno: int) -> LogEvent | None:
        # The hot path of a replay: one regex match capturing only what the event needs,
        # then tuple indexing and slicing; `fields` is read from the line when asked for.
        m = (self._lean_fast if '\\"' not in line else self._lean)(line)
        if m is None:
            if not line.strip():
                return None
            raise BadLine("format", f"does not match the {self.name} format")
        g: tuple[str, ...] | list[str] = m.groups()
        if "\\" in line:
            g = list(g)
            for i in self._lean_quoted:
                if "\\" in (v := g[i]):
                    g[i] = _unescape_cached(v)
        i_time, i_client, i_request, i_method, i_path, i_status, i_bytes, i_host = \
            self._lean_index
        ts = g[i_time]
        kind = self._time_kind
        try:
            if kind == "clf":
                t = self._times.clf(ts)
            elif kind == "msec":
                t = float(ts)
            elif kind == "strftime":
                t = self._strftime(ts)  # type: ignore[misc]
            else:
                t = self._times.iso(ts)
        except ValueError as e:
            raise BadLine("time", str(e)) from None
        host = None
        if i_request >= 0:
            req = g[i_request]
            parts = req.split(" ")
            if len(parts) == 3 and parts[1][:1] == "/" and parts[0].isalpha():
                method, path = parts[0], parts[1]  # the usual "GET /a?b HTTP/1.1"
                q = path.find("?")
                if q >= 0:
                    path = path[:q]
                if "#" in path:
                    path = path[:path.find("#")]
            else:
                method, path, host = _request(req)
        else:
            method = g[i_method] if i_method >= 0 else ""
            path = _split_target(g[i_path])[0] if i_path >= 0 else ""
        if i_host >= 0:
            host = _opt(g[i_host]) or host
        what, status, size = "status", None, None
        try:
            if i_status >= 0 and (v := g[i_status]) != "-":
                status = int(v)
            what = "bytes"
            if i_bytes >= 0:
                size = 0 if (v := g[i_bytes]) == "-" else int(v)  # Apache: "-" for 0
        except ValueError:
            raise BadLine(what, f"{what} is not a number: {v[:20]!r}") from None
        headers = {}
        for i, h in self._lean_headers:  # a loop: no comprehension frame per line
            if (v := g[i]) != "-":
                headers[h] = v
        return _new_event(LogEvent, (
            t, g[i_client] if i_client >= 0 else "", method, path, status, size,
            headers.get("user-agent"), headers.get("referer"), host, headers,
            _LineFields(self, line), lineno))


_new_event = tuple.__new__  # a LogEvent's fields as a tuple, without its Python __new__


class _LineFields(Mapping[str, str]):
    """`LogEvent.fields` of a `LogFormat` line, read from the line on first use (most
    replays never look at them)."""

    __slots__ = ("_d", "_format", "_line")

    def __init__(self, format: LogFormat, line: str) -> None:
        self._format, self._line = format, line
        self._d: dict[str, str] | None = None

    def _fields(self) -> dict[str, str]:
        d = self._d
        if d is None:
            d = self._d = self._format.fields_of(self._line)
        return d

    def __getitem__(self, key: str) -> str:
        return self._fields()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields())

    def __len__(self) -> int:
        return len(self._fields())

    def __repr__(self) -> str:
        return repr(self._fields())

    def __reduce__(self) -> tuple[type[dict[str, str]], tuple[dict[str, str]]]:
        return dict, (self._fields(),)  # pickled as the plain dict it stands for


COMBINED = LogFormat(NGINX_COMBINED, name="combined", trailing=True)
COMMON = LogFormat(NGINX_COMMON, name="common", trailing=True)


# -- JSON Lines ------------------------------------------------------------------------------

#: Objects and arrays nested deeper than this make a line malformed: no log nests so deep.
MAX_JSON_DEPTH = 32

_TOO_DEEP = f"nested deeper than {MAX_JSON_DEPTH} levels: not a log line"


def _text(v: object) -> str:
    if isinstance(v, str):
        return v
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ", ".join([_text(x) for x in v])
    return str(v) if not isinstance(v, dict) else json.dumps(v)


def _deeper_than(v: list[object], levels: int) -> bool:
    """Whether the list `v` nests lists and objects more than `levels` deep (itself one
    level), walked without recursion."""
    stack: list[tuple[list[object] | dict[str, object], int]] = [(v, 1)]
    while stack:
        x, depth = stack.pop()
        if depth > levels:
            return True
        for y in (x.values() if isinstance(x, dict) else x):
            if isinstance(y, (dict, list)):
                stack.append((y, depth + 1))
    return False


def _flatten(obj: Mapping[str, object], prefix: str, raw: dict[str, object], depth: int,
             budget: list[int]) -> None:
    """`obj`'s fields into `raw` by dotted name. `budget[0]`: the characters of names left
    to write (each nested name repeats its parents', so one long parent name over many
    fields would write a line out many times over)."""
    if depth > MAX_JSON_DEPTH:
        raise BadLine("json", _TOO_DEEP)
    for k, v in obj.items():
        key = prefix + k
        if prefix:
            budget[0] -= len(key)
            if budget[0] < 0:
                raise BadLine("json", "its nested field names, written out in full, come to "
                              "more than four times the line: not a log line")
        if isinstance(v, dict):
            _flatten(v, key + ".", raw, depth + 1, budget)
        else:
            if isinstance(v, list) and _deeper_than(v, MAX_JSON_DEPTH - depth):
                raise BadLine("json", _TOO_DEEP)
            raw[key] = v


Names = str | Sequence[str]


def _names(v: Names) -> tuple[str, ...]:
    return (v,) if isinstance(v, str) else tuple(v)


class JsonFormat:
    """JSON Lines: one object per line (nginx ``escape=json``, Caddy, Traefik, your app).

    Each `LogEvent` attribute is read from the first of its field names the object has
    (nested objects by dotted name: ``request.remote_ip``); the defaults below cover the
    usual spellings. `time` is required; it may be epoch seconds, milliseconds or
    microseconds (a number or numeric text; `time_unit` ``"auto"`` tells them apart by size,
    or say ``"s"``, ``"ms"``, ``"us"``), ISO-8601 text (``2000-10-10T13:55:36Z``) or
    ``$time_local`` text. `path` may carry a query (it is cut); `request` (a whole request
    line) is used when `method`/`path` are missing. `headers` names an object of request
    headers (values may be lists, as Caddy writes them); top-level ``http_<name>`` fields
    are headers too. Every field is in `LogEvent.fields` as text.
    """

    __slots__ = ("_cols", "_times", "headers", "name", "time_unit")

    def __init__(
        self, *,
        time: Names = ("time", "timestamp", "ts", "@timestamp", "msec", "time_iso8601",
                       "time_local", "date"),
        client: Names = ("remote_addr", "client", "client_ip", "remote_ip", "ip",
                         "request.remote_ip", "request.client_ip"),
        method: Names = ("method", "request_method", "request.method"),
        path: Names = ("path", "uri", "request_uri", "url", "request.uri", "request.path"),
        request: Names = ("request",),
        status: Names = ("status", "status_code", "response.status"),
        bytes: Names = ("bytes", "body_bytes_sent", "bytes_sent", "size", "response.size"),
        user_agent: Names = ("user_agent", "http_user_agent", "agent"),
        referer: Names = ("referer", "referrer", "http_referer"),
        host: Names = ("host", "http_host", "server_name", "request.host"),
        headers: str = "request.headers",
        time_unit: str = "auto",
    ) -> None:
        if time_unit not in ("auto", "s", "ms", "us", "iso"):
            raise ConfigError(f"time_unit {time_unit!r}: use auto, s, ms, us or iso")
        self._cols = tuple(_names(x) for x in (time, client, method, path, request, status,
                                                bytes, user_agent, referer, host))
        if not self._cols[0]:
            raise ConfigError("JsonFormat needs at least one time field name")
        self.headers = headers
        self.time_unit = time_unit
        self.name = "jsonl"
        self._times = TimeCache()

    def __repr__(self) -> str:
        return f"JsonFormat(time={self._cols[0]!r}, client={self._cols[1]!r})"

    def parse(self, line: str, lineno: int) -> LogEvent | None:
        try:
            obj = json.loads(line)
        except ValueError as e:
            if not line.strip():
                return None
            raise BadLine("json", f"not JSON ({e.args[0].split(':')[0]})") from None
        except RecursionError:  # json's own limit on nesting, below Python's stack
            raise BadLine("json", _TOO_DEEP) from None
        if not isinstance(obj, dict):
            raise BadLine("json", "not a JSON object")
        raw: dict[str, object] = {}
        _flatten(obj, "", raw, 1, [4 * len(line) + 4096])
        (tk, ck, mk, pk, rk, sk, bk, uk, fk, hk) = self._cols

        def get(keys: tuple[str, ...]) -> object:
            for k in keys:
                v = raw.get(k)
                if v is not None:
                    return v
            return None

        t = self._time(get(tk), tk)
        hdrs: dict[str, str] = {}
        prefix = self.headers + "."
        for k, v in raw.items():
            if k.startswith("http_"):
                if v is not None and v not in {"-", ""}:  # nginx: "-", escape=json: ""
                    hdrs[_header_name(k)] = _text(v)
            elif k.startswith(prefix):
                hdrs[k[len(prefix):].lower()] = _text(v)
        fields = {k: _text(v) for k, v in raw.items()}
        method, path, host = get(mk), get(pk), None
        if method is None or path is None:
            req = get(rk)
            if isinstance(req, str):
                m2, p2, host = _request(unescape(req))
                method, path = method or m2, path or p2
        if isinstance(path, str):
            path, h2 = _split_target(path)
            host = host or h2
        ua, ref, hst = get(uk), get(fk), get(hk)
        return LogEvent(
            t, _text(get(ck) or ""), _text(method or ""), path if isinstance(path, str) else "",
            self._number(get(sk), "status"), self._number(get(bk), "bytes"),
            _opt(_text(ua)) if ua is not None else hdrs.get("user-agent"),
            _opt(_text(ref)) if ref is not None else hdrs.get("referer"),
            _opt(_text(hst)) if hst is not None else host, hdrs, fields, lineno)

    def _time(self, v: object, names: tuple[str, ...]) -> float:
        if v is None:
            raise BadLine("time", f"no time field (looked for {', '.join(names)})")
        try:
            if isinstance(v, bool):
                raise ValueError(f"time must be a number or text, got {v!r}")
            if isinstance(v, (int, float)):
                if self.time_unit == "iso":
                    raise ValueError(f"time_unit is iso, got the number {v!r}")
                return epoch_seconds(float(v), self.time_unit)
            if isinstance(v, str):
                if self.time_unit == "iso":
                    return self._times.iso(v)
                if self.time_unit != "auto":
                    return epoch_seconds(float(v), self.time_unit)
                return self._times.any(v)
            raise ValueError(f"time must be a number or text, got {type(v).__name__}")
        except ValueError as e:
            raise BadLine("time", str(e)) from None

    @staticmethod
    def _number(v: object, what: str) -> int | None:
        if v is None or v == "-":
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise BadLine(what, f"{what} is not a number: {reprlib.repr(v)}")
        try:
            return int(v)
        except ValueError:
            raise BadLine(what, f"{what} is not a number: {str(v)[:20]!r}") from None


# -- ratekeeper simulate traces --------------------------------------------------------------

class TraceFormat:
    """The JSON Lines traces ``ratekeeper simulate`` replays (examples/traces/):
    ``{"t": seconds, "key": "client-a", "cost": 1}``, read by the simulator's rules: ``#``
    lines are comments, a missing ``t`` is the previous event's (0 at first), a missing
    ``key`` is ``"default"``, a missing ``cost`` is 1.

    The key becomes `LogEvent.client`; ``fields`` has ``key`` and ``cost`` (as text). Method
    and path are ``""``. One instance remembers the previous ``t``: use one per read.
    """

    __slots__ = ("_last_t", "name")

    def __init__(self) -> None:
        self.name = "trace"
        self._last_t = 0.0

    def parse(self, line: str, lineno: int) -> LogEvent | None:
        s = line.strip()
        if not s or s[0] == "#":
            if s:
                raise BadLine("comment", "comment", skip=True)
            return None
        try:
            ev = json.loads(s)
        except ValueError as e:
            raise BadLine("json", f"not JSON ({e.args[0].split(':')[0]})") from None
        except RecursionError:  # json's own limit on nesting, below Python's stack
            raise BadLine("json", _TOO_DEEP) from None
        if not isinstance(ev, dict):
            raise BadLine("json", 'expected an object like {"t": 0.5, "key": "a"}')
        t = ev.get("t", self._last_t)
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            raise BadLine("time",
                          f'"t" must be a finite number of seconds, got {reprlib.repr(t)}')
        key = ev.get("key", "default")
        if isinstance(key, (int, float)) and not isinstance(key, bool):
            key = str(key)
        if not isinstance(key, str) or not key:
            raise BadLine("field",
                          f'"key" must be a non-empty string, got {reprlib.repr(key)}')
        cost = ev.get("cost", 1)
        if (isinstance(cost, bool) or not isinstance(cost, (int, float))
                or not math.isfinite(cost) or cost <= 0):
            raise BadLine("field",
                          f'"cost" must be a positive number, got {reprlib.repr(cost)}')
        self._last_t = t = float(t)
        return LogEvent(t, key, "", "", None, None, None, None, None, {},
                        {"key": key, "cost": _text(cost)}, lineno)
