"""HTTP integration: response headers, client keys, route policies and middleware.

Importing this package needs no web framework; the adapters load their framework lazily:

    from ratekeeper.http import HTTPPolicy, Route, ClientIP, APIKey
    from ratekeeper.http import RateLimitMiddleware          # ASGI (Starlette, FastAPI, ...)
    from ratekeeper.http import WSGIRateLimitMiddleware      # WSGI (Flask, ...)
    from ratekeeper.http.django import RateLimitMiddleware   # Django, configured from settings
    from ratekeeper.http.fastapi import RateLimit            # FastAPI per-endpoint dependency

The header functions (`ratelimit_headers`, `rejection_headers`, `retry_after_seconds`,
`problem_body`) are pure and usable on their own. See docs/http.md.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ..policy._request import APIKey, ClientIP, KeyFunc, RequestInfo, User, safe_key
from ._policy import HTTPPolicy, Outcome, Plan, Route, RouteLimit, compile_path
from .headers import (
    PROBLEM_CONTENT_TYPE,
    problem_body,
    ratelimit_headers,
    rejection_headers,
    retry_after_seconds,
    sf_string,
)

if TYPE_CHECKING:
    from .asgi import RateLimitMiddleware
    from .wsgi import WSGIRateLimitMiddleware

__all__ = [
    "PROBLEM_CONTENT_TYPE",
    "APIKey",
    "ClientIP",
    "HTTPPolicy",
    "KeyFunc",
    "Outcome",
    "Plan",
    "RateLimitMiddleware",
    "RequestInfo",
    "Route",
    "RouteLimit",
    "User",
    "WSGIRateLimitMiddleware",
    "compile_path",
    "problem_body",
    "ratelimit_headers",
    "rejection_headers",
    "retry_after_seconds",
    "safe_key",
    "sf_string",
]

_LAZY = {
    "RateLimitMiddleware": ".asgi",
    "WSGIRateLimitMiddleware": ".wsgi",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value
