"""Controller settings: Kafka property names, defaults, listener parsing."""

from __future__ import annotations

import pytest

from services.common.settings import ConfigError
from services.controller.settings import ControllerSettings, Listener, parse_listener


def test_defaults_and_flags() -> None:
    s = ControllerSettings.load(
        ["--controller.id", "3", "--num.partitions", "6", "--delete.topic.enable", "false"], env={}
    )
    assert s.controller_id == 3 and s.num_partitions == 6 and s.delete_topic_enable is False
    assert s.default_replication_factor == 1
    assert s.unclean_leader_election_enable is False
    assert s.zookeeper_session_timeout_ms == 6000
    assert s.listener == Listener("127.0.0.1", 0)
    assert s.advertised(4321) == Listener("127.0.0.1", 4321)


def test_env_and_advertised_listener() -> None:
    s = ControllerSettings.load(
        [],
        env={"KAFKAPY_CONTROLLER_ID": "1", "KAFKAPY_ADVERTISED_LISTENERS": "GRPC://ctl-0.svc:9093"},
    )
    assert s.advertised(1234) == Listener("ctl-0.svc", 9093)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--controller.id", "x"],
        ["--controller.id", "1", "--listeners", "PLAINTEXT://h:1"],
        ["--controller.id", "1", "--num.partitions", "0"],
    ],
)
def test_bad_settings(argv: list[str]) -> None:
    with pytest.raises(ConfigError):
        ControllerSettings.load(argv, env={})


def test_parse_listener_forms() -> None:
    assert parse_listener("0.0.0.0:9093") == Listener("0.0.0.0", 9093)
    assert parse_listener("grpc://[::1]:7").bind_target == "[::1]:7"
    with pytest.raises(ConfigError):
        parse_listener("a:1,b:2")
