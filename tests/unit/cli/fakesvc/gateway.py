"""Fake gateway."""

from tests.unit.cli.fakesvc._base import main

main("gateway")
