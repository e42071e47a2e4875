"""Opt-in cProfile of a whole service process, for finding where its CPU goes.

``KAFKAPY_PROFILE_DIR=<dir>`` makes ``services.common.runtime.run`` profile the event loop's
thread and write ``<dir>/<service>-<pid>.prof`` (pstats format) when the process exits. Off by
default: cProfile roughly doubles the CPU cost of Python code."""

from __future__ import annotations

import cProfile
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ENV = "KAFKAPY_PROFILE_DIR"


def _service_name() -> str:
    """``services.gateway`` for ``python -m services.gateway``, else the program's name."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = spec.name if spec is not None else Path(sys.argv[0]).name
    return name.removesuffix(".__main__").rsplit(".", 1)[-1] or "service"


@contextmanager
def profiled(environ: dict[str, str] | None = None) -> Iterator[None]:
    """Profile the body when ``KAFKAPY_PROFILE_DIR`` is set; a no-op otherwise."""
    target = (os.environ if environ is None else environ).get(ENV)
    if not target:
        yield
        return
    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        Path(target).mkdir(parents=True, exist_ok=True)
        profile.dump_stats(Path(target) / f"{_service_name()}-{os.getpid()}.prof")
