"""The summary table and the evidence directory of a run."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.e2e.checker.history import History
from tests.e2e.checker.liveness import LivenessResult
from tests.e2e.checker.nemesis import Fault
from tests.e2e.checker.timeline import Timeline, write_timeline
from tests.e2e.checker.verdicts import SAFETY, VerdictResult

EVIDENCE_ENV = "KAFKAPY_CHECKER_EVIDENCE"
EXAMPLES = 3


def evidence_dir(default_parent: Path, name: str) -> Path:
    """``$KAFKAPY_CHECKER_EVIDENCE/<name>-<UTC time>`` when set, else ``<default_parent>/
    evidence``."""
    root = os.environ.get(EVIDENCE_ENV)
    if root:
        safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "run"
        return Path(root) / f"{safe}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    return default_parent / "evidence"


@dataclass(slots=True)
class Outcome:
    """What a run found. ``assert_ok()`` fails with the summary table and the evidence path."""

    verdicts: dict[str, VerdictResult]
    liveness: list[LivenessResult]
    history: History
    faults: list[tuple[Fault, str]] = field(default_factory=list)
    own_faults: list[str] = field(default_factory=list)  # applied by the test itself
    unexpected_exits: list[str] = field(default_factory=list)
    seed: int | None = None
    fault_seconds: float = 0.0
    evidence: Path | None = None
    writers: dict[str, str] = field(default_factory=dict)  # writer name -> client

    def failed_safety(self, names: tuple[str, ...] = SAFETY) -> dict[str, int]:
        return {
            n: self.verdicts[n].count
            for n in names
            if n in self.verdicts and self.verdicts[n].count
        }

    def failed_liveness(self) -> list[str]:
        return [r.name for r in self.liveness if not r.ok]

    def assert_ok(self, safety: tuple[str, ...] = SAFETY, liveness: bool = True) -> None:
        bad = self.failed_safety(safety)
        dead = self.failed_liveness() if liveness else []
        if bad or dead:
            raise AssertionError(
                f"checker found {bad or 'no safety anomaly'}"
                + (f", liveness failed: {dead}" if dead else "")
                + f"\n{self.table()}"
            )

    def table(self) -> str:
        counts = self.history.counts()
        lines = [
            f"checker summary: seed {self.seed}, {len(self.faults) + len(self.own_faults)} "
            f"faults over "
            f"{self.fault_seconds:.0f}s; writes: {counts['acked']} acked "
            f"({self.history.acked_without_offset()} without an offset), {counts['failed']} "
            f"failed, {counts['unknown']} unknown; group: {len(self.history.reads)} reads, "
            f"{sum(c.ok for c in self.history.commits)} commits acked",
            f"{'verdict':<42} {'count':>7} {'checked':>9}  first example",
            "-" * 110,
        ]
        for v in self.verdicts.values():
            example = v.anomalies[0].detail if v.anomalies else ""
            lines.append(f"{v.name:<42} {v.count:>7} {v.checked:>9}  {example[:160]}")
        lines.append("-" * 110)
        for r in self.liveness:
            timed = r.ok and r.seconds is not None and not r.measure
            took = f"after {r.seconds:.1f}s" if timed else ""
            detail = r.detail if not r.ok or r.measure else ""
            lines.append(
                f"{'live: ' + r.name:<42} {'ok' if r.ok else 'FAILED':>7} {took:>9}  {detail[:300]}"
            )
        kinds = Counter(f.kind for f, _ in self.faults) + Counter(self.own_faults)
        lines.append(
            "faults: " + (", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())) or "none")
        )
        if self.unexpected_exits:
            lines.append(
                f"unexpected exits ({len(self.unexpected_exits)}): "
                + "; ".join(self.unexpected_exits[:5])
            )
        per_writer = Counter(
            (w.writer.split(".")[0], w.outcome) for w in self.history.writes.values()
        )
        lines.append(
            "writers: "
            + ", ".join(
                f"{name} ({self.writers.get(name, '?')}) {per_writer[(name, 'acked')]} acked"
                + (
                    f"/{per_writer[(name, 'failed')]} failed"
                    if per_writer[(name, "failed")]
                    else ""
                )
                for name in sorted({k[0] for k in per_writer})
            )
        )
        if self.evidence is not None:
            lines.append(f"evidence: {self.evidence}")
        return "\n".join(lines)

    def write_evidence(
        self,
        directory: Path,
        timeline: Timeline,
        logs_dir: Path | None,
        schedule: dict[str, object] | None = None,
    ) -> None:
        """summary.txt, anomalies.json, liveness.json, schedule.json, timeline.txt (faults
        merged with the services' leader/ISR/election/truncation lines), history/ and a copy
        of the services' logs."""
        self.evidence = directory
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "summary.txt").write_text(self.table() + "\n")
        (directory / "anomalies.json").write_text(
            json.dumps(
                {n: [a.detail for a in v.anomalies] for n, v in self.verdicts.items()}, indent=1
            )
            + "\n"
        )
        (directory / "liveness.json").write_text(
            json.dumps(
                [
                    {"name": r.name, "ok": r.ok, "seconds": r.seconds, "detail": r.detail}
                    for r in self.liveness
                ],
                indent=1,
            )
            + "\n"
        )
        if schedule is not None:
            (directory / "schedule.json").write_text(json.dumps(schedule, indent=1) + "\n")
        write_timeline(directory / "timeline.txt", timeline, logs_dir)
        self.history.dump(directory / "history")
        if logs_dir is not None and logs_dir.exists():
            shutil.copytree(logs_dir, directory / "service-logs", dirs_exist_ok=True)
