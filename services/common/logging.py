"""structlog set-up: JSON in containers, readable lines on a terminal."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog


def configure_logging(
    service: str, node_id: int | str | None = None, fmt: str = "auto", level: str = "info"
) -> structlog.stdlib.BoundLogger:
    """Configure structlog for this process and return the service's root logger."""
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    lvl = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(
        stream=sys.stderr, level=max(lvl, logging.WARNING), format="%(name)s %(message)s"
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(service=service, node_id=node_id)
    return structlog.get_logger(service)


def get_logger(name: str | None = None) -> Any:
    return structlog.get_logger(name)
