"""``kafka-py consumer-groups``: kafka-consumer-groups.sh's ``--list``, ``--describe``,
``--reset-offsets``, ``--delete`` and ``--delete-offsets``, with its columns and messages.

Group admin goes through confluent-kafka's AdminClient (ListGroups, DescribeGroups, OffsetFetch,
OffsetCommit, DeleteGroups, ListOffsets); OffsetDelete, which it has no call for, is sent to the
group's coordinator with ``services.cli.wire``. ``--output json`` prints the same data as JSON.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from confluent_kafka.admin import AdminClient

from services.cli.common import CliError, UsageError, kafka_error_text
from services.cli.group_admin import GroupAdmin
from services.cli.group_offsets_reset import (
    SCENARIOS,
    Tp,
    export_csv,
    read_reset_file,
)
from services.cli.wire import bootstrap_exchange, exchange
from services.common.errors import ErrorCode
from services.common.protocol import ApiKey

OFFSETS_HEADER = (
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
)
MEMBERS_HEADER = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
STATE_HEADER = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
RESET_HEADER = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")
# Kafka's fixed minimum widths (e.g. "%-10s %-15s %-15s %-15s" for the offset columns).
_MIN_WIDTHS = {"PARTITION": 10, "CURRENT-OFFSET": 15, "LOG-END-OFFSET": 15, "LAG": 15}
_ACTIONS = ("list", "describe", "reset_offsets", "delete", "delete_offsets")


def add_parser(sub: Any, common: Callable[[argparse.ArgumentParser, bool], None]) -> None:
    p = sub.add_parser(
        "consumer-groups",
        help="list, describe, reset and delete consumer groups (kafka-consumer-groups.sh)",
        description="Consumer group admin, as kafka-consumer-groups.sh does.",
    )
    common(p, False)
    for action in _ACTIONS:
        p.add_argument(f"--{action.replace('_', '-')}", dest=action, action="store_true")
    p.add_argument("--group", action="append", default=[], metavar="GROUP")
    p.add_argument("--all-groups", action="store_true")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,...]")
    p.add_argument("--all-topics", action="store_true")
    p.add_argument(
        "--state",
        nargs="?",
        const="",
        default=None,
        metavar="STATES",
        help="--list: show states (or only these, comma-separated); --describe: group state",
    )
    p.add_argument("--members", action="store_true")
    p.add_argument("--offsets", action="store_true")
    p.add_argument("--verbose", dest="describe_verbose", action="store_true")
    for scenario in SCENARIOS:
        flag = f"--{scenario.replace('_', '-')}"
        if scenario in ("to_earliest", "to_latest", "to_current"):
            p.add_argument(flag, dest=scenario, action="store_true")
        else:
            p.add_argument(flag, dest=scenario, default=None, metavar="VALUE")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--execute", action="store_true")
    p.add_argument("--export", action="store_true")
    p.add_argument("--output", choices=("text", "json"), default="text")


def run(args: argparse.Namespace, conf: dict[str, Any], out: TextIO) -> int:
    actions = [a for a in _ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise UsageError(
            "Command must include exactly one action: --list, --describe, --delete, "
            "--reset-offsets, --delete-offsets"
        )
    tool = _Groups(args, conf, out)
    return int(getattr(tool, f"do_{actions[0]}")())


class _Groups:
    def __init__(self, args: argparse.Namespace, conf: dict[str, Any], out: TextIO) -> None:
        self.args = args
        self.conf = conf
        self.out = out
        self.timeout = args.request_timeout_ms / 1000.0
        self.admin = AdminClient({k: v for k, v in conf.items()})
        self.groups = GroupAdmin(self.admin, self.timeout)
        self.json = args.output == "json"

    # ---- helpers ---------------------------------------------------------------------------

    def _groups(self, required: bool = True) -> list[str]:
        if self.args.all_groups:
            return [g for g, _ in self.groups.list_groups()]
        if required and not self.args.group:
            raise UsageError("Option --group or --all-groups is required")
        return list(dict.fromkeys(self.args.group))

    def _emit(self, data: Any) -> None:
        print(json.dumps(data, indent=2, sort_keys=True), file=self.out)

    # ---- actions ---------------------------------------------------------------------------

    def do_list(self) -> int:
        wanted = self.args.state
        rows = self.groups.list_groups(wanted.split(",") if wanted else ())
        if self.json:
            self._emit([{"group": g, "state": s} for g, s in rows])
        elif wanted is None:
            for g, _ in rows:
                print(g, file=self.out)
        else:
            _table(("GROUP", "STATE"), rows, self.out)
        return 0

    def do_describe(self) -> int:
        docs = self.groups.group_docs(self._groups())
        if self.json:
            self._emit(docs)
            return 0
        for doc in docs:
            self._print_group(doc)
        return 0

    def _print_group(self, doc: dict[str, Any]) -> None:
        group, state = doc["group"], doc["state"]
        print(file=self.out)
        if state == "Dead":
            print(f"Consumer group '{group}' does not exist.", file=self.out)
            return
        if self.args.state is not None:
            state_row = (
                group,
                doc["coordinator"],
                doc["assignment_strategy"],
                state,
                str(len(doc["members"])),
            )
            _table(STATE_HEADER, [state_row], self.out)
            return
        if not doc["members"]:
            print(f"Consumer group '{group}' has no active members.", file=self.out)
            print(file=self.out)
        if self.args.members:
            header = MEMBERS_HEADER + (("ASSIGNMENT",) if self.args.describe_verbose else ())
            member_rows: list[list[str]] = []
            for m in doc["members"]:
                row = [
                    group,
                    m["consumer_id"],
                    m["host"],
                    m["client_id"],
                    str(len(m["assignment"])),
                ]
                if self.args.describe_verbose:
                    row.append(_assignment_text(m["assignment"]))
                member_rows.append(row)
            _table(header, member_rows, self.out)
            return
        rows: list[tuple[str, ...]] = [
            (
                group,
                r["topic"],
                str(r["partition"]),
                _dash(r["current_offset"]),
                _dash(r["log_end_offset"]),
                _dash(r["lag"]),
                _dash(r["consumer_id"]),
                _dash(r["host"]),
                _dash(r["client_id"]),
            )
            for r in doc["offsets"]
        ]
        # Members without partitions still get a row, as in Kafka's tool.
        assigned = {r["consumer_id"] for r in doc["offsets"]}
        rows += [
            (group, "-", "-", "-", "-", "-", m["consumer_id"], m["host"], m["client_id"])
            for m in doc["members"]
            if not m["assignment"] and m["consumer_id"] not in assigned
        ]
        _table(OFFSETS_HEADER, rows, self.out)

    def do_reset_offsets(self) -> int:
        a = self.args
        chosen = [s for s in SCENARIOS if getattr(a, s) not in (None, False)]
        if len(chosen) != 1:
            raise UsageError(
                "Option --reset-offsets takes exactly one of --to-datetime, --by-duration, "
                "--to-earliest, --to-latest, --shift-by, --from-file, --to-current, --to-offset"
            )
        if a.dry_run and a.execute:
            raise UsageError("Option --reset-offsets takes only one of --dry-run and --execute")
        scenario = chosen[0]
        if scenario != "from_file" and not a.topic and not a.all_topics:
            raise UsageError("Option --reset-offsets needs one of --topic and --all-topics")
        groups = self._groups()
        described = self.groups.describe(groups)
        from_file = read_reset_file(a.from_file, groups) if scenario == "from_file" else {}
        plans: dict[str, dict[Tp, int]] = {}
        for group in groups:
            self.groups.require_inactive(group, described[group])
            if scenario == "from_file":
                plans[group] = from_file.get(group, {})
                continue
            plans[group] = self.groups.plan(
                group, scenario, getattr(a, scenario), a.topic, a.all_topics
            )
        if a.execute:
            for group, plan in plans.items():
                self.groups.apply(group, plan)
        if a.export:
            self.out.write(export_csv(plans))
        elif self.json:
            self._emit(
                [
                    {"group": g, "topic": t, "partition": p, "new_offset": o}
                    for g, plan in plans.items()
                    for (t, p), o in sorted(plan.items())
                ]
            )
        else:
            rows = [
                (g, t, str(p), str(o))
                for g, plan in plans.items()
                for (t, p), o in sorted(plan.items())
            ]
            print(file=self.out)
            _table(RESET_HEADER, rows, self.out, min_width=(30, 30, 10, 15))
        return 0

    def do_delete(self) -> int:
        groups = self._groups()
        futs = self.admin.delete_consumer_groups(groups, request_timeout=self.timeout)
        failed: dict[str, str] = {}
        for g, f in futs.items():
            try:
                f.result(timeout=self.timeout)
            except Exception as exc:
                failed[g] = kafka_error_text(exc)
        ok = [g for g in groups if g not in failed]
        if self.json:
            self._emit({"deleted": ok, "failed": failed})
        else:
            if ok:
                names = ", ".join(f"'{g}'" for g in ok)
                print(
                    f"Deletion of requested consumer groups ({names}) was successful.",
                    file=self.out,
                )
            if failed:
                print("Deletion of some consumer groups failed:", file=self.out)
                for g, why in failed.items():
                    print(f"* Group '{g}' could not be deleted due to: {why}", file=self.out)
        return 1 if failed else 0

    def do_delete_offsets(self) -> int:
        (group,) = self._groups() if len(self.args.group) == 1 else (None,)
        if group is None or self.args.all_groups:
            raise UsageError("Option --delete-offsets takes exactly one --group")
        if not self.args.topic:
            raise UsageError("Option --delete-offsets needs --topic")
        parts = self.groups.topic_partitions(self.args.topic)
        by_topic: dict[str, list[int]] = {}
        for t, p in parts:
            by_topic.setdefault(t, []).append(p)
        body = {
            "group_id": group,
            "topics": [
                {"name": t, "partitions": [{"partition_index": p} for p in ps]}
                for t, ps in by_topic.items()
            ],
        }
        r = self._coordinator_call(group, ApiKey.OFFSET_DELETE, 0, body)
        top = ErrorCode(r["error_code"])
        results = [
            (t["name"], p["partition_index"], ErrorCode(p["error_code"]))
            for t in r["topics"]
            for p in t["partitions"]
        ]
        if self.json:
            self._emit(
                {
                    "group": group,
                    "error": None if top == ErrorCode.NONE else top.name,
                    "partitions": [
                        {"topic": t, "partition": p, "error": None if e == 0 else e.name}
                        for t, p, e in results
                    ],
                }
            )
            return 0 if top == ErrorCode.NONE and all(e == 0 for *_, e in results) else 1
        if top != ErrorCode.NONE:
            raise CliError(f"Encounter some unknown error: {top.name}")
        topics = ", ".join(by_topic)
        if any(e != 0 for *_, e in results):
            print("Encounter some partition level error, see the follow-up details:", file=self.out)
        else:
            print(
                f"Request succeed for deleting offsets with topic {topics} group {group}",
                file=self.out,
            )
        print(file=self.out)
        rows = [(t, str(p), "Successful" if e == 0 else f"Error: {e.name}") for t, p, e in results]
        _table(("TOPIC", "PARTITION", "STATUS"), rows, self.out, min_width=(30, 15, 15))
        return 0 if all(e == 0 for *_, e in results) else 1

    def _coordinator_call(
        self, group: str, api_key: int, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        bootstrap = str(self.conf["bootstrap.servers"])
        found = bootstrap_exchange(
            bootstrap, ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0}, self.timeout
        )
        if found["error_code"]:
            raise CliError(
                f"no coordinator for group {group}: {ErrorCode(found['error_code']).name}"
            )
        return exchange(found["host"], found["port"], api_key, version, body, self.timeout)


def _dash(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def _assignment_text(assignment: Sequence[Sequence[Any]]) -> str:
    by_topic: dict[str, list[int]] = {}
    for t, p in assignment:
        by_topic.setdefault(t, []).append(p)
    return ",".join(f"{t}:{','.join(map(str, ps))}" for t, ps in by_topic.items()) or "-"


def _table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    out: TextIO,
    min_width: Sequence[int] | None = None,
) -> None:
    """Kafka's ``%-Ns`` layout: each column as wide as its widest cell (or Kafka's fixed width),
    one space apart, the last one unpadded."""
    mins = list(min_width or (_MIN_WIDTHS.get(h, 0) for h in header))
    widths = [max([mins[i]] + [len(r[i]) for r in (header, *rows)]) for i in range(len(header))]
    for r in (header, *rows):
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths, strict=False)] + [r[-1]]
        print(" ".join(cells).rstrip(), file=out)
