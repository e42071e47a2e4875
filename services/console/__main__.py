"""``python -m services.console --bootstrap.servers HOST:PORT [--console.port 8080] ...``"""

from services.console.app import cli

if __name__ == "__main__":
    cli()
