"""``python -m services.gateway [--node.id N] [--listeners host:port] ...``"""

import services.entry_point  # noqa: F401 - first: see there
from services.gateway.app import cli

if __name__ == "__main__":
    cli()
