"""Replay real traffic: read access logs as events on the log's own clock.

    from ratekeeper.replay import read_log
    with read_log("/var/log/nginx/access.log.1.gz", "combined", window=2.0) as events:
        for ev in events:            # LogEvent(t, client, method, path, status, ...)
            ...
        print(events.stats.summary())  # lines, events, malformed by reason, examples

Layout (no module here does I/O but `_logs`):

- `_events`: `LogEvent` (one request) and `ReadStats` (the tally of a read);
- `_time`: log timestamps (``$time_local`` in any zone, ISO-8601, epoch s/ms/us), cached
  per second-string;
- `_formats`: `LogFormat` (an nginx ``log_format`` compiled to one regex; `COMBINED`,
  `COMMON`), `JsonFormat` (JSON Lines, configurable field names), `TraceFormat` (the
  ``ratekeeper simulate`` traces);
- `_order`: `reorder`, time order within a window with a bounded heap;
- `_logs`: sources (paths, gzip by magic bytes, stdin, streams) and `read_log`/`LogReader`.

This package imports only the standard library and ratekeeper's values.
"""

from __future__ import annotations

from ._events import LogEvent, Malformed, ReadStats
from ._formats import (
    COMBINED,
    COMMON,
    NGINX_COMBINED,
    NGINX_COMMON,
    BadLine,
    JsonFormat,
    LineFormat,
    LogFormat,
    TraceFormat,
    unescape,
)
from ._logs import FORMATS, MAX_LINE, LogReader, Source, open_format, read_log
from ._order import LATE_POLICIES, reorder

__all__ = [
    "COMBINED",
    "COMMON",
    "FORMATS",
    "LATE_POLICIES",
    "MAX_LINE",
    "NGINX_COMBINED",
    "NGINX_COMMON",
    "BadLine",
    "JsonFormat",
    "LineFormat",
    "LogEvent",
    "LogFormat",
    "LogReader",
    "Malformed",
    "ReadStats",
    "Source",
    "TraceFormat",
    "open_format",
    "read_log",
    "reorder",
    "unescape",
]
