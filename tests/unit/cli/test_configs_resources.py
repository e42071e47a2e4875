"""``--add-config`` / ``--delete-config`` parsing of ``configs --entity-type topics|brokers``,
as kafka-configs.sh parses them (the round trip itself: tests/integration/
test_cli_configs_resources.py)."""

from __future__ import annotations

import pytest

from services.cli.common import CliError
from services.cli.configs_resources import parse_add_config, parse_delete_config


def test_square_brackets_hold_a_list_value() -> None:
    assert parse_add_config("retention.ms=1000, k2=[a,b] ,x = y") == {
        "retention.ms": "1000",
        "k2": "a,b",
        "x": "y",
    }
    assert parse_add_config("leader.replication.throttled.replicas=[0:1,1:2]") == {
        "leader.replication.throttled.replicas": "0:1,1:2"
    }


@pytest.mark.parametrize("text", ["retention.ms", "=1", "a=1,b", "a=1=2"])
def test_an_item_without_one_key_and_value_is_refused(text: str) -> None:
    with pytest.raises(CliError, match='format "key=val"'):
        parse_add_config(text)


def test_delete_config_names() -> None:
    assert parse_delete_config(" a, b ,,c") == ["a", "b", "c"]
