"""``python -m services.controller [--controller.id N] [--zookeeper.connect ...] ...``"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from services.common import internal_tls
from services.common.logging import configure_logging
from services.common.node_ids import with_generated_id
from services.common.runtime import run, serve_until_signalled
from services.controller.app import ControllerApp
from services.controller.settings import ControllerSettings


async def main(argv: Sequence[str]) -> int:
    settings = ControllerSettings.load(argv)
    configure_logging("controller", settings.controller_id, settings.log_format, settings.log_level)
    internal_tls.configure(settings)  # ConfigError (exit 2) on unusable certificates
    settings = await with_generated_id(settings, "controller_id")
    return await serve_until_signalled(ControllerApp(settings))


def entry() -> None:
    run(lambda: main(sys.argv[1:]))


if __name__ == "__main__":
    entry()
