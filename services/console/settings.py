"""The console's settings (flags, ``KAFKAPY_*`` env vars)."""

from __future__ import annotations

from services.common.settings import ServiceSettings, kafka_prop


class ConsoleSettings(ServiceSettings):
    bootstrap_servers: str = kafka_prop(
        "127.0.0.1:9092", "bootstrap.servers", "the gateways' Kafka address, host:port[,...]"
    )
    console_host: str = kafka_prop("127.0.0.1", "console.host", "bind address of the console")
    console_port: int = kafka_prop(8080, "console.port", "console HTTP port (0 = any)", ge=0)
    console_read_only: bool = kafka_prop(
        False, "console.read.only", "refuse every change (create, delete, reset, produce)"
    )
    console_client_config: str = kafka_prop(
        "", "console.client.config", "a .properties file of client settings (security, ...)"
    )
    request_timeout_ms: int = kafka_prop(
        10_000, "request.timeout.ms", "how long one admin call may take", ge=100
    )
    console_lag_sample_interval_ms: int = kafka_prop(
        5_000, "console.lag.sample.interval.ms", "how often watched groups' lag is sampled", ge=200
    )
    console_lag_history_points: int = kafka_prop(
        360, "console.lag.history.points", "lag samples kept per group", ge=2
    )
    console_lag_watch_ms: int = kafka_prop(
        600_000,
        "console.lag.watch.ms",
        "a group's lag is sampled for this long after it was last looked at",
        ge=1_000,
    )
    console_lag_max_groups: int = kafka_prop(
        200, "console.lag.max.groups", "at most this many groups are sampled", ge=1
    )
    console_records_max: int = kafka_prop(
        500, "console.records.max", "the largest page of records one request reads", ge=1
    )
