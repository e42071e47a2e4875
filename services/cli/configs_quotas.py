"""``kafka-py configs --entity-type users|clients``: client quotas (kafka-configs.sh's quota part).

``--entity-type users --entity-name alice [--entity-type clients --entity-name c1] --alter
--add-config 'producer_byte_rate=1048576,request_percentage=50'`` (AlterClientQuotas),
``--delete-config producer_byte_rate``, ``--entity-default`` for the default entity, and
``--describe`` (DescribeClientQuotas, matching only the named entity types as Kafka's
``ClientQuotaFilter.containsOnly``). Requests go through the CLI's own codec (wire.py):
confluent-kafka's AdminClient has no client-quota calls. Output as kafka-configs.sh.
"""

from __future__ import annotations

import argparse
from decimal import Decimal
from typing import Any, TextIO

from services.cli.common import CliError
from services.cli.wire import bootstrap_exchange
from services.common.client_quotas import CLIENT_ID, QUOTA_KEYS, USER
from services.common.errors import ErrorCode
from services.common.protocol import ApiKey

_TYPES = {"users": USER, "clients": CLIENT_ID}
_DESCRIBED = {USER: "user-principal", CLIENT_ID: "client-id"}
_VERSION = 1


def split_configs(text: str) -> list[tuple[str, str]]:
    """``k=v,k2=[a=1,b=2]`` -> [(k, v), (k2, [a=1,b=2])]: commas inside brackets stay."""
    items: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    out: list[tuple[str, str]] = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"Invalid config {item!r} (expected name=value)")
        out.append((key.strip(), value.strip()))
    return out


def java_double(value: float) -> str:
    """A double as Java's Double.toString writes it (kafka-configs.sh prints values so)."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    sign, digits, exp = Decimal(repr(float(value))).normalize().as_tuple()
    assert isinstance(exp, int)
    mantissa = f"{digits[0]}." + ("".join(map(str, digits[1:])) or "0")
    return f"{'-' if sign else ''}{mantissa}E{len(digits) - 1 + exp}"


def entities(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """The (protocol entity type, name) pairs given; name "" = --entity-default, None =
    no name (every entity of the type, for --describe)."""
    out = []
    for etype, name in getattr(args, "entities", None) or [(args.entity_type, args.entity_name)]:
        if etype not in _TYPES:
            raise CliError(f"--entity-type {etype} cannot be combined with users or clients")
        out.append((_TYPES[etype], name))
    return out


def _entity_text(entity: list[dict[str, Any]]) -> str:
    parts = []
    for e in entity:
        what = _DESCRIBED.get(e["entity_type"], e["entity_type"])
        name = e["entity_name"]
        parts.append(f"{what} '{name}'" if name is not None else f"the default {what}")
    return ", ".join(parts)


def describe(bootstrap: str, pairs: list[tuple[str, str | None]], timeout_s: float) -> list[str]:
    """kafka-configs.sh's ``Quota configs for ... are ...`` lines."""
    components = []
    for etype, name in pairs:
        if name is None:
            components.append({"entity_type": etype, "match_type": 2, "match": None})
        elif name == "":
            components.append({"entity_type": etype, "match_type": 1, "match": None})
        else:
            components.append({"entity_type": etype, "match_type": 0, "match": name})
    resp = bootstrap_exchange(
        bootstrap,
        ApiKey.DESCRIBE_CLIENT_QUOTAS,
        _VERSION,
        {"components": components, "strict": True},
        timeout_s,
    )
    if resp["error_code"]:
        raise CliError(_error(resp["error_code"], resp.get("error_message")))
    lines = []
    for entry in resp["entries"] or []:
        values = ", ".join(f"{v['key']}={java_double(v['value'])}" for v in entry["values"])
        lines.append(f"Quota configs for {_entity_text(entry['entity'])} are {values}")
    return lines


def alter(
    bootstrap: str,
    pairs: list[tuple[str, str | None]],
    add: list[tuple[str, str]],
    delete: list[str],
    timeout_s: float,
) -> None:
    if any(name is None for _, name in pairs):
        raise CliError("--entity-name or --entity-default must be specified with --alter")
    unknown = [k for k, _ in add if k not in QUOTA_KEYS] + [
        k for k in delete if k not in QUOTA_KEYS
    ]
    if unknown:
        raise CliError(f"Invalid config(s): {', '.join(unknown)}")
    ops: list[dict[str, Any]] = []
    for key, text in add:
        try:
            value = float(text)
        except ValueError:
            raise CliError(f"Invalid value {text!r} for {key} (a number)") from None
        ops.append({"key": key, "value": value, "remove": False})
    ops += [{"key": key, "value": 0.0, "remove": True} for key in delete]
    entity = [{"entity_type": t, "entity_name": n or None} for t, n in pairs]
    resp = bootstrap_exchange(
        bootstrap,
        ApiKey.ALTER_CLIENT_QUOTAS,
        _VERSION,
        {"entries": [{"entity": entity, "ops": ops}], "validate_only": False},
        timeout_s,
    )
    for entry in resp["entries"]:
        if entry["error_code"]:
            raise CliError(_error(entry["error_code"], entry.get("error_message")))


def _error(code: int, message: str | None) -> str:
    try:
        name = ErrorCode(code).name
    except ValueError:
        name = f"error {code}"
    return f"{name}: {message}" if message else name


def completed_line(args: argparse.Namespace) -> str:
    """kafka-configs.sh's last line after --alter (named after the first entity given)."""
    etype, name = (getattr(args, "entities", None) or [(args.entity_type, args.entity_name)])[0]
    if name:
        return f"Completed updating config for {etype[:-1]} {name}."
    return f"Completed updating default config for {etype} in the cluster."


def run(args: argparse.Namespace, conf: dict[str, Any], out: TextIO) -> int:
    """``--entity-type clients`` (and users' quota part, see configs_users.py)."""
    bootstrap = str(conf["bootstrap.servers"])
    timeout_s = args.request_timeout_ms / 1000.0
    pairs = entities(args)
    if args.describe:
        for line in describe(bootstrap, pairs, timeout_s):
            print(line, file=out)
        return 0
    add = split_configs(args.add_config or "")
    delete = [n.strip() for n in (args.delete_config or "").split(",") if n.strip()]
    if not add and not delete:
        raise CliError("--add-config or --delete-config must be specified with --alter")
    alter(bootstrap, pairs, add, delete, timeout_s)
    print(completed_line(args), file=out)
    return 0
