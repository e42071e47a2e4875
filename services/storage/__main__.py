"""``python -m services.storage [--broker.id N] [--listeners GRPC://host:port] ...``

Exit codes: 0 after a graceful stop (SIGTERM/SIGINT), 1 when the node refuses to start
(wrong cluster, broker id mismatch, log dir in use, ZooKeeper unreachable...), 2 for a bad
setting.
"""

from __future__ import annotations

import sys

from prometheus_client import REGISTRY

from services.common import internal_tls
from services.common.logging import configure_logging
from services.common.runtime import run, stop_event_on_signals
from services.common.zone import with_discovered_rack
from services.storage.metrics import StorageMetrics
from services.storage.node import run_node
from services.storage.registration import StartupError
from services.storage.settings import StorageSettings, StorageSettingsBase


async def main(argv: list[str] | None = None) -> int:
    settings: StorageSettingsBase = StorageSettings.load(sys.argv[1:] if argv is None else argv)
    log = configure_logging("storage", settings.broker_id, settings.log_format, settings.log_level)
    internal_tls.configure(settings)  # ConfigError (exit 2) on unusable certificates
    for warning in settings.deprecation_warnings():
        log.warning("deprecated setting", warning=warning)
    settings = await with_discovered_rack(settings)
    stop = stop_event_on_signals()
    try:
        return await run_node(settings, stop, StorageMetrics(REGISTRY))
    except StartupError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    except Exception as exc:
        log.exception("storage node failed to start")
        print(f"error: storage node failed to start: {exc!r}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    run(main)
