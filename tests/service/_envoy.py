"""Envoy's rate limit messages from the `envoy-data-plane` package (betterproto2): an encoding
of the protocol written independently of ours, to build requests and read responses with.

envoy-data-plane 2.2 trips a pydantic deprecation warning at import time (a classmethod
``model_validator``); it is silenced here, for that import only.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"pydantic\..*")
    warnings.filterwarnings("ignore", message=r".*model_validator.*", category=DeprecationWarning)
    from envoy_data_plane.envoy.extensions.common.ratelimit.v3 import (
        RateLimitDescriptor,
        RateLimitDescriptorEntry,
        RateLimitDescriptorRateLimitOverride,
    )
    from envoy_data_plane.envoy.service.ratelimit.v3 import (
        RateLimitRequest,
        RateLimitResponse,
        RateLimitResponseCode,
        RateLimitResponseRateLimitUnit,
    )
    from envoy_data_plane.envoy.type.v3 import RateLimitUnit

__all__ = [
    "METHOD",
    "RateLimitDescriptor",
    "RateLimitDescriptorEntry",
    "RateLimitDescriptorRateLimitOverride",
    "RateLimitRequest",
    "RateLimitResponse",
    "RateLimitResponseCode",
    "RateLimitResponseRateLimitUnit",
    "RateLimitUnit",
    "descriptor",
]

#: The method Envoy calls, spelled out here rather than taken from our stubs.
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


def descriptor(*entries: tuple[str, str], hits: int | None = None,
               override: tuple[int, RateLimitUnit] | None = None) -> RateLimitDescriptor:
    """A RateLimitDescriptor from ``(key, value)`` pairs."""
    d = RateLimitDescriptor(entries=[RateLimitDescriptorEntry(key=k, value=v) for k, v in entries])
    if hits is not None:
        d.hits_addend = hits
    if override is not None:
        d.limit = RateLimitDescriptorRateLimitOverride(requests_per_unit=override[0],
                                                       unit=override[1])
    return d
