"""``kafka-py acls``: kafka-acls.sh's ``--add``, ``--remove`` and ``--list`` over the Admin API.

Options and output as kafka-acls.sh: ``--allow-principal``/``--deny-principal`` with
``--allow-host``/``--deny-host`` (default ``*``), ``--operation`` (default All), resources
``--topic``, ``--group``, ``--cluster``, ``--transactional-id`` with ``--resource-pattern-type``
(literal, prefixed; any and match for --list/--remove), the ``--producer`` (with
``--idempotent``) and ``--consumer`` conveniences, ``--principal`` to filter ``--list``, and
``--force`` to remove without the confirmation prompt.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from services.cli.common import CliError, UsageError, kafka_error_text
from services.common.acl import CLUSTER_NAME

OPERATIONS = (
    "All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
    "DescribeConfigs", "AlterConfigs", "IdempotentWrite", "CreateTokens", "DescribeTokens",
)  # fmt: skip
PATTERN_TYPES = ("literal", "prefixed", "any", "match")
ANY: Any = None  # a filter field matching anything (confluent-kafka's stubs say str)


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    p = sub.add_parser(
        "acls",
        help="add, remove and list ACLs (kafka-acls.sh)",
        description="Add, remove or list ACLs, as kafka-acls.sh does.",
    )
    common(p, False)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    for flag, help_text in (
        ("--allow-principal", "principal allowed (User:name); repeatable"),
        ("--deny-principal", "principal denied (User:name); repeatable"),
        ("--allow-host", "host the allowed principals may come from (default *)"),
        ("--deny-host", "host the denied principals are denied from (default *)"),
        ("--operation", f"operation ({', '.join(OPERATIONS)}); repeatable"),
        ("--topic", "topic (or prefix, or *); repeatable"),
        ("--group", "consumer group (or prefix, or *); repeatable"),
        ("--transactional-id", "transactional id (or prefix, or *); repeatable"),
        ("--principal", "--list: only the ACLs of this principal; repeatable"),
    ):
        p.add_argument(flag, action="append", default=[], help=help_text)
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument(
        "--resource-pattern-type",
        default="literal",
        type=str.lower,
        choices=PATTERN_TYPES,
        help="literal (default) or prefixed; any and match filter --list and --remove",
    )
    p.add_argument("--producer", action="store_true", help="ACLs a producer needs")
    p.add_argument("--consumer", action="store_true", help="ACLs a consumer needs (with --group)")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite")
    p.add_argument("--force", action="store_true", help="--remove without asking")


def _enum(cls: Any, text: str) -> Any:
    key = text.replace("_", "").replace("-", "").lower()
    for member in cls:
        if member.name.replace("_", "").lower() == key:
            return member
    raise UsageError(f"Invalid {cls.__name__} {text!r}")


def _resources(args: argparse.Namespace) -> list[tuple[Any, str]]:
    from confluent_kafka.admin import ResourceType

    out = [(ResourceType.TOPIC, t) for t in args.topic]
    out += [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.BROKER, CLUSTER_NAME))
    return out


def _wanted(args: argparse.Namespace) -> dict[tuple[Any, str], list[Any]]:
    """Resource -> operations to add or remove (``--producer``/``--consumer`` expanded)."""
    from confluent_kafka.admin import AclOperation, ResourceType

    if not (args.producer or args.consumer):
        ops = [_enum(AclOperation, o) for o in args.operation] or [AclOperation.ALL]
        resources = _resources(args)
        if not resources:
            raise UsageError(
                "You must provide at least one resource: --topic, --group, --cluster or --transactional-id"
            )
        return {r: ops for r in resources}
    if args.operation:
        raise UsageError("--operation cannot be used with --producer or --consumer")
    if args.consumer and not args.group:
        raise UsageError("With --consumer you must specify a --group")
    if not args.topic:
        raise UsageError("With --producer or --consumer you must specify a --topic")
    out: dict[tuple[Any, str], list[Any]] = {}
    for t in args.topic:
        ops = []
        if args.producer:
            ops += [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE]
        if args.consumer:
            ops += [AclOperation.READ, AclOperation.DESCRIBE]
        out[(ResourceType.TOPIC, t)] = list(dict.fromkeys(ops))
    if args.producer:
        for tx in args.transactional_id:
            out[(ResourceType.TRANSACTIONAL_ID, tx)] = [AclOperation.WRITE, AclOperation.DESCRIBE]
        if args.idempotent:
            out[(ResourceType.BROKER, CLUSTER_NAME)] = [AclOperation.IDEMPOTENT_WRITE]
    if args.consumer:
        for g in args.group:
            out[(ResourceType.GROUP, g)] = [AclOperation.READ]
    return out


def _entries(args: argparse.Namespace) -> list[tuple[str, str, Any]]:
    """(principal, host, permission) of the command line."""
    from confluent_kafka.admin import AclPermissionType

    out: list[tuple[str, str, Any]] = []
    for principals, hosts, perm in (
        (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host, AclPermissionType.DENY),
    ):
        for principal in principals:
            if ":" not in principal:
                raise UsageError(
                    f"Could not parse principal from `{principal}` (no colon is found)"
                )
            out.extend((principal, h, perm) for h in hosts or ["*"])
    return out


def _pattern_str(rtype: Any, name: str, pattern: Any) -> str:
    kind = "CLUSTER" if rtype.name == "BROKER" else rtype.name
    return f"ResourcePattern(resourceType={kind}, name={name}, patternType={pattern.name})"


def _entry_str(b: Any) -> str:
    return (
        f"(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
        f"permissionType={b.permission_type.name})"
    )


def _print_block(out: TextIO, title: str, bindings: Iterable[Any]) -> None:
    lines = "\n".join("\t" + _entry_str(b) for b in bindings)
    print(f"{title}: \n {lines} \n", file=out)


def _by_resource(bindings: Iterable[Any]) -> dict[tuple[Any, str, Any], list[Any]]:
    out: dict[tuple[Any, str, Any], list[Any]] = {}
    for b in bindings:
        out.setdefault((b.restype, b.name, b.resource_pattern_type), []).append(b)
    return out


def run(args: argparse.Namespace, conf: dict[str, Any], out: TextIO) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    timeout_s = args.request_timeout_ms / 1000.0
    pattern = _enum(ResourcePatternType, args.resource_pattern_type)
    admin = AdminClient(conf)

    def listing(resources: list[tuple[Any, str]], principals: list[str]) -> None:
        filters = [
            AclBindingFilter(rt, name, pattern, ANY, ANY, AclOperation.ANY,
                             AclPermissionType.ANY)
            for rt, name in resources
        ] or [
            AclBindingFilter(ResourceType.ANY, ANY, ResourcePatternType.ANY, ANY, ANY,
                             AclOperation.ANY, AclPermissionType.ANY)
        ]  # fmt: skip
        found: list[Any] = []
        for f in filters:
            found.extend(admin.describe_acls(f, request_timeout=timeout_s).result(timeout_s))
        for principal in [*principals] or [ANY]:
            mine = [b for b in found if principal is None or b.principal == principal]
            if principal is not None:
                print(f"ACLs for principal `{principal}`", file=out)
            for (rt, name, pt), bindings in _by_resource(mine).items():
                _print_block(
                    out, f"Current ACLs for resource `{_pattern_str(rt, name, pt)}`", bindings
                )

    try:
        if args.list:
            listing(_resources(args), args.principal)
            return 0
        wanted = _wanted(args)
        entries = _entries(args)
        if args.add:
            if args.resource_pattern_type not in ("literal", "prefixed"):
                raise UsageError(
                    f"A '--resource-pattern-type' value of '{args.resource_pattern_type}' is not valid when adding acls."
                )
            if not entries:
                raise UsageError(
                    "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
                )
            for (rt, name), ops in wanted.items():
                bindings = [
                    AclBinding(rt, name, pattern, p, h, op, perm)
                    for p, h, perm in entries
                    for op in ops
                ]
                title = f"Adding ACLs for resource `{_pattern_str(rt, name, pattern)}`"
                _print_block(out, title, bindings)
                for fut in admin.create_acls(bindings, request_timeout=timeout_s).values():
                    fut.result(timeout_s)
            listing(list(wanted), [])
            return 0
        # --remove
        for (rt, name), ops in wanted.items():
            if not args.force:
                answer = input(
                    f"Are you sure you want to remove ACLs: \n"
                    f" {_pattern_str(rt, name, pattern)} \n (y/n)"
                )
                if not answer.strip().lower().startswith("y"):
                    continue
            filters = [
                AclBindingFilter(rt, name, pattern, p, h, op, perm)
                for p, h, perm in entries
                for op in ops
            ] or [
                AclBindingFilter(rt, name, pattern, ANY, ANY, AclOperation.ANY,
                                 AclPermissionType.ANY)
            ]  # fmt: skip
            print(f"Removing ACLs for resource `{_pattern_str(rt, name, pattern)}`", file=out)
            for fut in admin.delete_acls(filters, request_timeout=timeout_s).values():
                fut.result(timeout_s)
        listing(list(wanted), [])
        return 0
    except KafkaException as exc:
        raise CliError(kafka_error_text(exc)) from None
