"""The run's own events (faults, heals, writer incidents), merged at the end with the lines of
the services' logs that explain leadership: elections, leader and ISR changes, truncations,
controller resignations, ZooKeeper session events, shard moves, warnings and errors.

Service logs are structlog JSON lines with an ISO UTC ``timestamp`` (one file per process in
the LocalCluster's ``logs/``). ``SERVICE_EVENTS`` is the pattern of the events kept; extend it
when a new anomaly needs other lines.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

SERVICE_EVENTS = re.compile(
    r"leader|isr|elect|truncat|resign|controller|session|suspend|lost|expired|fenc|shard|"
    r"recover|register|offline|stopp|shutting|started|coordinator|exited",
    re.IGNORECASE,
)
#: kept out even though SERVICE_EVENTS matches: one line per shard on every election (the
#: coordinators' own "Elected as the group coordinator" lines tell the same)
SERVICE_NOISE = re.compile(r"^shard \d+ of __consumer_offsets moved")
_SKIP_KEYS = {"timestamp", "event", "level", "service", "node_id"}


@dataclass(frozen=True, slots=True)
class Event:
    at: float  # wall clock, seconds since the epoch
    source: str
    text: str

    def line(self, origin: float) -> str:
        stamp = datetime.fromtimestamp(self.at, UTC).strftime("%H:%M:%S.%f")[:-3]
        return f"{stamp} {self.at - origin:+9.3f}s  {self.source:<22} {self.text}"


class Timeline:
    """Thread-safe list of the run's events (wall-clock stamped)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self.origin = time.time()

    def note(self, source: str, text: str) -> Event:
        e = Event(time.time(), source, text)
        with self._lock:
            self.events.append(e)
        return e

    def snapshot(self) -> list[Event]:
        with self._lock:
            return list(self.events)


def service_events(logs_dir: Path, since: float = 0.0) -> list[Event]:
    """The interesting lines of every ``*.log`` in ``logs_dir`` (see ``SERVICE_EVENTS``)."""
    out: list[Event] = []
    for path in sorted(logs_dir.glob("*.log")):
        source = path.stem
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for raw in text.splitlines():
            if not raw.startswith("{"):
                continue
            try:
                entry = json.loads(raw)
                at = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp()
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            if at < since:
                continue
            event = str(entry.get("event", ""))
            level = str(entry.get("level", ""))
            important = level in ("warning", "error", "critical")
            if not important and (not SERVICE_EVENTS.search(event) or SERVICE_NOISE.search(event)):
                continue
            extra = " ".join(
                f"{k}={json.dumps(v, separators=(',', ':'))}"
                for k, v in entry.items()
                if k not in _SKIP_KEYS
            )
            prefix = "" if level in ("info", "debug", "") else f"[{level}] "
            out.append(Event(at, source, f"{prefix}{event} {extra}".rstrip()))
    return out


def merged(timeline: Timeline, logs_dir: Path | None) -> list[Event]:
    events = timeline.snapshot()
    if logs_dir is not None and logs_dir.exists():
        events += service_events(logs_dir, since=timeline.origin - 1.0)
    return sorted(events, key=lambda e: e.at)


def write_timeline(path: Path, timeline: Timeline, logs_dir: Path | None) -> int:
    """Write the merged timeline; returns its number of lines."""
    events = merged(timeline, logs_dir)
    with open(path, "w") as f:
        f.write("# wall clock (UTC)   since start   source   event\n")
        for e in events:
            f.write(e.line(timeline.origin) + "\n")
    return len(events)
