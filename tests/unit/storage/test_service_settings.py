"""Storage node settings: Kafka property names, derived topic defaults, listener parsing."""

from __future__ import annotations

import pytest

from services.common.settings import ConfigError
from services.common.topic_config import NO_SERVER_DEFAULT, TOPIC_CONFIGS, effective_config
from services.storage.settings import StorageSettings, parse_listener


def load(*argv: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return StorageSettings.load(list(argv), env=env or {})


def test_broker_id_is_required() -> None:
    with pytest.raises(ConfigError, match="broker.id"):
        load()


def test_every_topic_config_has_its_broker_default_flag() -> None:
    props = StorageSettings.properties()
    with_default = [d for d in TOPIC_CONFIGS.values() if d.name not in NO_SERVER_DEFAULT]
    for defn in with_default:
        assert defn.broker_name in props
    s = load("--broker.id", "1")
    defaults = s.broker_topic_defaults()
    assert set(defaults) == {d.broker_name for d in with_default}
    assert defaults["log.segment.bytes"] == 1073741824
    assert defaults["log.retention.ms"] == 168 * 3_600_000
    assert defaults["log.cleanup.policy"] == ["delete"]


def test_topic_defaults_are_typed_and_feed_effective_config() -> None:
    s = load(
        "--broker.id",
        "1",
        "--log.segment.bytes",
        "4096",
        "--min.insync.replicas",
        "2",
        "--log.message.timestamp.type",
        "LogAppendTime",
        "--log.cleanup.policy",
        "compact",
    )
    cfg = effective_config({"retention.ms": "1000"}, s.broker_topic_defaults())
    assert cfg["segment.bytes"] == 4096
    assert cfg["min.insync.replicas"] == 2
    assert cfg["message.timestamp.type"] == "LogAppendTime"
    assert cfg["cleanup.policy"] == ["compact"]
    assert cfg["retention.ms"] == 1000  # topic override wins


def test_retention_precedence_ms_minutes_hours() -> None:
    assert (
        load("--broker.id", "1", "--log.retention.hours", "2").broker_topic_defaults()[
            "log.retention.ms"
        ]
        == 7_200_000
    )
    assert (
        load(
            "--broker.id", "1", "--log.retention.hours", "2", "--log.retention.minutes", "3"
        ).broker_topic_defaults()["log.retention.ms"]
        == 180_000
    )
    s = load(
        "--broker.id", "1", "--log.retention.minutes", "3", env={"KAFKAPY_LOG_RETENTION_MS": "-1"}
    )
    assert s.broker_topic_defaults()["log.retention.ms"] == -1
    assert (
        load("--broker.id", "1", "--log.roll.hours", "1").broker_topic_defaults()["log.roll.ms"]
        == 3_600_000
    )


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--log.segment.bytes", "ten", "log.segment.bytes"),
        ("--log.segment.bytes", "10", "log.segment.bytes"),  # below segment.bytes minimum 14
        ("--log.message.timestamp.type", "Wall", "log.message.timestamp.type"),
        ("--listeners", "HTTP://x:1", "listeners"),
        ("--listeners", "x:99999", "listeners"),
        ("--log.retention.check.interval.ms", "0", "log.retention.check.interval.ms"),
    ],
)
def test_bad_values_are_one_line_config_errors(flag: str, value: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load("--broker.id", "1", flag, value)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_listeners_and_advertised() -> None:
    assert parse_listener("GRPC://10.0.0.1:9093", "listeners").port == 9093
    assert parse_listener("[::1]:5", "listeners").host == "::1"
    assert parse_listener("[::1]:5", "listeners").bind_target == "[::1]:5"
    s = load("--broker.id", "1", "--listeners", "127.0.0.1:0")
    assert s.advertised(4567).port == 4567 and s.advertised(4567).host == "127.0.0.1"
    s = load(
        "--broker.id",
        "1",
        "--listeners",
        "0.0.0.0:0",
        "--advertised.listeners",
        "GRPC://storage-1.storage:9093",
    )
    adv = s.advertised(4567)
    assert (adv.host, adv.port) == ("storage-1.storage", 9093)


def test_log_dirs_first_is_used() -> None:
    s = load("--broker.id", "1", "--log.dirs", "/a/b, /c/d")
    assert str(s.log_dir) == "/a/b"
    assert s.all_log_dirs == ["/a/b", "/c/d"]


def test_log_message_format_version_is_accepted_with_a_warning() -> None:
    s = load("--broker.id", "1", "--log.message.format.version", "2.8")
    assert s.broker_topic_defaults()["log.message.format.version"] == "2.8"
    (warning,) = s.deprecation_warnings()
    assert "log.message.format.version is deprecated" in warning
    assert load("--broker.id", "1").deprecation_warnings() == []
    with pytest.raises(ConfigError, match="log.message.format.version"):
        load("--broker.id", "1", "--log.message.format.version", "newest")
