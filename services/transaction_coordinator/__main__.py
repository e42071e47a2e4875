"""``python -m services.transaction_coordinator --node.id N [--zookeeper.connect ...] ...``"""

import services.entry_point  # noqa: F401 - first: see there
from services.transaction_coordinator.app import cli

if __name__ == "__main__":
    cli()
