"""Fake controller."""

from tests.unit.cli.fakesvc._base import main

main("controller")
