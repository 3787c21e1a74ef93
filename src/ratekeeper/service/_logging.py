"""Structured logs: one JSON object per line on stderr (or plain text for a terminal).

Every record has ``ts`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger`` and ``msg``;
fields passed with ``extra={...}`` (``event``, ``generation``, ``errors``, ...) are added as
they are, and an exception as ``exc``. uvicorn's and grpc's loggers go through the same
handler, so a log pipeline sees one format.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Literal

__all__ = ["JsonFormatter", "setup_logging"]

_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "color_message",
                                                          "taskName"}


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        out: dict[str, Any] = {
            "ts": f"{ts}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for k, v in record.__dict__.items():
            if k not in _STANDARD and not k.startswith("_"):
                out[k] = v
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def setup_logging(fmt: Literal["json", "text"] = "json", level: str = "info") -> None:
    """Send every log record to stderr in `fmt`, at `level` and above."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    lvl = logging.getLevelName(level.upper())
    root.setLevel(lvl if isinstance(lvl, int) else logging.INFO)
    # uvicorn's own lifecycle lines ("Started server process", ...) repeat ours; keep its
    # warnings and errors. Its access log is enabled separately (--access-log).
    if root.level > logging.DEBUG:
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
