"""Fake group coordinator."""

from tests.unit.cli.fakesvc._base import main

main("group_coordinator")
