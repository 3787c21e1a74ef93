"""A Django middleware class, configured from settings.

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

``"policy"`` may also be a `Limit`, a list of limits, or a dotted path to any of these.
Key by the logged-in user with ``key=django_user`` (below). The middleware is synchronous
(Django adapts it under ASGI); it behaves exactly like the WSGI middleware: one decision per
request, the RateLimit fields on every limited response, 429 with problem+json on rejection,
and the decision in ``request.ratekeeper_decision``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

try:
    from django.conf import settings  # type: ignore[import-untyped]
    from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]
    from django.http import HttpRequest, HttpResponse  # type: ignore[import-untyped]
    from django.utils.module_loading import import_string  # type: ignore[import-untyped]
except ImportError as e:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        f"ratekeeper.http.django needs Django: pip install 'ratekeeper[django]' ({e})"
    ) from e

from ..core import run
from ..policy._request import RequestInfo
from ..stores import Store
from ._policy import _Adapter
from .wsgi import SYNC, Sleep

__all__ = ["RateLimitMiddleware", "django_user"]

_KNOWN = frozenset({"policy", "store", "clock", "sleep", "failure", "fallback_share"})


def django_user(request: RequestInfo) -> str | None:
    """A key function: ``user:<pk>`` for an authenticated Django user, else None (client IP).

    Needs ``AuthenticationMiddleware`` before the rate limit middleware.
    """
    user = getattr(request.native, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return f"user:{user.pk}"


def _resolve(value: object) -> Any:
    return import_string(value) if isinstance(value, str) else value


class RateLimitMiddleware(_Adapter[Store, Sleep]):
    """Django middleware applying ``settings.RATEKEEPER`` (see the module docstring)."""

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
        self.get_response = get_response
        try:
            super().__init__(
                _resolve(conf["policy"]),
                store=_resolve(conf.get("store")),
                clock=_resolve(conf.get("clock")),
                sleep=_resolve(conf.get("sleep")),
                failure=conf.get("failure", "open"),
                fallback_share=conf.get("fallback_share", 1.0),
            )
        except ValueError as e:  # Django's word for a bad setting
            raise ImproperlyConfigured(f"settings.RATEKEEPER: {e}") from e

    def __call__(self, request: HttpRequest) -> HttpResponse:
        info = RequestInfo.from_wsgi(request.META)
        info.path = request.path
        info.native = request
        out = run(self.engine.handle(info))
        if out is None:  # not limited
            return self.get_response(request)
        if out.action == "reject":
            response = HttpResponse(out.body, status=out.status)
            for name, value in out.headers:
                response[name] = value
            return response
        request.ratekeeper_decision = out.decision
        response = self.get_response(request)
        for name, value in out.headers:
            response[name] = value
        return response
