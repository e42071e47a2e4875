"""``python -m services.transaction_coordinator --node.id N [--zookeeper.connect ...] ...``"""

from services.transaction_coordinator.app import cli

if __name__ == "__main__":
    cli()
