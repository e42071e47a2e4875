"""The offsets ``kafka-py consumer-groups --reset-offsets`` moves a group to, computed as
kafka-consumer-groups.sh does: every target offset is clamped to the partition's
[log-start, log-end] range, ``--to-datetime``/``--by-duration`` take the first offset whose
timestamp is at or after the time (log end when there is none), ``--shift-by`` moves the committed
offset, ``--to-current`` keeps it (log end for a partition with no commit), ``--from-file`` reads
the CSV that ``--export`` writes."""

from __future__ import annotations

import csv
import re
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path

from services.cli.common import CliError, UsageError

Tp = tuple[str, int]
# ListOffsets of a set of partitions for one spec ("earliest", "latest" or a timestamp in ms).
OffsetLookup = Callable[[Iterable[Tp], "str | int"], dict[Tp, int]]

SCENARIOS = (
    "to_earliest",
    "to_latest",
    "to_offset",
    "to_datetime",
    "by_duration",
    "shift_by",
    "from_file",
    "to_current",
)
_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)


def parse_datetime_ms(text: str) -> int:
    """``--to-datetime`` (``YYYY-MM-DDTHH:mm:SS.sss``, optional zone; local time without one)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--to-datetime: expected YYYY-MM-DDTHH:mm:SS.sss[zone], got {text!r}"
        ) from None
    try:
        return int(when.timestamp() * 1000)
    except (OverflowError, OSError, ValueError):
        raise UsageError(f"--to-datetime: {text!r} is out of range") from None


def parse_duration_ms(text: str) -> int:
    """``--by-duration`` as ISO-8601 ``PnDTnHnMn.nS`` (Java's Duration.parse)."""
    m = _DURATION.match(text.strip().upper())
    if not m or text.strip().upper() in ("P", "PT"):
        raise UsageError(f"--by-duration: expected an ISO-8601 duration like PT1H30M, got {text!r}")
    d, h, mi, s = (float(m.group(k) or 0) for k in "dhms")
    return int((((d * 24 + h) * 60 + mi) * 60 + s) * 1000)


def read_reset_file(path: str, groups: list[str]) -> dict[str, dict[Tp, int]]:
    """The CSV ``--export`` writes: ``topic,partition,offset`` for one group,
    ``group,topic,partition,offset`` for several."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    out: dict[str, dict[Tp, int]] = {}
    for n, row in enumerate(csv.reader(text.splitlines()), 1):
        if not row:
            continue
        try:
            if len(row) == 3 and len(groups) == 1:
                group, (topic, part, off) = groups[0], row
            elif len(row) == 4:
                group, topic, part, off = row
            else:
                raise ValueError
            out.setdefault(group, {})[(topic, int(part))] = int(off)
        except ValueError:
            raise CliError(f"{path}:{n}: expected topic,partition,offset, got {row!r}") from None
    return out


def export_csv(plans: Mapping[str, Mapping[Tp, int]]) -> str:
    """Kafka's export format (the group column only when there are several groups)."""
    many = len(plans) > 1
    lines = [
        ",".join(([g] if many else []) + [t, str(p), str(o)])
        for g, plan in plans.items()
        for (t, p), o in sorted(plan.items())
    ]
    return "".join(line + "\n" for line in lines)


def plan_reset(
    scenario: str,
    value: str | None,
    partitions: list[Tp],
    committed: Mapping[Tp, int],
    lookup: OffsetLookup,
    now_ms: int | None = None,
) -> dict[Tp, int]:
    """New offset per partition for one scenario (``value`` is its argument)."""
    if not partitions:
        return {}
    earliest = lookup(partitions, "earliest")
    latest = lookup(partitions, "latest")

    def clamp(tp: Tp, offset: int) -> int:
        return max(earliest[tp], min(latest[tp], offset))

    if scenario == "to_earliest":
        return {tp: earliest[tp] for tp in partitions}
    if scenario == "to_latest":
        return {tp: latest[tp] for tp in partitions}
    if scenario == "to_current":
        return {tp: committed.get(tp, latest[tp]) for tp in partitions}
    if scenario == "to_offset":
        return {tp: clamp(tp, _int(value, "--to-offset")) for tp in partitions}
    if scenario == "shift_by":
        shift = _int(value, "--shift-by")
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            t, p = missing[0]
            raise CliError(
                f"Cannot shift offset for partition {t}-{p} since there is no current committed offset"
            )
        return {tp: clamp(tp, committed[tp] + shift) for tp in partitions}
    if scenario in ("to_datetime", "by_duration"):
        if scenario == "to_datetime":
            ts = parse_datetime_ms(value or "")
        else:
            now = int(time.time() * 1000) if now_ms is None else now_ms
            ts = now - parse_duration_ms(value or "")
        # negative ListOffsets timestamps are special (-1 latest, -2 earliest): a time before
        # the epoch means "from the first record"
        found = lookup(partitions, max(0, ts))
        return {tp: latest[tp] if found[tp] < 0 else found[tp] for tp in partitions}
    raise UsageError(f"unknown reset scenario {scenario}")


def _int(value: str | None, flag: str) -> int:
    try:
        return int(value or "")
    except ValueError:
        raise UsageError(f"{flag}: expected a number, got {value!r}") from None
