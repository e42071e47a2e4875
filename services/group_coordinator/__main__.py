"""``python -m services.group_coordinator --node.id N [--zookeeper.connect ...] ...``"""

import services.entry_point  # noqa: F401 - first: see there
from services.group_coordinator.app import cli

if __name__ == "__main__":
    cli()
