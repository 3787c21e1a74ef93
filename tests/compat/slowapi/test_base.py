"""laurentS/slowapi's tests/test_base.py: the package imports (here, every name a slowapi
app imports, from the one module it now imports them from)."""

from __future__ import annotations

import importlib


def test_import() -> None:
    """laurentS/slowapi tests/test_base.py::test_import (slowapi, slowapi.errors,
    slowapi.middleware and slowapi.util's public names)."""
    module = importlib.import_module("ratekeeper.http.fastapi")
    for name in ("Limiter", "_rate_limit_exceeded_handler", "RateLimitExceeded",
                 "SlowAPIMiddleware", "SlowAPIASGIMiddleware", "get_remote_address",
                 "get_ipaddr"):
        assert name in module.__all__ and callable(getattr(module, name))
