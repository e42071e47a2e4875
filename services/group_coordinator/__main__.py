"""``python -m services.group_coordinator --node.id N [--zookeeper.connect ...] ...``"""

from services.group_coordinator.app import cli

if __name__ == "__main__":
    cli()
