"""``kafka-py configs --entity-type topics|brokers``: kafka-configs.sh's topic and broker part.

``--describe`` prints what ConfigCommand prints: ``Dynamic configs for topic t are:`` (``All
configs`` with ``--all``, ``Default configs for brokers in the cluster are:`` for
``--entity-default``), then one ``  name=value sensitive=false synonyms={SOURCE:name=value, ...}``
line per entry, sorted by name; without ``--all`` only the entity's own overrides are listed
(DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG or DYNAMIC_DEFAULT_BROKER_CONFIG). ``--alter``
sends IncrementalAlterConfigs (SET for ``--add-config k=v,k2=[a,b]``, DELETE for
``--delete-config k``); deleting a config the entity does not override is refused as Kafka's
tool refuses it.

The requests go through ``services.cli.wire`` (DescribeConfigs v4, IncrementalAlterConfigs v1),
not confluent-kafka: its AdminClient cannot name the cluster-wide broker default (resource name
``""``) and keeps synonyms in a dict keyed by name, which loses a broker config's dynamic,
default and static synonyms of one name. The wire helper speaks TLS and SASL as configured.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from services.cli.common import CliError, UsageError
from services.cli.wire import bootstrap_exchange
from services.common.errors import ErrorCode
from services.common.protocol import ApiKey

TOPIC, BROKER = 2, 4
DESCRIBE_VERSION, ALTER_VERSION = 4, 1
SET, DELETE = 0, 1
#: DescribeConfigs' config_source codes, by Kafka's ConfigEntry.ConfigSource names
SOURCES = {
    -1: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}
# a separator followed by no "]" before the next "[" or the end: outside square brackets
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str | None
    source: str


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    value: str | None
    source: str
    sensitive: bool
    read_only: bool
    synonyms: list[Synonym] = field(default_factory=list)

    def line(self) -> str:
        syn = ", ".join(f"{s.source}:{s.name}={_text(s.value)}" for s in self.synonyms)
        sensitive = str(self.sensitive).lower()
        return f"  {self.name}={_text(self.value)} sensitive={sensitive} synonyms={{{syn}}}"


def _text(value: str | None) -> str:
    return "null" if value is None else value


def parse_add_config(text: str) -> dict[str, str]:
    """``k=v,k2=[a,b]`` -> ``{"k": "v", "k2": "a,b"}``, as ConfigCommand parses it."""
    out: dict[str, str] = {}
    for item in re.split("," + _OUTSIDE_BRACKETS, text):
        pair = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, item)
        if len(pair) != 2 or not pair[0].strip():
            raise CliError(
                'Invalid entity config: all configs to be added must be in the format "key=val".'
            )
        out[pair[0].strip()] = re.sub(r"\[?\]?", "", pair[1]).strip()
    return out


def parse_delete_config(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


@dataclass(frozen=True, slots=True)
class Target:
    """One entity: a topic, a broker id, or (``name == ""``) the brokers' cluster default."""

    rtype: int
    name: str

    @property
    def own_source(self) -> str:
        if self.rtype == TOPIC:
            return "DYNAMIC_TOPIC_CONFIG"
        return "DYNAMIC_BROKER_CONFIG" if self.name else "DYNAMIC_DEFAULT_BROKER_CONFIG"

    def heading(self, describe_all: bool) -> str:
        if self.rtype == BROKER and not self.name:
            return "Default configs for brokers in the cluster are:"
        kind = "topic" if self.rtype == TOPIC else "broker"
        return f"{'All' if describe_all else 'Dynamic'} configs for {kind} {self.name} are:"

    def done(self) -> str:
        if self.rtype == BROKER and not self.name:
            return "Completed updating default config for brokers in the cluster."
        kind = "topic" if self.rtype == TOPIC else "broker"
        return f"Completed updating config for {kind} {self.name}."


class ConfigsClient:
    """DescribeConfigs / IncrementalAlterConfigs / Metadata through the bootstrap servers."""

    def __init__(self, bootstrap: str, timeout_s: float) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s

    def _call(self, api: ApiKey, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return bootstrap_exchange(self.bootstrap, int(api), version, body, self.timeout_s)

    def describe(self, target: Target) -> list[Entry]:
        resp = self._call(
            ApiKey.DESCRIBE_CONFIGS,
            DESCRIBE_VERSION,
            {
                "resources": [
                    {
                        "resource_type": target.rtype,
                        "resource_name": target.name,
                        "configuration_keys": None,
                    }
                ],
                "include_synonyms": True,
                "include_documentation": False,
            },
        )
        result = resp["results"][0]
        _raise_for(result)
        return sorted(
            (
                Entry(
                    name=c["name"],
                    value=c["value"],
                    source=SOURCES.get(c["config_source"], "UNKNOWN"),
                    sensitive=bool(c["is_sensitive"]),
                    read_only=bool(c["read_only"]),
                    synonyms=[
                        Synonym(s["name"], s["value"], SOURCES.get(s["source"], "UNKNOWN"))
                        for s in c.get("synonyms") or []
                    ],
                )
                for c in result["configs"]
            ),
            key=lambda e: e.name,
        )

    def alter(self, target: Target, sets: dict[str, str], deletes: list[str]) -> None:
        ops = [{"name": k, "config_operation": SET, "value": v} for k, v in sets.items()]
        ops += [{"name": k, "config_operation": DELETE, "value": None} for k in deletes]
        resp = self._call(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            ALTER_VERSION,
            {
                "resources": [
                    {"resource_type": target.rtype, "resource_name": target.name, "configs": ops}
                ],
                "validate_only": False,
            },
        )
        _raise_for(resp["responses"][0])

    def topic_names(self) -> list[str]:
        resp = self._call(ApiKey.METADATA, 1, {"topics": None})
        return sorted(t["name"] for t in resp["topics"])

    def broker_ids(self) -> list[str]:
        resp = self._call(ApiKey.METADATA, 1, {"topics": []})
        return [str(b) for b in sorted(b["node_id"] for b in resp["brokers"])]


def _raise_for(result: dict[str, Any]) -> None:
    code = ErrorCode(result["error_code"])
    if code != ErrorCode.NONE:
        message = result.get("error_message")
        raise CliError(f"{code.name}: {message}" if message else code.name)


def _targets(args: argparse.Namespace, client: ConfigsClient) -> list[Target]:
    """The entities the options name (every topic / every broker and the default when
    ``--describe`` names none, as ConfigCommand)."""
    rtype = TOPIC if args.entity_type == "topics" else BROKER
    if args.entity_default:
        if rtype == TOPIC:
            raise UsageError("--entity-default is not supported for topics")
        if args.entity_name:
            raise UsageError("--entity-name and --entity-default cannot be used together")
        return [Target(BROKER, "")]
    if args.entity_name is not None:
        name = args.entity_name
        if rtype == BROKER and not re.fullmatch(r"-?\d+", name):
            raise UsageError(
                f"The entity name for brokers must be a valid integer broker id, but it is: {name}"
            )
        if rtype == TOPIC and not name:
            raise UsageError("--entity-name must not be empty")
        return [Target(rtype, name)]
    if args.alter:
        raise UsageError(f"an entity name must be specified with --alter of {args.entity_type}")
    if rtype == TOPIC:
        return [Target(TOPIC, n) for n in client.topic_names()]
    return [Target(BROKER, b) for b in client.broker_ids()] + [Target(BROKER, "")]


def run(args: argparse.Namespace, conf: dict[str, Any], out: TextIO) -> int:
    if args.all and not args.describe:
        raise UsageError("--all goes with --describe")
    client = ConfigsClient(str(conf["bootstrap.servers"]), args.request_timeout_ms / 1000.0)
    targets = _targets(args, client)
    if args.describe:
        return _describe(client, targets, args, out)
    sets = parse_add_config(args.add_config) if args.add_config else {}
    deletes = parse_delete_config(args.delete_config) if args.delete_config else []
    if not sets and not deletes:
        raise UsageError("--add-config or --delete-config must be specified with --alter")
    (target,) = targets
    if deletes:
        own = {e.name for e in client.describe(target) if e.source == target.own_source}
        missing = [name for name in deletes if name not in own]
        if missing:
            raise CliError(f"Invalid config(s): {','.join(missing)}")
    client.alter(target, sets, deletes)
    print(target.done(), file=out)
    return 0


def _describe(
    client: ConfigsClient, targets: list[Target], args: argparse.Namespace, out: TextIO
) -> int:
    described = []
    for target in targets:
        entries = [e for e in client.describe(target) if args.all or e.source == target.own_source]
        described.append((target, entries))
    if args.output == "json":
        doc = [
            {
                "entity_type": args.entity_type,
                "entity_name": t.name if t.name or t.rtype == TOPIC else None,
                "default": t.rtype == BROKER and not t.name,
                "configs": [asdict(e) for e in entries],
            }
            for t, entries in described
        ]
        print(json.dumps(doc, indent=2), file=out)
        return 0
    for target, entries in described:
        print(target.heading(args.all), file=out)
        for entry in entries:
            print(entry.line(), file=out)
    return 0
