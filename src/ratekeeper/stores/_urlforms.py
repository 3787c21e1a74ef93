"""The store URL forms and their one redaction: a leaf module, so that the Redis store (which
redacts URLs in its messages) and `stores._url` (which opens the store a URL names) both
import it without importing each other."""

from __future__ import annotations

from .._errors import ConfigError

__all__ = ["REDIS_SCHEMES", "VALID_FORMS", "redact", "scheme_of"]

REDIS_SCHEMES = frozenset({
    "redis", "rediss", "unix",
    "redis+cluster", "rediss+cluster",
    "redis+sentinel", "rediss+sentinel",
})

VALID_FORMS = (
    "memory://, redis://host:6379/0, rediss://host:6379/0, unix:///path/to/redis.sock, "
    "redis+cluster://host:7000 or redis+sentinel://host:26379/mymaster"
)


def redact(url: str) -> str:
    """`url` with its password replaced by ``***`` (for logs and error messages)."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{scheme}{sep}{user + ':***' if ':' in userinfo else user}@{host}"


def scheme_of(url: object) -> str:
    """The lower-cased scheme of a store URL; `ConfigError` for anything not listed above."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"not a store URL: {url!r:.80}; use {VALID_FORMS}")
    scheme = url.split("://", 1)[0].lower()
    if scheme != "memory" and scheme not in REDIS_SCHEMES:
        raise ConfigError(
            f"unknown store URL scheme {scheme!r} in {redact(url)!r}; use {VALID_FORMS}")
    return scheme
