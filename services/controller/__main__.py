"""``python -m services.controller [--controller.id N] [--zookeeper.connect ...] ...``"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from services.common.logging import configure_logging
from services.common.runtime import freeze_startup_heap, run, stop_event_on_signals
from services.controller.app import ControllerApp
from services.controller.settings import ControllerSettings


async def main(argv: Sequence[str]) -> int:
    settings = ControllerSettings.load(argv)
    configure_logging("controller", settings.controller_id, settings.log_format, settings.log_level)
    stop = stop_event_on_signals()
    app = ControllerApp(settings)
    await app.start()
    freeze_startup_heap()
    await stop.wait()
    await app.stop()
    return 0


def entry() -> None:
    run(lambda: main(sys.argv[1:]))


if __name__ == "__main__":
    entry()
