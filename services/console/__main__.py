"""``python -m services.console --bootstrap.servers HOST:PORT [--console.port 8080] ...``"""

import services.entry_point  # noqa: F401 - first: see there
from services.console.app import cli

if __name__ == "__main__":
    cli()
