"""``kafka-py configs --entity-type topics|brokers`` (kafka-configs.sh) against the session
cluster: topic and broker overrides round-trip through the real CLI process, with the sources
and synonyms shown as Kafka's tool shows them; bad input is one line and a non-zero exit.

The broker config changed here (``log.cleaner.backoff.ms``) only paces the log cleaner; it is
deleted again at the end so the shared cluster is left as it was.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from kafka_support import TopicFactory, cli_ok, one_line

from services.cli.local_cluster import LocalCluster
from services.cli.main import main

BACKOFF = "log.cleaner.backoff.ms"


class Configs:
    """``kafka-py configs`` run in this process (``services.cli.main.main``: the same parsing,
    requests and printing as the console script, without a Python start-up per call); the
    first alter and describe of each test also run as their own process."""

    def __init__(self, bootstrap: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.bootstrap = bootstrap
        self.capsys = capsys

    def _run(self, args: tuple[str, ...]) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main(["configs", "--bootstrap-server", self.bootstrap, *args])
        out, err = self.capsys.readouterr()
        assert "Traceback" not in err
        return code, out, err

    def run_quietly(self, *args: str) -> None:
        self._run(args)

    def ok(self, *args: str) -> str:
        code, out, err = self._run(args)
        assert code == 0, err
        return out

    def fails(self, *args: str) -> str:
        code, out, err = self._run(args)
        assert code != 0, out
        return one_line(err)

    def process(self, *args: str) -> str:
        return cli_ok("configs", "--bootstrap-server", self.bootstrap, *args)


def test_topic_overrides_round_trip_with_their_sources(
    cluster: LocalCluster,
    topic: TopicFactory,
    admin: AdminClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli = Configs(cluster.bootstrap, capsys)
    t = topic(partitions=1)
    name = ("--entity-type", "topics", "--entity-name", t)
    assert cli.ok(*name, "--describe") == f"Dynamic configs for topic {t} are:\n"

    out = cli.process(
        *name,
        "--alter",
        "--add-config",
        "retention.ms=1000,leader.replication.throttled.replicas=[0:0,0:1],cleanup.policy=compact",
    )
    assert out == f"Completed updating config for topic {t}.\n"
    lines = cli.process(*name, "--describe").splitlines()
    assert lines[0] == f"Dynamic configs for topic {t} are:"
    assert lines[1:] == [
        "  cleanup.policy=compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy"
        "=compact, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  leader.replication.throttled.replicas=0:0,0:1 sensitive=false synonyms="
        "{DYNAMIC_TOPIC_CONFIG:leader.replication.throttled.replicas=0:0,0:1}",
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, "
        "DEFAULT_CONFIG:log.retention.ms=604800000}",
    ]
    # what a Kafka client reads back agrees with what the tool printed
    res = ConfigResource(ResourceType.TOPIC, t)
    entries = admin.describe_configs([res], request_timeout=30)[res].result(timeout=30)
    assert entries["retention.ms"].value == "1000"
    assert entries["leader.replication.throttled.replicas"].value == "0:0,0:1"

    everything = cli.ok(*name, "--describe", "--all").splitlines()
    assert everything[0] == f"All configs for topic {t} are:"
    assert any(line.startswith("  segment.bytes=") for line in everything)
    assert everything[1:] == sorted(everything[1:])

    out = cli.ok(*name, "--alter", "--delete-config", "retention.ms,cleanup.policy")
    assert out == f"Completed updating config for topic {t}.\n"
    doc = json.loads(cli.ok(*name, "--describe", "--output", "json"))
    assert [c["name"] for c in doc[0]["configs"]] == ["leader.replication.throttled.replicas"]
    assert doc[0]["entity_name"] == t
    assert doc[0]["configs"][0]["synonyms"][0] == {
        "name": "leader.replication.throttled.replicas",
        "value": "0:0,0:1",
        "source": "DYNAMIC_TOPIC_CONFIG",
    }

    # errors: one readable line, non-zero exit, nothing changed
    assert cli.fails(*name, "--alter", "--delete-config", "retention.ms") == (
        "error: Invalid config(s): retention.ms"
    )
    assert "INVALID_CONFIG" in cli.fails(*name, "--alter", "--add-config", "retention.ms=abc")
    assert "UNKNOWN_TOPIC_OR_PARTITION" in cli.fails(
        "--entity-type", "topics", "--entity-name", t + "-nope", "--describe"
    )
    assert "format" in cli.fails(*name, "--alter", "--add-config", "retention.ms")
    assert "not supported for topics" in cli.fails(
        "--entity-type", "topics", "--entity-default", "--describe"
    )


def test_broker_and_cluster_default_overrides_round_trip(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Configs(cluster.bootstrap, capsys)
    broker = ("--entity-type", "brokers", "--entity-name", "0")
    default = ("--entity-type", "brokers", "--entity-default")
    try:
        out = cli.ok(*default, "--alter", "--add-config", f"{BACKOFF}=20000")
        assert out == "Completed updating default config for brokers in the cluster.\n"
        out = cli.ok(*broker, "--alter", "--add-config", f"{BACKOFF}=30000")
        assert out == "Completed updating config for broker 0.\n"

        assert cli.process(*broker, "--describe").splitlines() == [
            "Dynamic configs for broker 0 are:",
            f"  {BACKOFF}=30000 sensitive=false synonyms={{DYNAMIC_BROKER_CONFIG:{BACKOFF}=30000,"
            f" DYNAMIC_DEFAULT_BROKER_CONFIG:{BACKOFF}=20000, DEFAULT_CONFIG:{BACKOFF}=15000}}",
        ]
        assert cli.ok(*default, "--describe").splitlines() == [
            "Default configs for brokers in the cluster are:",
            f"  {BACKOFF}=20000 sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:"
            f"{BACKOFF}=20000, DEFAULT_CONFIG:{BACKOFF}=15000}}",
        ]
        # no name: every broker, then the default, as kafka-configs.sh
        every = cli.ok("--entity-type", "brokers", "--describe")
        assert "Dynamic configs for broker 0 are:" in every
        assert every.rstrip().splitlines()[-2] == "Default configs for brokers in the cluster are:"
        all_of_0 = cli.ok(*broker, "--describe", "--all")
        assert all_of_0.startswith("All configs for broker 0 are:\n")
        assert f"  {BACKOFF}=30000 sensitive=false" in all_of_0

        cli.ok(*broker, "--alter", "--delete-config", BACKOFF)
        doc = json.loads(cli.ok(*broker, "--describe", "--all", "--output", "json"))
        (entry,) = [c for c in doc[0]["configs"] if c["name"] == BACKOFF]
        assert (entry["value"], entry["source"]) == ("20000", "DYNAMIC_DEFAULT_BROKER_CONFIG")

        assert cli.fails(*broker, "--alter", "--add-config", "broker.id=7") == (
            "error: INVALID_REQUEST: Invalid config value for resource ConfigResource(type=BROKER, "
            "name='0'): Cannot update these configs dynamically: Set(broker.id)"
        )
        assert "valid integer broker id" in cli.fails(
            "--entity-type", "brokers", "--entity-name", "b0", "--describe"
        )
        assert "--all goes with --describe" in cli.fails(
            *broker, "--alter", "--all", "--add-config", f"{BACKOFF}=1"
        )
    finally:
        for args in (broker, default):
            cli.run_quietly(*args, "--alter", "--delete-config", BACKOFF)
    assert cli.ok(*default, "--describe") == ("Default configs for brokers in the cluster are:\n")
