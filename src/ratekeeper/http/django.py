"""Django: a middleware configured from settings, and django-ratelimit's ``@ratelimit``
view decorator, decided together with the policy's defaults (one decision per request).

    # views.py
    from ratekeeper.http.django import ratelimit

    @ratelimit(key="ip", rate="5/m")                  # mode="add" (default): the
    def search(request): ...                          # defaults AND 5 per minute

    @ratelimit(key="user_or_ip", rate="100/h", mode="replace")  # only 100 per hour
    def export(request): ...

    @ratelimit(key="header:x-api-key", rate="10/s", method="POST", block=False)
    def submit(request):
        if request.limited: ...                       # over the limit: the view decides

    # settings.py
    from ratekeeper import Limit
    from ratekeeper.http import ClientIP, HTTPPolicy

    MIDDLEWARE = [
        ...,
        "django.contrib.auth.middleware.AuthenticationMiddleware",  # before, to key by user
        "ratekeeper.http.django.RateLimitMiddleware",
        ...,
    ]
    RATEKEEPER = {
        "policy": HTTPPolicy(limits=[Limit("gcra", "10/s", burst=20, name="per-client")],
                             client_ip=ClientIP(trusted_proxies=["10.0.0.0/8"])),
        # optional: "store", "clock", "sleep", "failure", "fallback_share"
    }

``"policy"`` may also be a `Limit`, a list of limits, a dotted path to any of these, or a
policies file (a ``.toml`` path with an ``[http]`` part). ``@exempt`` marks a view the
middleware never limits.
Key by the logged-in user with ``key=django_user`` (below). The middleware is synchronous
(Django adapts it under ASGI); it behaves exactly like the WSGI middleware: one decision per
request, the RateLimit fields on every limited response, 429 with problem+json on rejection,
and the decision in ``request.ratekeeper_decision``.

``@ratelimit(key="ip", rate="5/m", method=None, block=True, mode="add", group=None,
algorithm="fixed-window", burst=None, cost=None)`` takes django-ratelimit's arguments:
`rate` is ``"5/m"``, ``"100/h"``, ``"10/s"``, ``"1000/d"``, ``"100/10"`` (a bare number:
seconds), ``(count, seconds)`` (or any ratekeeper rate, a `Limit`, a list); ``"0/m"``:
every request limited, None: not limited; a callable ``(group, request)`` answering one
of these per request (or its dotted path); `key` is ``"ip"`` (the client IP, trusted
proxies as the policy's `ClientIP` says), ``"user"`` / ``"user_or_ip"`` (the user's pk,
else the client IP), ``"header:<name>"``, ``"get:<name>"``, ``"post:<name>"``, a callable
``(group, request)`` or its dotted path; `method` limits only those methods (None: all);
`group` names the limits' state (default: the view's dotted name; views of one group share
it). `get_usage` and `is_ratelimited` read (or charge) those counters from a view's code.
``block=False`` lets a rejected request through with ``request.limited = True`` (False
when admitted) for the view to handle. Stacked decorators add limits to one view (with one
method, block and mode).

django-ratelimit's settings: ``RATELIMIT_ENABLE = False`` turns every ``@ratelimit`` off
(the middleware's policy still applies); ``RATELIMIT_EXCEPTION_CLASS`` (a class or dotted
path, e.g. `Ratelimited`) is raised instead of the 429; without the middleware
``RATELIMIT_FAIL_OPEN`` (unset: ratekeeper's fail-open) and ``RATELIMIT_IPV4_MASK`` /
``RATELIMIT_IPV6_MASK`` (when ``settings.RATEKEEPER`` has no `HTTPPolicy`) apply;
``RATELIMIT_IP_META_KEY`` is refused, naming ``ClientIP(trusted_proxies=...)``.

With `RateLimitMiddleware` installed, it decides in ``process_view``, where the view and its
decorator are known: the policy's limits and the view's are one decision, all-or-nothing
(``mode="add"``), or the view's alone (``"replace"``); requests that reach no view (404s)
are decided with the defaults after routing. A class-based view's limits are found on
the handler the method reaches (``@method_decorator(ratelimit(...))`` on ``get`` or
``dispatch``). Without the middleware a decorated view is limited by its decorator alone:
``settings.RATEKEEPER`` still gives its store (else an in-process `MemoryStore`), clock,
``failure`` and the policy's client address (`ClientIP`: trusted proxies, prefixes), but
not the policy's limits. ``request.limited`` is set on every call of a decorated view. An
empty ``REMOTE_ADDR`` (a Unix socket) is ImproperlyConfigured unless ``ClientIP`` trusts
``"unix"``: otherwise every client would share one key.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

try:
    from django.conf import settings  # type: ignore[import-untyped]
    from django.core.exceptions import (  # type: ignore[import-untyped]
        ImproperlyConfigured,
        PermissionDenied,
    )
    from django.core.signals import setting_changed  # type: ignore[import-untyped]
    from django.http import (  # type: ignore[import-untyped]
        HttpRequest,
        HttpResponse,
        HttpResponseBase,
    )
    from django.utils.module_loading import import_string  # type: ignore[import-untyped]
except ImportError as e:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        f"ratekeeper.http.django needs Django: pip install 'ratekeeper[django]' ({e})"
    ) from e

from .. import core
from .._rates import Rate
from .._types import Limit
from ..core import run
from ..policy._request import ClientIP, KeyFunc, RequestInfo
from ..stores import Store
from ._decorators import Mode, Spec, header_key, make_limits
from ._policy import Cost, HTTPPolicy, Outcome, RouteLimits, _Adapter, _Engine
from .wsgi import SYNC, Sleep

__all__ = ["ALL", "UNSAFE", "RateLimitMiddleware", "Ratelimited", "django_user", "exempt",
           "get_usage", "is_ratelimited", "ratelimit"]

V = TypeVar("V", bound=Callable[..., Any])

_KNOWN = frozenset({"policy", "store", "clock", "sleep", "failure", "fallback_share"})


class Ratelimited(PermissionDenied):  # type: ignore[misc]
    """django-ratelimit's exception, for ``RATELIMIT_EXCEPTION_CLASS =
    "ratekeeper.http.django.Ratelimited"``: a blocked request raises it instead of
    answering 429 (a 403 through Django's ``PermissionDenied`` handling, or your
    ``process_exception`` middleware's answer)."""


def django_user(request: RequestInfo) -> str | None:
    """A key function: ``user:<pk>`` for an authenticated Django user, else None (client IP).

    Needs ``AuthenticationMiddleware`` before the rate limit middleware.
    """
    user = getattr(request.native, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return f"user:{user.pk}"


def _resolve(value: object) -> Any:
    """A dotted path's object; a ``.toml`` path (a policies file) and objects as they are."""
    if isinstance(value, str) and not value.endswith(".toml"):
        return import_string(value)
    return value


def _info(adapter: _Adapter[Store, Sleep], request: HttpRequest) -> RequestInfo:
    info = RequestInfo.from_wsgi(request.META)
    if info.peer is None and adapter.policy is not None \
            and not adapter.policy.client_ip._trust_unix:
        # gunicorn or uwsgi on a Unix socket: every client would share one key, silently.
        raise ImproperlyConfigured(
            "REMOTE_ADDR is empty (the app server listens on a Unix socket behind a "
            "reverse proxy?), so every client would count as one; believe the proxy's "
            "X-Forwarded-For with settings.RATEKEEPER = {'policy': HTTPPolicy(..., "
            "client_ip=ClientIP(trusted_proxies=['unix']))}")
    info.path = request.path
    info.native = request
    return info


def _rejection(out: Outcome) -> HttpResponse:
    response = HttpResponse(out.body, status=out.status)
    for name, value in out.headers:
        response[name] = value
    return response


def _raise_configured_exception() -> None:
    """django-ratelimit's ``RATELIMIT_EXCEPTION_CLASS`` (a class or its dotted path),
    raised instead of the 429 when it is set (its handler, e.g. ``RATELIMIT_VIEW``
    through a ``process_exception`` middleware, answers)."""
    cls = getattr(settings, "RATELIMIT_EXCEPTION_CLASS", None)
    if cls is not None:
        raise (import_string(cls) if isinstance(cls, str) else cls)()


def _add_headers(request: HttpRequest, response: Any) -> Any:
    if not isinstance(response, HttpResponseBase):
        return response  # not a response (a view called as a function): nothing to write to
    for name, value in getattr(request, "_ratekeeper_headers", ()):
        response[name] = value
    return response


def _decide(adapter: _Adapter[Store, Sleep], request: HttpRequest,
            view: _View | None) -> HttpResponse | None:
    """One decision for `request` with `view`'s decorator limits (if it has them and the
    method is one they cover): a rejection to send, or None (go on to the view)."""
    request._ratekeeper_decided = True
    route, zero = (None, False) if view is None else view.route_for(request)
    out = run(adapter.engine.handle(_info(adapter, request), route))
    rejected = out is not None and out.action == "reject"
    if view is not None:  # django-ratelimit sets it whenever a decorated view is called
        request.limited = zero or (route is not None and rejected)
        if request.limited and not view.block:
            return None  # django-ratelimit's block=False: the view sees request.limited
        if zero and not rejected:  # rate '0/m': refused, and nothing was counted for it
            _raise_configured_exception()
            return HttpResponse(b"Too Many Requests: this view's rate is 0", status=429,
                                content_type="text/plain")
    if out is None:  # not limited
        return None
    if rejected:
        if route is not None:
            _raise_configured_exception()
        return _rejection(out)
    request.ratekeeper_decision = out.decision
    request._ratekeeper_headers = out.headers
    return None


class RateLimitMiddleware(_Adapter[Store, Sleep]):
    """Django middleware applying ``settings.RATEKEEPER`` with each view's ``@ratelimit``
    limits (see the module docstring)."""

    sync_capable = True
    async_capable = False
    _kind = SYNC

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        conf = getattr(settings, "RATEKEEPER", None)
        if not isinstance(conf, Mapping) or "policy" not in conf:
            raise ImproperlyConfigured(
                "ratekeeper.http.django.RateLimitMiddleware needs settings.RATEKEEPER = "
                "{'policy': HTTPPolicy(...) or [Limit(...)], ...}; got "
                f"{conf!r:.200}"
            )
        unknown = set(conf) - _KNOWN
        if unknown:
            raise ImproperlyConfigured(
                f"settings.RATEKEEPER has unknown keys {sorted(unknown)}; "
                f"known keys: {sorted(_KNOWN)}"
            )
        _refuse_peer_settings(conf)
        self.get_response = get_response
        # Only the failure options given: a policies file refuses them (its own decide).
        failure = {k: conf[k] for k in ("failure", "fallback_share") if k in conf}
        try:
            super().__init__(
                _resolve(conf["policy"]),
                store=_resolve(conf.get("store")),
                clock=_resolve(conf.get("clock")),
                sleep=_resolve(conf.get("sleep")),
                **failure,
            )
        except (TypeError, ValueError) as e:  # Django's word for a bad setting
            raise ImproperlyConfigured(f"settings.RATEKEEPER: {e}") from e

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not getattr(request, "_ratekeeper_decided", False):
            # No view was reached (a 404, or an earlier middleware answered): the
            # defaults decide now, so a scan of unknown paths is limited as before.
            rejected = _decide(self, request, None)
            if rejected is not None:
                return rejected
        return _add_headers(request, response)

    def process_view(self, request: HttpRequest, view_func: Callable[..., Any],
                     view_args: Any, view_kwargs: Any) -> HttpResponse | None:
        """Decide here, where the view (and so its decorator limits) is known."""
        view = _view_of(view_func, request.method or "GET")
        request._ratekeeper_entry = view  # its wrapper does not decide again
        return _decide(self, request, view)


def _view_of(view_func: Callable[..., Any], method: str) -> _View | None:
    """`view_func`'s decorator limits; for a class-based view's ``as_view()``, those of
    the handler `method` reaches (``@method_decorator(ratelimit(...))`` on ``get``,
    ``post``, ... or ``dispatch``)."""
    view: _View | None = getattr(view_func, "_ratekeeper_view", None)
    cls = getattr(view_func, "view_class", None)
    if view is not None or cls is None:
        return view
    name = method.lower()
    if name == "head" and not hasattr(cls, "head"):
        name = "get"  # View.setup's fallback
    for attr in (name, "dispatch"):
        found = getattr(getattr(cls, attr, None), "_ratekeeper_view", None)
        if isinstance(found, _View):
            return found
    return None


# -- @ratelimit -----------------------------------------------------------------------------

ALL = None
UNSAFE = ("DELETE", "PATCH", "POST", "PUT")


#: django-ratelimit's rate: ``"5/m"``, ``"100/10"`` (a bare number: seconds), ``"400/10m"``.
_DJANGO_RATE = re.compile(r"(\d+)/(\d*)([smhd])?")
#: A rate as django-ratelimit takes it, or a function ``(group, request)`` answering one
#: (None: not limited), or the function's dotted path.
DjangoRate = str | tuple[int, int] | Limit | list[str | Limit] | None


def _rate_of(rate: DjangoRate) -> tuple[str | Limit | list[str | Limit] | None, bool]:
    """`rate` as ratekeeper's limits (None: not limited) and whether it is django-ratelimit's
    zero rate (``"0/m"``: every request limited, nothing counted)."""
    if isinstance(rate, tuple):
        rate = f"{rate[0]}/{rate[1]}s"
    if isinstance(rate, str):
        m = _DJANGO_RATE.fullmatch(rate.strip())
        if m is not None:
            amount, multi, unit = m.groups()
            if int(amount) == 0:
                return None, True
            return f"{amount}/{multi}{unit or 's'}", False
    return rate, False


@dataclass
class _View:
    """One view's ``@ratelimit`` decorators so far: their limits (`spec`, None for
    ``rate=None``), or the function answering the rate per request (`rate_of`)."""

    spec: Spec | None
    methods: frozenset[str] | None
    block: bool
    zero: bool = False
    name: str = ""
    rate_of: Callable[[HttpRequest], Spec | bool | None] | None = None

    def route_for(self, request: HttpRequest) -> tuple[RouteLimits, bool]:
        """The request's decorator limits (None: none apply) and whether the rate is zero."""
        if self.methods is not None and (request.method or "GET").upper() not in self.methods:
            return None, False
        if not _enabled():
            return None, False
        spec: Spec | bool | None = self.spec
        if self.rate_of is not None:
            spec = self.rate_of(request)
        if isinstance(spec, bool):
            return None, spec
        return (None, self.zero) if spec is None else (spec.route_limit(), False)


def _user(request: RequestInfo) -> str | None:
    return django_user(request)


def _key(key: str | Callable[[str, HttpRequest], object], group: str) -> str | KeyFunc:
    """django-ratelimit's key as ratekeeper's: ``"client_ip"`` or a function of the
    `RequestInfo` (its None: the client IP)."""
    if callable(key):
        fn = key

        def call(req: RequestInfo) -> str | None:
            got = fn(group, req.native)
            return None if got is None or got == "" else str(got)

        return call
    if key == "ip":
        return "client_ip"
    if key in ("user", "user_or_ip"):
        return _user
    kind, _, arg = key.partition(":")
    if kind == "header" and arg:
        return header_key(arg)
    if kind in ("get", "post") and arg:
        def field(req: RequestInfo) -> str | None:
            data = getattr(req.native, kind.upper(), {})
            v = data.get(arg)
            return f"{kind}:{arg}:{v}" if v else None

        return field
    if "." in key and ":" not in key:
        return _key(import_string(key), group)
    raise ValueError(
        f"@ratelimit key={key!r}: use 'ip', 'user', 'user_or_ip', 'header:<name>', "
        "'get:<name>', 'post:<name>', a callable (group, request) or its dotted path")


def ratelimit(group: str | None = None, key: str | Callable[[str, HttpRequest], object] = "ip",
              rate: DjangoRate | Callable[[str, HttpRequest], object] = None,
              method: str | Collection[str] | None = ALL, block: bool = True, *,
              mode: Mode = "add", algorithm: str = "fixed-window", burst: float | None = None,
              cost: Cost | None = None) -> Callable[[V], V]:
    """django-ratelimit's view decorator, decided with the policy (module docstring)."""
    methods = None if method is None else frozenset(
        [method.upper()] if isinstance(method, str) else (m.upper() for m in method))
    rate_fn: Callable[[str, HttpRequest], object] | None = None
    if callable(rate):
        rate_fn = rate
    elif isinstance(rate, str) and "." in rate and not rate[:1].isdigit():
        rate_fn = import_string(rate)

    def decorate(view: V) -> V:
        name = group or f"{view.__module__}.{view.__qualname__}"
        view_key = _key(key, name)

        def spec_of(rate: DjangoRate) -> Spec | bool | None:
            limits, zero = _rate_of(rate)
            if limits is None:
                return zero or None
            spec = Spec(name, make_limits(limits, endpoint=name, algorithm=algorithm,
                                          burst=burst, name=None), view_key, mode, cost)
            spec.route_limit()  # its errors now (or at this request), not in the store
            return spec

        known: _View | None = getattr(view, "_ratekeeper_view", None)
        if rate_fn is not None:
            fn = rate_fn
            if known is not None:
                raise ValueError(f"@ratelimit on {name!r}: a callable rate cannot be stacked "
                                 "with other @ratelimit decorators; answer every rate from "
                                 "the one function")

            def per_request(request: HttpRequest) -> Spec | bool | None:
                try:
                    return spec_of(fn(name, request))  # type: ignore[arg-type]
                except (TypeError, ValueError) as e:
                    raise ImproperlyConfigured(
                        f"@ratelimit on {name!r}: its rate function {fn!r} answered a rate "
                        f"ratekeeper cannot use: {e}") from e

            entry = _View(None, methods, block, rate_of=per_request)
        else:
            spec = spec_of(rate)  # type: ignore[arg-type]
            zero = spec is True
            spec = None if isinstance(spec, bool) else spec
            if known is not None:  # stacked: one view, more limits
                if (known.methods, known.block) != (methods, block) or known.rate_of \
                        or known.zero or zero or (known.spec is None) != (spec is None):
                    raise ValueError(
                        f"the @ratelimit decorators stacked on {name!r} differ in method or "
                        "block, or one has a rate of 0, None or a function; give them the "
                        "same method and block and rates such as '5/m'")
                if known.spec is not None and spec is not None:
                    known.spec.add(spec)
                    known.spec.route_limit()
                return view
            entry = _View(spec, methods, block, zero=zero)

        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            decided: _View | None = getattr(request, "_ratekeeper_entry", None)
            if decided is not entry and (decided is None or decided.name != entry.name):
                # No RateLimitMiddleware decided this request with these limits (none is
                # installed, or it saw a view it could not see into): they decide alone.
                # (method_decorator decorates each call anew: the same name is the same
                # view.)
                rejected = _decide(_standalone(), request, entry)
                if rejected is not None:
                    return rejected
                return _add_headers(request, view(request, *args, **kwargs))
            return view(request, *args, **kwargs)

        entry.name = name
        wrapper._ratekeeper_view = entry  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


def get_usage(request: HttpRequest, group: str | None = None,
              fn: Callable[..., Any] | None = None, *,
              key: str | Callable[[str, HttpRequest], object] = "ip",
              rate: DjangoRate | Callable[[str, HttpRequest], object] = None,
              method: str | Collection[str] | None = ALL,
              increment: bool = False) -> dict[str, Any] | None:
    """django-ratelimit's ``get_usage``: the counter `group` (else `fn`'s dotted name, as
    the decorator names it) keeps for `request`, charged one if `increment`, on the
    decorator's own counters (``settings.RATEKEEPER``'s store, clock and failure policy).

    None when nothing limits the request (rate None, a method not covered,
    ``RATELIMIT_ENABLE = False``); else ``{"count", "limit", "should_limit",
    "time_left"}``: `count` the units used in the window with this request (a rejected
    request is counted here but, all-or-nothing, not charged), `should_limit` whether this
    request is (``increment=False``: would be) refused, `time_left` whole seconds until it
    would be admitted (refused) or the window is full again."""
    if group is None and fn is None:
        raise ImproperlyConfigured("get_usage needs group= or fn= (the view whose counters "
                                   "to read)")
    if not _enabled():
        return None
    methods = None if method is None else (
        [method.upper()] if isinstance(method, str) else [m.upper() for m in method])
    if methods is not None and (request.method or "GET").upper() not in methods:
        return None
    if group is None:
        assert fn is not None
        target = fn.func if isinstance(fn, functools.partial) else fn
        group = f"{target.__module__}.{target.__qualname__}"
    if callable(rate):
        rate = rate(group, request)  # type: ignore[assignment]
    elif isinstance(rate, str) and "." in rate and not rate[:1].isdigit():
        rate = import_string(rate)(group, request)
    limits, zero = _rate_of(rate)  # type: ignore[arg-type]
    if zero:
        return {"count": 0, "limit": 0, "should_limit": True, "time_left": -1}
    if limits is None:
        return None
    spec = Spec(group, make_limits(limits, endpoint=group, algorithm="fixed-window",
                                   burst=None, name=None), _key(key, group), "replace", None)
    adapter = _standalone()
    engine = adapter.engine
    assert isinstance(engine, _Engine)  # _standalone's policy is a Python HTTPPolicy
    plan = engine.plan(_info(adapter, request), spec.route_limit())
    if plan is None:  # an exempt network or key of the policy
        return None
    d = run(core.hit(engine.store, list(plan.extra), engine.clock(), engine.failure,
                     consume=increment))
    rate_used = (d.limit or spec.limits[0]).rate
    limit = int(rate_used.amount if isinstance(rate_used, Rate) else 0)
    used = limit - d.remaining - (1 if d.allowed and not increment else 0)
    if not d.allowed and increment:
        used += 1  # this request, refused and not charged
    wait = d.reset_after if d.allowed or d.retry_after is None else d.retry_after
    return {"count": used, "limit": limit, "should_limit": not d.allowed,
            "time_left": math.ceil(wait)}


def is_ratelimited(request: HttpRequest, group: str | None = None,
                   fn: Callable[..., Any] | None = None, *,
                   key: str | Callable[[str, HttpRequest], object] = "ip",
                   rate: DjangoRate | Callable[[str, HttpRequest], object] = None,
                   method: str | Collection[str] | None = ALL,
                   increment: bool = False) -> bool:
    """django-ratelimit's ``is_ratelimited``: `get_usage`'s ``should_limit`` (False when
    nothing limits the request)."""
    usage = get_usage(request, group, fn, key=key, rate=rate, method=method,
                      increment=increment)
    return usage is not None and bool(usage["should_limit"])


# django-ratelimit's spellings: ``@ratelimit(..., method=ratelimit.UNSAFE)``.
ratelimit.ALL = ALL  # type: ignore[attr-defined]
ratelimit.UNSAFE = UNSAFE  # type: ignore[attr-defined]
get_usage.ALL = is_ratelimited.ALL = ALL  # type: ignore[attr-defined]
get_usage.UNSAFE = is_ratelimited.UNSAFE = UNSAFE  # type: ignore[attr-defined]


def exempt(view: V) -> V:
    """A view the middleware never limits (flask-limiter's ``exempt``; the policy's limits
    do not apply to it)."""
    name = f"{view.__module__}.{view.__qualname__}"
    view._ratekeeper_view = _View(  # type: ignore[attr-defined]
        Spec(name, [], "client_ip", "add", None, exempt=True), None, True)
    return view


class _Alone(_Adapter[Store, Sleep]):
    """The decorators' own adapter when no middleware is installed: no default limits."""

    _kind = SYNC


#: The one adapter, made at the first request from the settings; forgotten when one of
#: them changes (``override_settings`` in tests), so a request reads no setting.
_alone: list[_Alone] = []
#: django-ratelimit's settings the decorator alone reads.
_PEER_SETTINGS = ("RATELIMIT_FAIL_OPEN", "RATELIMIT_IPV4_MASK", "RATELIMIT_IPV6_MASK",
                  "RATELIMIT_IP_META_KEY", "RATELIMIT_USE_CACHE")


def _refuse_peer_settings(conf: Mapping[str, Any]) -> None:
    """django-ratelimit's settings that ratekeeper cannot honour as written, refused rather
    than ignored (ignored, every client or every process would share one counter)."""
    meta = getattr(settings, "RATELIMIT_IP_META_KEY", None)
    if meta is not None:
        raise ImproperlyConfigured(
            f"RATELIMIT_IP_META_KEY = {meta!r}: ratekeeper believes a forwarding header "
            "only from proxies it trusts; say which with settings.RATEKEEPER = "
            "{'policy': HTTPPolicy(client_ip=ClientIP(trusted_proxies=['10.0.0.0/8'], "
            "header='x-forwarded-for'))} and remove RATELIMIT_IP_META_KEY")
    cache = getattr(settings, "RATELIMIT_USE_CACHE", None)
    if cache is not None and conf.get("store") is None:
        raise ImproperlyConfigured(
            f"RATELIMIT_USE_CACHE = {cache!r}: ratekeeper keeps its counters in a store, "
            "not a Django cache; give settings.RATEKEEPER = {'store': "
            "RedisStore.from_url('redis://...')} (the cache's LOCATION) and remove "
            "RATELIMIT_USE_CACHE")


def _standalone() -> _Alone:
    """The adapter for ``settings.RATEKEEPER`` without its default limits: its store,
    clock, failure policy and the policy's client address (trusted proxies, prefixes),
    made again when the setting changes (e.g. under ``override_settings``)."""
    if not _alone:
        conf = getattr(settings, "RATEKEEPER", None)
        c: Mapping[str, Any] = conf if isinstance(conf, Mapping) else {}
        _refuse_peer_settings(c)
        fail_open, v4, v6 = (getattr(settings, name, None) for name in _PEER_SETTINGS[:3])
        policy = _resolve(c.get("policy"))
        # A Python policy's everything but its limits and routes (those need the
        # middleware); a policies file's client address is its own rules': the default,
        # grouped as django-ratelimit's RATELIMIT_IPV4_MASK / RATELIMIT_IPV6_MASK say.
        try:
            alone = dataclasses.replace(policy, limits=(), routes=()) \
                if isinstance(policy, HTTPPolicy) else HTTPPolicy(client_ip=ClientIP(
                    ipv4_prefix=32 if v4 is None else v4, ipv6_prefix=64 if v6 is None else v6))
        except (TypeError, ValueError) as e:
            raise ImproperlyConfigured(f"RATELIMIT_IPV4_MASK / RATELIMIT_IPV6_MASK: {e}") from e
        failure = {k: c[k] for k in ("failure", "fallback_share") if k in c}
        if fail_open is not None and "failure" not in failure:  # RATELIMIT_FAIL_OPEN
            failure["failure"] = "open" if fail_open else "closed"
        try:
            adapter = _Alone(alone, store=_resolve(c.get("store")),
                             clock=_resolve(c.get("clock")), sleep=_resolve(c.get("sleep")),
                             **failure)
        except (TypeError, ValueError) as e:
            raise ImproperlyConfigured(f"settings.RATEKEEPER: {e}") from e
        _alone[:] = [adapter]
    return _alone[0]


#: ``settings.RATELIMIT_ENABLE`` as read at the first request (a missing setting costs
#: Django an exception per read); forgotten as `_alone` is.
_enable: list[bool] = []


def _enabled() -> bool:
    if not _enable:
        _enable.append(bool(getattr(settings, "RATELIMIT_ENABLE", True)))
    return _enable[0]


def _forget(*, setting: str, **_: Any) -> None:
    """Django's `setting_changed`: the adapter is made again for the new settings."""
    if setting == "RATEKEEPER" or setting in _PEER_SETTINGS:
        _alone.clear()
    elif setting == "RATELIMIT_ENABLE":
        _enable.clear()


setting_changed.connect(_forget)
