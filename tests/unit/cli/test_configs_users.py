"""kafka-configs.sh's users syntax: SCRAM-SHA-256=[iterations=N,password=P],..."""

from __future__ import annotations

import pytest

from services.cli.common import CliError
from services.cli.configs_users import parse_add_config


def test_add_config_parsed_as_kafka_configs_sh() -> None:
    assert parse_add_config(
        "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=a=b]"
    ) == {"SCRAM-SHA-256": ("alice-secret", 8192), "SCRAM-SHA-512": ("a=b", 4096)}


@pytest.mark.parametrize(
    "text",
    [
        "SCRAM-SHA-1=[password=x]",
        "SCRAM-SHA-256=[iterations=x,password=p]",
        "SCRAM-SHA-256=[iterations=4096]",
        "SCRAM-SHA-256=[salt=abc,password=p]",
        "producer_byte_rate=1024",
    ],
)
def test_bad_add_config_is_one_line(text: str) -> None:
    with pytest.raises(CliError) as err:
        parse_add_config(text)
    assert "\n" not in str(err.value)
