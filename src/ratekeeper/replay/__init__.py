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
- `_logs`: sources (paths, gzip by magic bytes, stdin, streams) and `read_log`/`LogReader`;
- `_replay`: `replay`, each event decided through a policies file as the middleware would;
- `_compare`: `compare`, candidate policies side by side in one pass (a `Comparison`,
  ``to_json()``);
- `_recommend`: `recommend`, rate and burst per limit for a target share of clients;
- `_report`: `report_html` (one self-contained HTML file), `write_svgs`/`write_pngs` (the
  charts as files; PNG needs the ``plot`` extra);
- `_cli`: ``ratekeeper replay`` and ``ratekeeper recommend`` (the only other I/O).

This package imports only the standard library and ratekeeper's values (and matplotlib, for
`write_pngs` only, when it is called).
"""

from __future__ import annotations

from ._compare import (
    Candidate,
    Comparison,
    DelaySketch,
    PolicyResult,
    Series,
    SpaceSaving,
    TopKey,
    compare,
    with_overrides,
)
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
from ._recommend import CurvePoint, LimitRecommendation, Recommendation, recommend
from ._report import Chart, PlotExtraMissing, charts, report_html, write_pngs, write_svgs

__all__ = [
    "COMBINED",
    "COMMON",
    "FORMATS",
    "LATE_POLICIES",
    "MAX_LINE",
    "NGINX_COMBINED",
    "NGINX_COMMON",
    "BadLine",
    "Candidate",
    "Chart",
    "Comparison",
    "CurvePoint",
    "DelaySketch",
    "JsonFormat",
    "LimitRecommendation",
    "LineFormat",
    "LogEvent",
    "LogFormat",
    "LogReader",
    "Malformed",
    "PlotExtraMissing",
    "PolicyResult",
    "ReadStats",
    "Recommendation",
    "Series",
    "Source",
    "SpaceSaving",
    "TopKey",
    "TraceFormat",
    "charts",
    "compare",
    "open_format",
    "read_log",
    "recommend",
    "reorder",
    "report_html",
    "unescape",
    "with_overrides",
    "write_pngs",
    "write_svgs",
]
