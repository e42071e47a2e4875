"""``kafka-py configs --entity-type users``: SCRAM credentials and client quotas
(kafka-configs.sh's users part; the quota part is configs_quotas.py).

``--alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=x]'``
upserts credentials (AlterUserScramCredentials; the client salts and hashes the password, the
password never travels), ``--alter --delete-config SCRAM-SHA-512`` deletes one, ``--describe``
lists mechanisms and iterations (DescribeUserScramCredentials) after the user's quotas.
Quota keys (``producer_byte_rate`` ...), ``--entity-default`` or a ``clients`` entity go to
the quota APIs; SCRAM and quota configs are not altered in one command (as Kafka's tool).
Output as Kafka's tool.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, TextIO

from services.cli import configs_quotas
from services.cli.common import CliError, kafka_error_text

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_ITERATIONS = 4096
_ITEM = re.compile(r"\s*(SCRAM-SHA-(?:256|512))=\[([^\]]*)\]\s*(?:,|$)")


def parse_add_config(text: str) -> dict[str, tuple[str, int]]:
    """``MECH=[password=...,iterations=N],...`` -> mechanism -> (password, iterations)."""
    out: dict[str, tuple[str, int]] = {}
    pos = 0
    while pos < len(text):
        m = _ITEM.match(text, pos)
        if m is None:
            raise CliError(
                f"Invalid --add-config for users: {text[pos:]!r} (expected "
                "SCRAM-SHA-256=[password=...] or SCRAM-SHA-512=[iterations=N,password=...])"
            )
        fields: dict[str, str] = {}
        for part in m.group(2).split(","):
            key, sep, value = part.partition("=")
            if not sep or key.strip() not in ("password", "iterations"):
                raise CliError(f"Invalid {m.group(1)} setting {part!r}")
            fields[key.strip()] = value
        if "password" not in fields:
            raise CliError(f"{m.group(1)} needs password=...")
        try:
            iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
        except ValueError:
            raise CliError(f"Invalid iterations for {m.group(1)}") from None
        out[m.group(1)] = (fields["password"], iterations)
        pos = m.end()
    return out


def run(args: argparse.Namespace, conf: dict[str, Any], out: TextIO) -> int:
    pairs = configs_quotas.entities(args)
    quota_only = len(pairs) > 1 or any(name == "" for _, name in pairs)
    timeout_s = args.request_timeout_ms / 1000.0
    bootstrap = str(conf["bootstrap.servers"])
    if args.describe:
        for line in configs_quotas.describe(bootstrap, pairs, timeout_s):
            print(line, file=out)
        return 0 if quota_only else _scram(args, conf, out, None)
    items = configs_quotas.split_configs(args.add_config or "")
    deletes = [n.strip() for n in (args.delete_config or "").split(",") if n.strip()]
    quota_add = [(k, v) for k, v in items if k not in MECHANISMS]
    quota_delete = [n for n in deletes if n not in MECHANISMS]
    scram_add = [(k, v) for k, v in items if k in MECHANISMS]
    scram_delete = [n for n in deletes if n in MECHANISMS]
    if (quota_add or quota_delete or quota_only) and (scram_add or scram_delete):
        raise CliError("quota and SCRAM credential configs cannot be altered in one command")
    if quota_add or quota_delete or quota_only:
        if not quota_add and not quota_delete:
            raise CliError("--add-config or --delete-config must be specified with --alter")
        configs_quotas.alter(bootstrap, pairs, quota_add, quota_delete, timeout_s)
        print(configs_quotas.completed_line(args), file=out)
        return 0
    scram_text = ",".join(f"{k}={v}" for k, v in scram_add)
    return _scram(args, conf, out, (scram_text, scram_delete))


def _scram(
    args: argparse.Namespace,
    conf: dict[str, Any],
    out: TextIO,
    alter: tuple[str, list[str]] | None,
) -> int:
    """SCRAM credentials: described (``alter`` None) or altered."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    timeout_s = args.request_timeout_ms / 1000.0
    admin = AdminClient(conf)
    mech = {
        "SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
        "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512,
    }
    users = [args.entity_name] if args.entity_name else None
    try:
        if alter is None:
            if users is None:
                every: Any = admin.describe_user_scram_credentials(request_timeout=timeout_s)
                described = every.result(timeout_s)
            else:
                futures: Any = admin.describe_user_scram_credentials(
                    users, request_timeout=timeout_s
                )
                described = {}
                for u, f in futures.items():
                    try:
                        described[u] = f.result(timeout_s)
                    except KafkaException as exc:  # a user with quotas only
                        if exc.args[0].code() != KafkaError.RESOURCE_NOT_FOUND:
                            raise
            for user, desc in sorted(described.items()):
                infos = ", ".join(
                    f"{i.mechanism.name.replace('_', '-')}=iterations={i.iterations}"
                    for i in desc.scram_credential_infos
                )
                print(f"SCRAM credential configs for user-principal '{user}' are {infos}", file=out)
            return 0
        if not args.entity_name:
            raise CliError("--entity-name must be specified with --alter of users")
        alterations: list[Any] = []
        add_text, delete_names = alter
        for name, (password, iterations) in parse_add_config(add_text).items():
            alterations.append(
                UserScramCredentialUpsertion(
                    args.entity_name, ScramCredentialInfo(mech[name], iterations), password.encode()
                )
            )
        for name in delete_names:
            alterations.append(UserScramCredentialDeletion(args.entity_name, mech[name]))
        if not alterations:
            raise CliError("--add-config or --delete-config must be specified with --alter")
        for future in admin.alter_user_scram_credentials(
            alterations, request_timeout=timeout_s
        ).values():
            future.result(timeout_s)
    except KafkaException as exc:
        raise CliError(kafka_error_text(exc)) from None
    print(f"Completed updating config for user {args.entity_name}.", file=out)
    return 0
