"""The Python clients' own logs (kafka-python, aiokafka) in the evidence directory.

A writer that stops getting delivery reports is judged from the outside; what the client
itself saw (disconnects, retries, sequence resets, metadata refreshes) is in its log.
``KAFKAPY_CHECKER_CLIENT_LOG_LEVEL`` picks the level (default INFO; DEBUG logs every request).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

CLIENT_LOGGERS = ("kafka", "aiokafka")
_FORMAT = "%(asctime)s.%(msecs)03d %(threadName)s %(name)s %(levelname)s %(message)s"


class ClientLogs:
    """Attach a file handler to the clients' loggers until ``close``."""

    def __init__(self, path: Path) -> None:
        level = os.environ.get("KAFKAPY_CHECKER_CLIENT_LOG_LEVEL", "INFO").upper()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._handler = logging.FileHandler(path)
        self._handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%H:%M:%S"))
        self._handler.setLevel(level)
        self._saved: list[tuple[logging.Logger, int, bool]] = []
        for name in CLIENT_LOGGERS:
            logger = logging.getLogger(name)
            self._saved.append((logger, logger.level, logger.propagate))
            logger.setLevel(self._handler.level)
            logger.propagate = False  # to the file only, not into the test's report
            logger.addHandler(self._handler)

    def close(self) -> None:
        for logger, level, propagate in self._saved:
            logger.removeHandler(self._handler)
            logger.setLevel(level)
            logger.propagate = propagate
        self._handler.close()
