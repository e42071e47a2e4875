"""Dynamic broker configs (KIP-226): what can change without a restart, and where it comes from.

A broker config may be set at four levels, highest first (Kafka's ``DynamicBrokerConfig``):
``/config/brokers/<id>`` (DYNAMIC_BROKER_CONFIG), ``/config/brokers/<default>``
(DYNAMIC_DEFAULT_BROKER_CONFIG), the service's own settings when given explicitly
(STATIC_BROKER_CONFIG) and the built-in default (DEFAULT_CONFIG). This module holds the table
of dynamic configs (type, default, which kafka-py service applies them), validates a new set as
Kafka does and resolves a value and its source from the layers (what ZooKeeper holds is kept
by ``services.common.broker_config_store``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.topic_config import (
    LONG_MAX,
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    format_value,
    parse_value,
)

log = get_logger("broker_config")

DEFAULT_ENTITY = "<default>"  # Kafka's ConfigEntityName.Default
STORAGE = "storage"
GATEWAY = "gateway"
CONTROLLER = "controller"
INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class BrokerConfigDef:
    name: str
    default: Any
    type: ConfigType
    doc: str
    services: frozenset[str]  # the kafka-py services that apply it
    valid: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    pattern: str | None = None  # a STRING value must match it (re.fullmatch)


# Broker-level topic defaults the active controller applies (leader elections).
CONTROLLER_APPLIED = frozenset({"unclean.leader.election.enable"})


def _topic_defaults() -> list[BrokerConfigDef]:
    """Kafka's DynamicLogConfig: the broker-level default of every topic config. Storage nodes
    apply them; the gateway also checks batch sizes against message.max.bytes; the active
    controller reads the cluster-wide unclean.leader.election.enable."""
    out = []
    for t in TOPIC_CONFIGS.values():
        if not t.broker_name:
            continue
        if t.broker_name in CONTROLLER_APPLIED:
            services = {CONTROLLER}
        elif t.broker_name == "message.max.bytes":
            services = {STORAGE, GATEWAY}
        else:
            services = {STORAGE}
        out.append(
            BrokerConfigDef(
                t.broker_name,
                t.default,
                t.type,
                f"default for topic config {t.name}: {t.doc}",
                frozenset(services),
                t.valid,
                t.minimum,
                t.maximum,
                t.pattern,
            )
        )
    return out


_S, _G = frozenset({STORAGE}), frozenset({GATEWAY})
DYNAMIC_BROKER_CONFIGS: dict[str, BrokerConfigDef] = {
    d.name: d
    for d in [
        *_topic_defaults(),
        # Kafka's LogCleaner.ReconfigurableConfigs
        BrokerConfigDef(
            "log.cleaner.threads",
            1,
            ConfigType.INT,
            "cleaner threads (kafka-py runs one)",
            _S,
            minimum=1,
            maximum=1,
        ),
        BrokerConfigDef(
            "log.cleaner.io.max.bytes.per.second",
            1.7976931348623157e308,
            ConfigType.DOUBLE,
            "bytes the cleaner may read and write per second",
            _S,
            minimum=1,
        ),
        BrokerConfigDef(
            "log.cleaner.dedupe.buffer.size",
            134217728,
            ConfigType.LONG,
            "memory of a cleaning's offset map",
            _S,
            minimum=1,
        ),
        BrokerConfigDef(
            "log.cleaner.io.buffer.size",
            524288,
            ConfigType.INT,
            "the cleaner's I/O buffers",
            _S,
            minimum=1,
        ),
        BrokerConfigDef(
            "log.cleaner.io.buffer.load.factor",
            0.9,
            ConfigType.DOUBLE,
            "share of the offset map that may be filled",
            _S,
            minimum=0.01,
            maximum=1,
        ),
        BrokerConfigDef(
            "log.cleaner.backoff.ms",
            15000,
            ConfigType.LONG,
            "pause of the cleaner when no log needs cleaning",
            _S,
            minimum=1,
        ),
        # Kafka's DynamicConnectionQuota (SocketServer.ReconfigurableConfigs)
        BrokerConfigDef(
            "max.connections",
            INT_MAX,
            ConfigType.INT,
            "client connections a gateway keeps open; more are closed right after accept",
            _G,
            minimum=0,
        ),
        BrokerConfigDef(
            "max.connections.per.ip",
            INT_MAX,
            ConfigType.INT,
            "connections a gateway accepts from one IP address",
            _G,
            minimum=0,
        ),
        BrokerConfigDef(
            "max.connections.per.ip.overrides",
            "",
            ConfigType.STRING,
            "per-IP or hostname limits overriding max.connections.per.ip, e.g. 'host1:50,10.0.0.2:5'",
            _G,
        ),
        # Kafka's DynamicConfig.Broker (quota managers): the replication throttles of the
        # replicas topics list in *.replication.throttled.replicas (storage/replication/quota.py).
        BrokerConfigDef(
            "leader.replication.throttled.rate",
            LONG_MAX,
            ConfigType.LONG,
            "bytes/s a leader may send for throttled replicas",
            _S,
            minimum=0,
        ),
        BrokerConfigDef(
            "follower.replication.throttled.rate",
            LONG_MAX,
            ConfigType.LONG,
            "bytes/s a follower may fetch for throttled replicas",
            _S,
            minimum=0,
        ),
    ]
}

# Broker properties kafka-py knows that only change with a restart (Kafka's "read-only" update
# mode, plus the configs Kafka updates dynamically that kafka-py does not: thread pools,
# listeners, SSL). tests/unit/test_broker_config.py checks every service setting is listed
# here or above.
READ_ONLY_BROKER_CONFIGS: frozenset[str] = frozenset(
    {
        "broker.id",
        "node.id",
        "broker.rack",
        "listeners",
        "advertised.listeners",
        "listener.security.protocol.map",
        "log.dir",
        "log.dirs",
        "zookeeper.connect",
        "zookeeper.session.timeout.ms",
        "zookeeper.connection.timeout.ms",
        "zookeeper.set.acl",
        "zookeeper.digest.auth.file",
        "zookeeper.ssl.client.enable",
        "zookeeper.clientCnxnSocket",
        "zookeeper.ssl.keystore.location",
        "zookeeper.ssl.keystore.password",
        "zookeeper.ssl.keystore.type",
        "zookeeper.ssl.truststore.location",
        "zookeeper.ssl.truststore.password",
        "zookeeper.ssl.truststore.type",
        "zookeeper.ssl.endpoint.identification.algorithm",
        "internal.ssl.enabled",
        "internal.ssl.keystore.location",
        "internal.ssl.key.location",
        "internal.ssl.truststore.location",
        "internal.ssl.reload.check.interval.ms",
        "log.retention.hours",
        "log.retention.minutes",
        "log.roll.hours",
        "log.roll.jitter.hours",
        "log.retention.check.interval.ms",
        "log.flush.scheduler.interval.ms",
        "log.flush.offset.checkpoint.interval.ms",
        "log.flush.start.offset.checkpoint.interval.ms",
        "log.recovery.flush.interval.ms",  # kafka-py only (decision D15)
        "log.cleaner.enable",
        "replica.high.watermark.checkpoint.interval.ms",
        "replica.lag.time.max.ms",
        "replica.fetch.wait.max.ms",
        "replica.fetch.min.bytes",
        "replica.fetch.max.bytes",
        "replica.fetch.response.max.bytes",
        "replica.fetch.backoff.ms",
        "replica.socket.timeout.ms",
        "socket.request.max.bytes",
        "connections.max.idle.ms",
        "request.timeout.ms",
        "auto.create.topics.enable",
        "num.partitions",
        "default.replication.factor",
        "delete.topic.enable",
        "auto.leader.rebalance.enable",
        "leader.imbalance.check.interval.seconds",
        "leader.imbalance.per.broker.percentage",
        "offsets.topic.replication.factor",
        "offsets.topic.num.partitions",
        "controlled.shutdown.enable",
        "controlled.shutdown.max.retries",
        "controlled.shutdown.retry.backoff.ms",
        "controller.socket.timeout.ms",
        "num.io.threads",
        "num.network.threads",
        "num.replica.fetchers",
        "num.recovery.threads.per.data.dir",
        "background.threads",
        "metric.reporters",
        "producer.id.expiration.ms",
        "max.connection.creation.rate",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keystore.type",
        "ssl.truststore.type",
        "ssl.client.auth",
        "ssl.principal.mapping.rules",
        "sasl.enabled.mechanisms",
        "connections.max.reauth.ms",
        "connection.failed.authentication.delay.ms",
        "listener.name.*",  # per-listener settings (flags or KAFKAPY_LISTENER_NAME_* env)
        "authorizer.class.name",
        "super.users",
        "allow.everyone.if.no.acl.found",
        "quota.window.num",
        "quota.window.size.seconds",
        "admin.host",
        "admin.port",
        "log.format",
        "log.level",
        "shutdown.grace.ms",
    }
)


def entity_name(resource_name: str) -> str:
    """The ``/config/brokers`` child of a BROKER resource name ("" = the cluster default)."""
    return resource_name or DEFAULT_ENTITY


def _resource(resource_name: str) -> str:
    return f"ConfigResource(type=BROKER, name='{resource_name}')"


def _scala_set(names: Iterable[str]) -> str:
    return "Set(" + ", ".join(sorted(names)) + ")"


def parse_ip_overrides(raw: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` pairs separated by commas."""
    out: dict[str, int] = {}
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host:
            raise ValueError(f"{item!r} is not host:count")
        try:
            n = int(count.strip())
        except ValueError:
            raise ValueError(f"{count.strip()!r} is not a number in {item!r}") from None
        if n < 0:
            raise ValueError(f"negative connection limit in {item!r}")
        out[host] = n
    return out


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def validate_broker_configs(resource_name: str, configs: Mapping[str, str]) -> dict[str, Any]:
    """Validate the whole new set of ``/config/brokers/<entity>``; typed values.

    Refused as Kafka's ZooKeeper-mode AdminManager refuses them: INVALID_REQUEST with
    ``Invalid config value for resource ConfigResource(type=BROKER, name='0'): ...``.
    """

    def bad(why: str) -> KafkaError:
        return KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Invalid config value for resource {_resource(resource_name)}: {why}",
        )

    read_only = [n for n in configs if n not in DYNAMIC_BROKER_CONFIGS]
    known = [n for n in read_only if n in READ_ONLY_BROKER_CONFIGS or n.startswith("listener.")]
    if known:
        raise bad(f"Cannot update these configs dynamically: {_scala_set(known)}")
    if read_only:
        raise bad(f"Unknown broker configs: {_scala_set(read_only)}")
    typed: dict[str, Any] = {}
    for name, raw in configs.items():
        if raw is None:
            raise bad(f"Null value not supported for : {name}")
        try:
            typed[name] = parse_value(DYNAMIC_BROKER_CONFIGS[name], raw)
        except KafkaError as exc:
            raise bad(exc.message or str(exc)) from None
    if "max.connections.per.ip.overrides" in typed:
        try:
            overrides = parse_ip_overrides(typed["max.connections.per.ip.overrides"])
        except ValueError as exc:
            raise bad(
                f"Invalid value {configs['max.connections.per.ip.overrides']} for configuration "
                f"max.connections.per.ip.overrides: {exc}"
            ) from None
    else:
        overrides = {}
    if typed.get("max.connections.per.ip") == 0 and not overrides:
        raise bad(
            "max.connections.per.ip can be set to zero only if "
            "max.connections.per.ip.overrides property is set."
        )
    return typed


def typed_layer(entity: str, raw: Mapping[str, str]) -> dict[str, Any]:
    """The dynamic configs of one layer, typed; names and values a service cannot use (written
    by another tool straight into ZooKeeper) are logged and skipped."""
    out: dict[str, Any] = {}
    for name, value in raw.items():
        defn = DYNAMIC_BROKER_CONFIGS.get(name)
        if defn is None:
            log.warning("dynamic broker config ignored", entity=entity, config=name)
            continue
        try:
            out[name] = parse_value(defn, value)
        except KafkaError as exc:
            log.warning("invalid dynamic broker config ignored", entity=entity, error=exc.message)
    return out


@dataclass(frozen=True, slots=True)
class Resolved:
    value: str | None
    source: ConfigSource
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...]


def resolve(
    name: str,
    per_broker: Mapping[str, str],
    default: Mapping[str, str],
    static: Mapping[str, str],
    default_value: str | None,
) -> Resolved:
    """Value, source and synonyms (highest precedence first) of one broker config."""
    layers: list[tuple[str | None, ConfigSource]] = []
    if name in per_broker:
        layers.append((per_broker[name], ConfigSource.DYNAMIC_BROKER_CONFIG))
    if name in default:
        layers.append((default[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
    if name in static:
        layers.append((static[name], ConfigSource.STATIC_BROKER_CONFIG))
    layers.append((default_value, ConfigSource.DEFAULT_CONFIG))
    value, source = layers[0]
    return Resolved(value, source, tuple((name, v, s) for v, s in layers))


def default_text(defn: BrokerConfigDef) -> str:
    return format_value(defn.default)


def list_default(name: str) -> list[str] | None:
    """The default of a LIST broker config (None: not a list, or unknown)."""
    defn = DYNAMIC_BROKER_CONFIGS.get(name)
    if defn is None or defn.type != ConfigType.LIST:
        return None
    return [s for s in format_value(defn.default).split(",") if s]
