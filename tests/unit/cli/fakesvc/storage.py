"""Fake storage."""

from tests.unit.cli.fakesvc._base import main

main("storage")
