"""``kafka-py configs``: kafka-configs.sh's options; each entity type in its own module
(users: configs_users.py; topics and brokers: configs_resources.py)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

from services.cli import configs_resources, configs_users
from services.cli.common import CliError

ENTITY_TYPES = {
    "users": configs_users.run,
    "topics": configs_resources.run,
    "brokers": configs_resources.run,
}


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    p = sub.add_parser(
        "configs",
        help="describe and alter entity configs (kafka-configs.sh)",
        description="Describe or alter configs as kafka-configs.sh does "
        f"(entity types: {', '.join(ENTITY_TYPES)}).",
    )
    common(p, False)
    p.add_argument("--entity-type", required=True, choices=sorted(ENTITY_TYPES))
    p.add_argument("--entity-name", metavar="NAME")
    p.add_argument(
        "--entity-default",
        action="store_true",
        help="the cluster-wide default (brokers)",
    )
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
