"""The offset arithmetic of ``consumer-groups --reset-offsets`` (Kafka's rules), on given
log ranges: durations, clamping, shift without a commit, the export/import CSV."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from services.cli.common import CliError, UsageError
from services.cli.group_offsets_reset import (
    Tp,
    export_csv,
    parse_duration_ms,
    plan_reset,
    read_reset_file,
)

RANGES = {("t", 0): (3, 10), ("t", 1): (0, 4)}
BY_TIME = {("t", 0): 6, ("t", 1): -1}  # partition 1 has nothing at or after the time


def lookup(parts: Iterable[Tp], spec: str | int) -> dict[Tp, int]:
    if spec == "earliest":
        return {tp: RANGES[tp][0] for tp in parts}
    if spec == "latest":
        return {tp: RANGES[tp][1] for tp in parts}
    assert spec == 1_000_000 - 90_000
    return {tp: BY_TIME[tp] for tp in parts}


PARTS = sorted(RANGES)


def test_durations_are_iso_8601() -> None:
    assert parse_duration_ms("PT1H30M") == 5_400_000
    assert parse_duration_ms("P1DT0.5S") == 86_400_500
    for bad in ("P", "PT", "1H", "yesterday"):
        with pytest.raises(UsageError):
            parse_duration_ms(bad)


def test_offsets_are_clamped_to_the_log_range() -> None:
    assert plan_reset("to_offset", "5", PARTS, {}, lookup) == {("t", 0): 5, ("t", 1): 4}
    assert plan_reset("to_offset", "0", PARTS, {}, lookup) == {("t", 0): 3, ("t", 1): 0}
    shifted = plan_reset("shift_by", "-2", PARTS, {("t", 0): 4, ("t", 1): 4}, lookup)
    assert shifted == {("t", 0): 3, ("t", 1): 2}
    assert plan_reset("to_current", None, PARTS, {("t", 0): 7}, lookup) == {
        ("t", 0): 7,
        ("t", 1): 4,
    }
    with pytest.raises(CliError, match="no current committed offset"):
        plan_reset("shift_by", "1", PARTS, {("t", 0): 4}, lookup)


def test_by_duration_falls_back_to_log_end() -> None:
    got = plan_reset("by_duration", "PT1M30S", PARTS, {}, lookup, now_ms=1_000_000)
    assert got == {("t", 0): 6, ("t", 1): 4}


def test_export_and_import_round_trip(tmp_path: Path) -> None:
    plans = {"g": {("t", 1): 2, ("t", 0): 9}}
    assert export_csv(plans) == "t,0,9\nt,1,2\n"
    f = tmp_path / "one.csv"
    f.write_text(export_csv(plans))
    assert read_reset_file(str(f), ["g"]) == plans
    two = {"a": {("t", 0): 1}, "b": {("u", 2): 3}}
    f.write_text(export_csv(two))
    assert export_csv(two) == "a,t,0,1\nb,u,2,3\n"
    assert read_reset_file(str(f), ["a", "b"]) == two
    f.write_text("t,zero,1\n")
    with pytest.raises(CliError, match="expected topic,partition,offset"):
        read_reset_file(str(f), ["g"])
