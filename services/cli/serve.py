"""``kafka-py <service> [settings...]``: run one service in this process (the image's commands).

Each service keeps its own flag parser (``--broker.id 0``, ``--override k=v``) and environment
(``KAFKAPY_*``): the rest of the command line is handed over untouched, exactly as
``python -m services.<module>`` would receive it.
"""

from __future__ import annotations

import runpy
import sys

from services.cli.common import CliError

# command -> module run as __main__
SERVICES: dict[str, str] = {
    "storage": "services.storage",
    "gateway": "services.gateway",
    "controller": "services.controller",
    "group-coordinator": "services.group_coordinator",
    "transaction-coordinator": "services.transaction_coordinator",
    "console": "services.console",
}


def run_service(command: str, argv: list[str]) -> int:
    """Run ``command``'s module as ``__main__`` with ``argv``; returns its exit status."""
    module = SERVICES[command]
    try:
        __import__(module)
    except ImportError as exc:
        raise CliError(f"{command} is not available in this build: {exc}") from None
    sys.argv = [f"kafka-py {command}", *argv]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0
