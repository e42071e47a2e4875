from __future__ import annotations

import pytest

from services.common.errors import ErrorCode, KafkaError
from services.common.topic_config import (
    NO_SERVER_DEFAULT,
    TOPIC_CONFIGS,
    deprecation_warnings,
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
    """But the throttled-replica lists, which Kafka gives no broker-wide default either."""
    assert NO_SERVER_DEFAULT == {
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    }
    assert all(d.broker_name for d in TOPIC_CONFIGS.values() if d.name not in NO_SERVER_DEFAULT)


@pytest.mark.parametrize("value", ["*", "", "0:1", "0:1,1:2, 3:0", " * "])
def test_throttled_replicas_accepted(value: str) -> None:
    name = "leader.replication.throttled.replicas"
    assert validate_overrides({name: value}) == {
        name: [i.strip() for i in value.split(",") if i.strip()]
    }


@pytest.mark.parametrize("value", ["0", "a:1", "0:1,*", "0-1", "0:1:2"])
def test_throttled_replicas_refused(value: str) -> None:
    with pytest.raises(KafkaError) as exc:
        validate_overrides({"follower.replication.throttled.replicas": value})
    assert exc.value.code == ErrorCode.INVALID_CONFIG
    assert "must be the literal '*' or a list of replicas" in str(exc.value)


def test_message_format_version_is_accepted_deprecated() -> None:
    """Kafka 3.x accepts it (any MetadataVersion string) and ignores it for magic 2."""
    for value in ("0.10.0-IV1", "2.8", "3.0-IV1", "0.8.2", "3.7"):
        assert validate_overrides({"message.format.version": value}) == {
            "message.format.version": value
        }
    for value in ("latest", "3", "3.0-IV", ""):
        with pytest.raises(KafkaError) as e:
            validate_overrides({"message.format.version": value})
        assert e.value.code == ErrorCode.INVALID_CONFIG
        assert f"Version `{value}` is not a valid version" in e.value.message
    assert effective_config({})["message.format.version"] == "3.0-IV1"
    (warning,) = deprecation_warnings(["retention.ms", "message.format.version"])
    assert warning.startswith("message.format.version is deprecated")
    assert deprecation_warnings(["log.message.format.version"], broker=True)
    assert deprecation_warnings(["message.format.version"], broker=True) == []
