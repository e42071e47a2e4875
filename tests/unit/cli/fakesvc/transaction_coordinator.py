"""Fake transaction coordinator."""

from tests.unit.cli.fakesvc._base import main

main("transaction_coordinator")
