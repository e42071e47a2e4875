from __future__ import annotations

import pytest

from services.common.errors import ErrorCode, KafkaError
from services.common.topic_config import (
    TOPIC_CONFIGS,
    effective_config,
    format_value,
    validate_overrides,
)


def test_defaults_match_kafka() -> None:
    cfg = effective_config({})
    assert cfg["retention.ms"] == 604800000
    assert cfg["segment.bytes"] == 1073741824
    assert cfg["index.interval.bytes"] == 4096
    assert cfg["cleanup.policy"] == "delete"
    assert cfg["unclean.leader.election.enable"] is False


def test_overrides_are_typed_and_broker_defaults_apply() -> None:
    cfg = effective_config(
        {"retention.ms": "1000", "cleanup.policy": "compact,delete"}, {"log.segment.bytes": 2048}
    )
    assert cfg["retention.ms"] == 1000
    assert cfg["cleanup.policy"] == ["compact", "delete"]
    assert cfg["segment.bytes"] == 2048
    assert format_value(cfg["cleanup.policy"]) == "compact,delete"


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"no.such.config": "1"}, "Unknown topic config name"),
        ({"retention.ms": "soon"}, "Invalid value soon for configuration retention.ms"),
        ({"segment.bytes": "10"}, "Value must be at least 14"),
        ({"cleanup.policy": "shred"}, "String must be one of"),
        ({"preallocate": "yes"}, "either true or false"),
    ],
)
def test_invalid_overrides(overrides: dict[str, str], fragment: str) -> None:
    with pytest.raises(KafkaError) as exc:
        validate_overrides(overrides)
    assert exc.value.code == ErrorCode.INVALID_CONFIG
    assert fragment in str(exc.value)


def test_every_config_has_a_broker_name() -> None:
    assert all(d.broker_name for d in TOPIC_CONFIGS.values())
