"""``kafka-py configs``: kafka-configs.sh's options; each entity type in its own module
(users: configs_users.py, clients: configs_quotas.py; topics and brokers: configs_resources.py).
``--entity-type`` may be given twice (``--entity-type users --entity-name u --entity-type
clients --entity-name c``, a user's quota for one client id), each followed by its
``--entity-name`` or ``--entity-default``: the pairs are in ``args.entities``;
``args.entity_type``/``entity_name``/``entity_default`` are the first pair."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

from services.cli import configs_quotas, configs_resources, configs_users
from services.cli.common import CliError

ENTITY_TYPES = {
    "users": configs_users.run,
    "clients": configs_quotas.run,
    "topics": configs_resources.run,
    "brokers": configs_resources.run,
}


class _Entity(argparse.Action):
    """Records ``--entity-type``/``--entity-name``/``--entity-default`` in order as
    ``[type, name]`` pairs (name "" = the default entity, None = not given)."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        pairs = [list(p) for p in getattr(namespace, "entities", None) or []]
        if option == "--entity-type":
            pairs.append([values, None])
        elif not pairs:
            parser.error(f"{option} must follow --entity-type")
        elif pairs[-1][1] is not None:
            parser.error(f"{option} given twice for --entity-type {pairs[-1][0]}")
        else:
            pairs[-1][1] = "" if option == "--entity-default" else values
        namespace.entities = [tuple(p) for p in pairs]
        first = namespace.entities[0]
        namespace.entity_type = first[0]
        namespace.entity_name = first[1] or None
        namespace.entity_default = first[1] == ""


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    p = sub.add_parser(
        "configs",
        help="describe and alter entity configs (kafka-configs.sh)",
        description="Describe or alter configs as kafka-configs.sh does "
        f"(entity types: {', '.join(ENTITY_TYPES)}).",
    )
    common(p, False)
    p.add_argument("--entity-type", required=True, choices=sorted(ENTITY_TYPES), action=_Entity)
    p.add_argument("--entity-name", metavar="NAME", action=_Entity)
    p.add_argument(
        "--entity-default",
        nargs=0,
        action=_Entity,
        help="the default entity (users, clients) or the cluster-wide default (brokers)",
    )
    p.set_defaults(entities=[], entity_default=False)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true")
    action.add_argument("--describe", action="store_true")
    p.add_argument("--add-config", metavar="CONFIGS")
    p.add_argument("--delete-config", metavar="NAMES")
    p.add_argument(
        "--all", action="store_true", help="with --describe: every config, not only overrides"
    )
    p.add_argument("--output", choices=("text", "json"), default="text")


def run(args: argparse.Namespace, conf: dict[str, Any], out: TextIO) -> int:
    if args.describe and (args.add_config or args.delete_config):
        raise CliError("--add-config and --delete-config go with --alter, not --describe")
    return ENTITY_TYPES[args.entity_type](args, conf, out)
