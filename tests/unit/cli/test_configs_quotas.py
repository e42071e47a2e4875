"""kafka-configs.sh's quota syntax: entity pairs, k=v lists, Java's double format."""

from __future__ import annotations

import argparse

import pytest

from services.cli import configs
from services.cli.common import CliError
from services.cli.configs_quotas import completed_line, entities, java_double, split_configs


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    configs.add_parser(sub, lambda p, _nested: None)
    return parser.parse_args(["configs", *argv])


def test_entity_pairs_in_order() -> None:
    args = _parse(
        "--entity-type", "users", "--entity-name", "alice",
        "--entity-type", "clients", "--entity-default", "--describe",
    )  # fmt: skip
    assert args.entities == [("users", "alice"), ("clients", "")]
    assert (args.entity_type, args.entity_name) == ("users", "alice")
    assert entities(args) == [("user", "alice"), ("client-id", "")]
    assert completed_line(args) == "Completed updating config for user alice."
    args = _parse("--entity-type", "clients", "--entity-default", "--alter")
    assert completed_line(args) == "Completed updating default config for clients in the cluster."
    assert entities(_parse("--entity-type", "clients", "--describe")) == [("client-id", None)]


def test_split_configs_keeps_bracketed_lists() -> None:
    assert split_configs("producer_byte_rate=1024, consumer_byte_rate=2048") == [
        ("producer_byte_rate", "1024"),
        ("consumer_byte_rate", "2048"),
    ]
    assert split_configs("SCRAM-SHA-256=[iterations=8192,password=p],request_percentage=5") == [
        ("SCRAM-SHA-256", "[iterations=8192,password=p]"),
        ("request_percentage", "5"),
    ]
    with pytest.raises(CliError):
        split_configs("producer_byte_rate")


def test_values_printed_as_java_doubles() -> None:
    assert java_double(1048576.0) == "1048576.0"
    assert java_double(12.5) == "12.5"
    assert java_double(10485760.0) == "1.048576E7"
    assert java_double(2e7) == "2.0E7"
    assert java_double(0.0001) == "1.0E-4"
