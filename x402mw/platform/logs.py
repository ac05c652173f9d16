"""Structured logs: one JSON object per line, each with the id of the request it was written for.

``x402mw platform serve --log-format json`` (or ``X402MW_LOG_FORMAT=json``) gives::

    {"time": "2026-11-24T19:50:03.114Z", "level": "INFO", "logger": "uvicorn.access",
     "message": "127.0.0.1:50412 - \\"GET /healthz HTTP/1.1\\" 200", "requestId": "req_5c0e...",
     "client": "127.0.0.1:50412", "method": "GET", "path": "/healthz", "status": 200}

``requestId`` is the ``Request-Id`` header of the answer and the ``requestId`` of error bodies, so a
support request quoting it leads to the lines of that request. Access lines add the client, method,
path and status as fields; an error adds ``exception`` (the traceback).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from x402mw.platform.request_ids import current_request_id

LOG_FORMATS = ("text", "json")

_LEVELS = {"critical", "error", "warning", "info", "debug", "trace"}


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON: time (UTC, milliseconds), level, logger, message, the request id
    while a request is being served, the fields of a uvicorn access line, and any exception."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = current_request_id()
        if request_id:
            line["requestId"] = request_id
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, _version, status = record.args
            line |= {"client": client, "method": method, "path": path, "status": status}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=False, default=str)


def log_config(log_format: str, level: str = "info") -> dict[str, Any] | None:
    """The ``logging.config.dictConfig`` of a platform process, to give uvicorn as ``log_config``:
    ``None`` for ``text`` (uvicorn's own format), JSON lines on stderr for uvicorn's and x402mw's
    loggers for ``json``. ``ValueError`` for another format or level."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {log_format!r}")
    if level.lower() not in _LEVELS:
        raise ValueError(f"log level must be one of {', '.join(sorted(_LEVELS))}, not {level!r}")
    if log_format == "text":
        return None
    level = "DEBUG" if level.lower() == "trace" else level.upper()
    logger = {"handlers": ["json"], "level": level, "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"json": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
        "loggers": {"uvicorn": logger, "uvicorn.error": logger, "uvicorn.access": logger, "x402mw": logger},
    }
