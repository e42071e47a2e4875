from __future__ import annotations

import pytest

from services.common.settings import ConfigError, ServiceSettings, kafka_prop


class DemoSettings(ServiceSettings):
    num_partitions: int = kafka_prop(1, "num.partitions", ge=1)
    load_factor: float = kafka_prop(0.9, "log.cleaner.io.buffer.load.factor", gt=0, le=1)
    auto_create: bool = kafka_prop(True, "auto.create.topics.enable")


def test_defaults() -> None:
    s = DemoSettings.load([], env={})
    assert s.num_partitions == 1 and s.auto_create is True
    assert s.as_properties()["num.partitions"] == 1


def test_env_then_flags_then_override_precedence() -> None:
    env = {"KAFKAPY_NUM_PARTITIONS": "4", "KAFKAPY_AUTO_CREATE_TOPICS_ENABLE": "false"}
    assert DemoSettings.load([], env=env).num_partitions == 4
    s = DemoSettings.load(["--num.partitions", "6"], env=env)
    assert s.num_partitions == 6 and s.auto_create is False
    s = DemoSettings.load(["--override", "num.partitions=8"], env=env)
    assert s.num_partitions == 8


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--num.partitions", "many"], "invalid setting num.partitions"),
        (["--no.such.setting", "1"], "unknown setting --no.such.setting"),
        (["--override", "bogus=1"], "unknown setting in --override"),
        (
            ["--num.partitions", "0"],
            "invalid setting num.partitions: Input should be greater than or equal to 1",
        ),
        (
            ["--log.cleaner.io.buffer.load.factor", "0"],
            "invalid setting log.cleaner.io.buffer.load.factor: Input should be greater than 0",
        ),
        (
            ["--log.cleaner.io.buffer.load.factor", "1.5"],
            "invalid setting log.cleaner.io.buffer.load.factor: Input should be less than or equal to 1",
        ),
    ],
)
def test_bad_settings_are_one_readable_line(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        DemoSettings.load(argv, env={})
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_bounds_admit_their_edges() -> None:
    s = DemoSettings.load(
        ["--num.partitions", "1", "--log.cleaner.io.buffer.load.factor", "1"], env={}
    )
    assert (s.num_partitions, s.load_factor) == (1, 1.0)
