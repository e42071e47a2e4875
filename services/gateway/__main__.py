"""``python -m services.gateway [--node.id N] [--listeners host:port] ...``"""

from services.gateway.app import cli

if __name__ == "__main__":
    cli()
