"""Faults on a LocalCluster from a seeded, reproducible schedule.

A ``Schedule`` is a list of ``Fault``s — kill -9 then restart, SIGSTOP then SIGCONT, SIGTERM
then restart — each on a role (storage, controller, gateway, group_coordinator, zookeeper) and
a target: a process index drawn from the seed, or ``"active"`` (the active controller, read
from ZooKeeper's ``/controller`` when the fault starts). ``Schedule.mixed(seed, ...)`` draws
every fault class at least once (ZooKeeper paused past the session timeout several times, and
killed -9 then restarted once) and
fills the rest of the duration with random ones; the same seed gives the same schedule.

The ``Nemesis`` thread applies one fault at a time and notes each step in the timeline. A
restart does not wait for readiness (the next fault may hit a process still starting; the
timeline notes when it became ready). Between faults it runs the LocalCluster's ``Supervisor`` (what ``kafka-py cluster up`` does),
so a process that exits by itself is restarted and the exit is recorded as an
``unexpected exit``. ``heal()`` resumes and restarts everything and waits until it is ready.
"""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from services.cli.local_cluster import ZOOKEEPER, LocalCluster, LocalClusterError
from services.cli.probes import http_ready, kafka_answers
from services.cli.supervisor import Supervisor, split_name
from tests.e2e.checker.timeline import Timeline

KILL, PAUSE, RESTART = "kill", "pause", "restart"
ACTIVE = "active"
ANY = "*"  # a class's role drawn from the services when the schedule is made
_VERBS = {KILL: "kill -9", PAUSE: "SIGSTOP", RESTART: "SIGTERM"}
SERVICES = ("storage", "controller", "gateway", "group_coordinator")
#: every fault class of the mixed schedule: (action, role)
FAULT_CLASSES: tuple[tuple[str, str], ...] = (
    *((KILL, r) for r in SERVICES),
    *((PAUSE, r) for r in SERVICES),
    (PAUSE, ZOOKEEPER),
    (KILL, ZOOKEEPER),  # then restarted on its data dir: sessions and znodes come back from disk
    (RESTART, ANY),
)


@dataclass(frozen=True, slots=True)
class Fault:
    at: float  # seconds after the nemesis starts
    action: str  # kill | pause | restart
    role: str
    target: str  # a process index, or "active" (controllers)
    hold: float  # seconds down (kill, restart) or stopped (pause)
    required: bool = True  # False: a filler the nemesis drops once the schedule's time is up

    @property
    def kind(self) -> str:
        """The fault class, e.g. ``"SIGSTOP zookeeper"``."""
        return f"{_VERBS[self.action]} {self.role}"

    def describe(self) -> str:
        verb = _VERBS[self.action]
        who = self.role if self.role == ZOOKEEPER else f"{self.role} {self.target}"
        return f"{verb} {who} for {self.hold:.1f}s"


@dataclass(slots=True)
class Schedule:
    seed: int
    faults: list[Fault] = field(default_factory=list)
    duration: float = 0.0  # the nemesis skips faults not required once this much time passed

    @property
    def span(self) -> float:
        """Seconds from the nemesis start to the end of the last fault."""
        return max((f.at + f.hold for f in self.faults), default=0.0)

    def as_json(self) -> dict[str, object]:
        return {
            "seed": self.seed,
            "duration": self.duration,
            "faults": [asdict(f) for f in self.faults],
        }

    @classmethod
    def mixed(
        cls,
        seed: int,
        layout: Mapping[str, int],
        *,
        duration: float = 90.0,
        session_timeout_s: float = 3.0,
        zookeeper_pauses: int = 3,
        classes: tuple[tuple[str, str], ...] = FAULT_CLASSES,
        gap: tuple[float, float] = (1.0, 2.5),
        hold: tuple[float, float] = (1.0, 3.5),
    ) -> Schedule:
        """Every class in ``classes`` once (``ANY`` role: one drawn from the services),
        ZooKeeper paused past ``session_timeout_s`` ``zookeeper_pauses`` times (1.3-2.5x the
        timeout; a kill -9 of ZooKeeper keeps it down as long), in a seeded order; then random classes (not required) until the faults
        span ``duration`` seconds. ``layout``: role -> process count (a class whose role has
        no process is left out)."""
        rnd = random.Random(seed)
        live = [r for r in SERVICES if layout.get(r, 0) > 0]
        usable = [c for c in classes if c[1] in (ZOOKEEPER, ANY) or c[1] in live]
        todo = list(usable)
        todo += [(PAUSE, ZOOKEEPER)] * max(0, zookeeper_pauses - todo.count((PAUSE, ZOOKEEPER)))
        rnd.shuffle(todo)
        faults: list[Fault] = []
        at = rnd.uniform(*gap)
        end = 0.0  # where the last fault ends
        while todo or end < duration:
            required = bool(todo)
            action, role = todo.pop() if todo else rnd.choice(usable)
            if role == ANY:
                role = rnd.choice(live)
            if role == ZOOKEEPER:
                held = session_timeout_s * rnd.uniform(1.3, 2.5)
                target = "0"
            else:
                held = rnd.uniform(*hold)
                target = (
                    ACTIVE
                    if role == "controller" and rnd.random() < 0.8
                    else str(rnd.randrange(layout[role]))
                )
            faults.append(Fault(round(at, 2), action, role, target, round(held, 2), required))
            end = at + held
            at = end + rnd.uniform(*gap)
        return cls(seed, faults, duration)


class Nemesis:
    """Applies a schedule from its own thread: ``start()``, ``join()``, then ``heal()``."""

    def __init__(
        self,
        cluster: LocalCluster,
        schedule: Schedule,
        timeline: Timeline,
        *,
        restart_timeout: float = 60.0,
    ) -> None:
        self.cluster = cluster
        self.schedule = schedule
        self.timeline = timeline
        self.restart_timeout = restart_timeout
        self.applied: list[tuple[Fault, str]] = []  # (fault, the process it hit)
        self.unexpected_exits: list[str] = []
        self.supervisor = Supervisor(
            cluster, self._supervisor_log, max_restarts=10, ready_timeout=restart_timeout
        )
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self._crash: BaseException | None = None
        self._starting: dict[str, float] = {}  # restarted, not ready yet: name -> when
        self.started_at = 0.0
        self.ended_at = 0.0

    def _supervisor_log(self, text: str) -> None:
        if "exited unexpectedly" in text:
            self.unexpected_exits.append(text)
        self.timeline.note("supervisor", text)

    def start(self) -> None:
        self.started_at = time.monotonic()
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)
        if self._crash is not None:
            raise RuntimeError("the nemesis crashed") from self._crash

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(self.restart_timeout + 30)

    # ---- running --------------------------------------------------------------------
    def _run(self) -> None:
        try:
            for fault in self.schedule.faults:
                while not self._halt.is_set():
                    left = self.started_at + fault.at - time.monotonic()
                    if left <= 0:
                        break
                    self._tick()
                    self._halt.wait(min(left, 0.5))
                if self._halt.is_set():
                    return
                elapsed = time.monotonic() - self.started_at
                if not fault.required and elapsed >= self.schedule.duration:
                    self.timeline.note("nemesis", f"time is up: skip {fault.describe()}")
                    continue
                self._apply(fault)
                self._poll_starting()
            self._tick()
        except BaseException as exc:  # noqa: BLE001 - surfaced by join()
            self._crash = exc
            self.timeline.note("nemesis", f"crashed: {exc!r}")
        finally:
            self.ended_at = time.monotonic()

    def _resolve(self, fault: Fault) -> int | None:
        if fault.role == ZOOKEEPER:
            return 0
        if fault.target == ACTIVE:
            try:
                active = self.cluster.active_controller_index(timeout=3)
            except Exception as exc:  # noqa: BLE001 - ZooKeeper may be unreachable
                self.timeline.note("nemesis", f"cannot read /controller: {exc!r}")
                active = None
            if active is None:
                self.timeline.note("nemesis", "no active controller in /controller; using 0")
                return 0
            return active
        return int(fault.target)

    def _apply(self, fault: Fault) -> None:
        index = self._resolve(fault)
        assert index is not None
        name = ZOOKEEPER if fault.role == ZOOKEEPER else f"{fault.role}-{index}"
        running = self.cluster.pids()
        if name not in running:
            self.timeline.note("nemesis", f"skip {fault.describe()}: {name} is not running")
            return
        self.applied.append((fault, name))
        what = fault.describe().replace(f"{fault.role} {fault.target}", name)
        self.timeline.note("nemesis", f"FAULT {what}")
        if fault.action == PAUSE:
            self.cluster.kill(fault.role, index, signal.SIGSTOP)
            self._halt.wait(fault.hold)
            with contextlib.suppress(LocalClusterError):
                self.cluster.kill(fault.role, index, signal.SIGCONT)
            self.timeline.note("nemesis", f"SIGCONT {name}")
            return
        if fault.action == KILL:
            self.cluster.kill(fault.role, index, signal.SIGKILL)
        else:
            self.cluster.kill(fault.role, index, signal.SIGTERM)
            started = time.monotonic()
            try:
                code = self.cluster.wait_exit(fault.role, index, timeout=20)
                took = time.monotonic() - started
                self.timeline.note(
                    "nemesis", f"{name} exited with {code} {took:.1f}s after SIGTERM"
                )
            except LocalClusterError:
                self.timeline.note("nemesis", f"{name} still running 20s after SIGTERM: kill -9")
                self.cluster.kill(fault.role, index, signal.SIGKILL)
        self._halt.wait(fault.hold)
        self._restart(fault.role, index)

    def _restart(self, role: str, index: int, *, wait: bool = False) -> None:
        """Start a process again. Without ``wait`` the nemesis goes on while it starts (the
        next fault may hit it starting up); ``_poll_starting`` notes when it is ready."""
        name = ZOOKEEPER if role == ZOOKEEPER else f"{role}-{index}"
        started = time.monotonic()
        try:
            self.cluster.start_process(role, index, timeout=self.restart_timeout, wait=wait)
        except LocalClusterError as exc:
            self.timeline.note("nemesis", f"restart of {name} failed: {exc.one_line()}")
            return
        if wait or role == ZOOKEEPER:  # start_process waits for ZooKeeper anyway
            took = time.monotonic() - started
            self.timeline.note("nemesis", f"{name} restarted, ready in {took:.1f}s")
        else:
            self.timeline.note("nemesis", f"{name} restarting")
            self._starting[name] = started

    def _poll_starting(self) -> None:
        """Note the processes restarted without waiting that became ready (or died)."""
        if not self._starting:
            return
        info = {p.name: p for p in self.cluster.processes()}
        for name, started in list(self._starting.items()):
            p = info[name]
            if not p.running:
                del self._starting[name]  # the supervisor takes it from here
                self.timeline.note("nemesis", f"{name} exited while starting")
            elif _ready(self.cluster.host, p.role, p.port, p.admin_port):
                del self._starting[name]
                took = time.monotonic() - started
                self.timeline.note("nemesis", f"{name} ready {took:.1f}s after its restart")

    def _tick(self) -> None:
        self._poll_starting()
        self.supervisor.tick()

    # ---- heal -----------------------------------------------------------------------
    def heal(self, timeout: float | None = None) -> None:
        """SIGCONT every process, restart every one that is down (ZooKeeper first) and wait
        until every restarted process is ready (up to ``timeout``, default restart_timeout)."""
        self.stop()
        self.timeline.note("nemesis", "HEAL: resume and restart everything")
        for name in self.cluster.pids():
            role, index = split_name(name)
            with contextlib.suppress(LocalClusterError):
                self.cluster.kill(role, index, signal.SIGCONT)
        for name in sorted(self.cluster.exited(), key=lambda n: n != ZOOKEEPER):
            role, index = split_name(name)
            self.timeline.note("nemesis", f"{name} is down at the heal")
            self._restart(role, index)
        deadline = time.monotonic() + (timeout or self.restart_timeout)
        while self._starting and time.monotonic() < deadline:
            self._poll_starting()
            time.sleep(0.2)
        for name in self._starting:
            self.timeline.note("nemesis", f"{name} still not ready at the end of the heal")


def _ready(host: str, role: str, port: int, admin_port: int | None) -> bool:
    """LocalCluster's own readiness test: /readyz, and a Kafka answer from a gateway."""
    if admin_port is None or not http_ready(host, admin_port, "/readyz", timeout=1.0):
        return False
    return role != "gateway" or kafka_answers(host, port, timeout=1.0)
