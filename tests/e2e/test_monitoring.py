"""Real monitoring of a loaded local cluster: Debian's ``prometheus`` (started by LocalCluster,
as ``kafka-py cluster up --prometheus`` starts it) scrapes every service through the file-based
discovery the cluster rewrites as processes stop and start, evaluates the shipped alert rules,
and answers every Grafana panel's query. One cluster and one Prometheus for the whole module.

**Rule templating.** The shipped ``deploy/prometheus/kafka-py-rules.yml`` keeps production
durations (``for: 1m``–``10m``, rate windows of 5–10 min). The test loads a temporary copy in
which only those durations are rewritten (``for:`` → 2 s, every ``[Nm]`` window → 10 s, see
``_fast_rules``); expressions, thresholds and labels are the shipped ones, unchanged.

Every shipped rule fires on a condition the test creates the way an operator meets it, and
resolves after; two of them:
- KafkaPyMultipleActiveControllers: ZooKeeper's single ``/controller`` node allows one active
  controller per cluster, so two come from a misconfiguration: controller-1 restarted with a
  ``zookeeper.connect`` naming another chroot is active in a cluster of its own while scraped
  (and labelled ``kafka_cluster``) as part of this one.
- KafkaPyGatewayRequestErrors: the gateway counts the error codes of its responses as Kafka's
  ErrorsPerSec does; an acks=all producer into a topic whose ISR fell below its
  min.insync.replicas (storage-2 down) gets NOT_ENOUGH_REPLICAS, while the leader moves the
  same kill causes (errors clients handle themselves) leave the rule quiet.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from services.cli.local_cluster import LocalCluster
from services.cli.local_cluster.prometheus import RULES_FILE, PrometheusOptions
from tests.integration.kafka_support import running_cluster, wait_for, wait_for_topic

pytestmark = pytest.mark.e2e

DASHBOARDS = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
LOAD, SINGLE, FILLER, STRICT = "mon-load", "mon-single", "mon-filler", "mon-strict"
GROUP = "mon-lagging"
PARTITIONS = 6
CAPACITY = 4 * 1024 * 1024  # kafkapy.storage.capacity.bytes of each node
FAST_FOR, FAST_WINDOW = "2s", "10s"
CREATED = {
    "KafkaPyUnderReplicatedPartitions",
    "KafkaPyOfflinePartitions",
    "KafkaPyNoActiveController",
    "KafkaPyIsrShrinking",
    "KafkaPyConsumerLagGrowing",
    "KafkaPyStorageDiskAlmostFull",
    "KafkaPyEventLoopLag",
    "KafkaPyMultipleActiveControllers",
    "KafkaPyGatewayRequestErrors",
}
STORAGE_FLAGS = [
    *("--kafkapy.storage.capacity.bytes", str(CAPACITY)),
    *("--kafkapy.usage.report.interval.ms", "500"),
    *("--replica.lag.time.max.ms", "1500"),
]
SERVICES = 8  # 3 storage, 2 controllers, 1 group and 1 transaction coordinator, 1 gateway


def _fast_rules(dest: Path) -> Path:
    """The shipped rules with short ``for:`` durations and range windows (nothing else)."""
    shipped = RULES_FILE.read_text()
    fast = re.sub(r"(\n\s+for:\s*)\S+", rf"\g<1>{FAST_FOR}", shipped)
    fast = re.sub(r"\[\d+m\]", f"[{FAST_WINDOW}]", fast)
    strip = re.compile(r"for:.*|\[\d+[ms]\]")
    assert strip.sub("", fast) == strip.sub("", shipped), "only durations may differ"
    dest.write_text(fast)
    return dest


class Prom:
    """The cluster's Prometheus HTTP API."""

    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as resp:
            doc = json.load(resp)
        assert doc["status"] == "success", doc
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.get("/api/v1/query", query=expr)["result"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.get("/api/v1/alerts")["alerts"])

    def firing(self, name: str, **labels: str) -> bool:
        return any(
            a["labels"]["alertname"] == name
            and a["state"] == "firing"
            and all(a["labels"].get(k) == v for k, v in labels.items())
            for a in self.alerts()
        )

    def active(self, name: str, **labels: str) -> bool:
        """Pending or firing (a resolved alert leaves /api/v1/alerts)."""
        return any(
            a["labels"]["alertname"] == name
            and all(a["labels"].get(k) == v for k, v in labels.items())
            for a in self.alerts()
        )

    def scraped(self) -> dict[str, str]:
        """instance -> health of the active targets."""
        return {
            t["labels"]["instance"]: t["health"]
            for t in self.get("/api/v1/targets")["activeTargets"]
        }


class Load:
    """A steady idempotent producer into LOAD, in a thread, until stopped."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent = 0

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20, "acks": "all"})
        while not self._stop.is_set():
            for i in range(20):
                p.produce(LOAD, key=str(self.sent + i).encode(), value=b"v" * 100)
            self.sent += 20
            p.poll(0)
            self._stop.wait(0.1)
        p.flush(10)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)


@dataclass
class Monitored:
    cluster: LocalCluster
    prom: Prom
    admin: AdminClient
    load: Load


@pytest.fixture(scope="module")
def monitored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Monitored]:
    tmp = tmp_path_factory.mktemp("monitoring")
    with running_cluster(
        tmp,
        gateways=1,
        storage_nodes=3,
        controllers=2,
        group_coordinators=1,
        transaction_coordinators=1,
        # a dead follower must leave the ISRs by its leaders' own shrink (counted in
        # isrshrinks; replica.lag.time.max.ms below) before the controller drops it when its
        # ZooKeeper session expires (not counted)
        zk_session_timeout_ms=6000,
        extra={
            "storage": STORAGE_FLAGS,
            "controller": ["--kafkapy.rebalance.check.interval.ms", "500"],
            "group_coordinator": ["--consumer.lag.refresh.interval.ms", "500"],
        },
        prometheus=PrometheusOptions(
            port=0,
            scrape_interval_s=0.5,
            evaluation_interval_s=0.5,
            rules=_fast_rules(tmp / "fast-rules.yml"),
        ),
    ) as cluster:
        assert cluster.prometheus_url is not None
        prom = Prom(cluster.prometheus_url)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for fut in admin.create_topics(
            [
                NewTopic(LOAD, PARTITIONS, 3),
                NewTopic(SINGLE, num_partitions=1, replica_assignment=[[2]]),  # RF 1, on storage-2
                # every replica needed for an acks=all write
                NewTopic(STRICT, 3, 3, config={"min.insync.replicas": "3"}),
            ],
            request_timeout=30,
        ).values():
            fut.result(30)
        wait_for_topic(admin, LOAD, PARTITIONS)
        wait_for_topic(admin, SINGLE, 1)
        wait_for_topic(admin, STRICT, 3)
        load = Load(cluster.bootstrap)  # started by the tests (the alerts test after "at rest")
        wait_for(
            f"Prometheus scraping all {SERVICES} services",
            lambda: list(prom.scraped().values()) == ["up"] * SERVICES,
            timeout=30,
        )
        try:
            yield Monitored(cluster, prom, admin, load)
        finally:
            load.stop()


def _commit(bootstrap: str, offsets: dict[int, int]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        c.commit(
            offsets=[TopicPartition(LOAD, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        c.close()


def _log_ends(bootstrap: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(LOAD, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
    finally:
        c.close()


def _wait(what: str, cond: Any, timeout: float = 60.0) -> float:
    t0 = time.monotonic()
    wait_for(what, cond, timeout=timeout, interval=0.25)
    return time.monotonic() - t0


def test_each_shipped_alert_fires_and_resolves(monitored: Monitored) -> None:
    c, prom = monitored.cluster, monitored.prom
    shipped = set(re.findall(r"alert:\s*(\S+)", RULES_FILE.read_text()))
    assert shipped == CREATED, "every shipped alert is exercised"
    # at rest nothing fires (right after Prometheus starts it has no series yet, and "no
    # controller" holds until the first scrapes land)
    at_rest = CREATED - {"KafkaPyEventLoopLag"}
    try:
        _wait("no alert at rest", lambda: not any(prom.active(n) for n in at_rest))
    except AssertionError as exc:  # say which ones (a loaded machine can make a rule pending)
        active = sorted({a["labels"]["alertname"] for a in prom.alerts()})
        raise AssertionError(f"{exc}; active at rest: {active}") from None
    took: dict[str, float] = {}
    # GROUP has committed offset 0 everywhere and never consumes: its lag grows with LOAD (so
    # this starts only after the at-rest check, or KafkaPyConsumerLagGrowing is right to fire)
    _commit(c.bootstrap, {p: 0 for p in range(PARTITIONS)})
    monitored.load.start()

    # 1. no controller at all; one service's event loop stalls 2 s; GROUP's lag keeps growing
    for i in (0, 1):
        c.kill("controller", i)
    c.kill("transaction_coordinator", 0, signal.SIGSTOP)
    time.sleep(2.0)
    c.kill("transaction_coordinator", 0, signal.SIGCONT)
    took["NoActiveController"] = _wait(
        "KafkaPyNoActiveController", lambda: prom.firing("KafkaPyNoActiveController")
    )
    # the file-SD targets followed the processes: the dead controllers are no longer scraped
    _wait(
        "the dead controllers dropped from the targets",
        lambda: not any(i.startswith("controller-") for i in prom.scraped()),
    )
    took["EventLoopLag"] = _wait(
        "KafkaPyEventLoopLag",
        lambda: prom.firing("KafkaPyEventLoopLag", instance="transaction_coordinator-0"),
    )
    took["ConsumerLagGrowing"] = _wait(
        "KafkaPyConsumerLagGrowing",
        lambda: prom.firing("KafkaPyConsumerLagGrowing", consumergroup=GROUP),
    )
    # both start together, controller-1 with another chroot: active in a cluster of its own
    c.start_process("controller", 0, wait=False)
    c.start_process("controller", 1, flags=["--zookeeper.connect", f"{c.zk_connect}/mon-wrong"])
    _wait("NoActiveController resolved", lambda: not prom.active("KafkaPyNoActiveController"))
    took["MultipleActiveControllers"] = _wait(
        "KafkaPyMultipleActiveControllers",
        lambda: prom.firing("KafkaPyMultipleActiveControllers", kafka_cluster=c.data_dir.name),
    )
    # fixed: back with the cluster's zookeeper.connect (a standby; ready while the test goes on)
    c.kill("controller", 1)
    c.start_process("controller", 1, wait=False)
    _wait(
        "MultipleActiveControllers resolved",
        lambda: not prom.active("KafkaPyMultipleActiveControllers"),
    )

    # 2. disks past 85 % of their (configured) capacity; a storage node dies
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 50})
    for fut in monitored.admin.create_topics([NewTopic(FILLER, 1, 3)]).values():
        fut.result(30)
    wait_for_topic(monitored.admin, FILLER, 1)
    for _ in range(45):  # ~4.3 MiB on each of the three nodes
        p.produce(FILLER, value=b"f" * 100_000)
        p.poll(0)
    assert p.flush(60) == 0
    c.kill("storage", 2)
    for name in (
        "KafkaPyStorageDiskAlmostFull",
        "KafkaPyUnderReplicatedPartitions",
        "KafkaPyOfflinePartitions",  # mon-single has its only replica on storage-2
        "KafkaPyIsrShrinking",
    ):
        took[name.removeprefix("KafkaPy")] = _wait(name, lambda n=name: prom.firing(n))
    _wait("storage-2 dropped from the targets", lambda: "storage-2" not in prom.scraped())
    # the leader moves so far (errors clients handle themselves) do not make it pending
    assert not prom.active("KafkaPyGatewayRequestErrors"), prom.query(
        "sum by (error) (increase(kafka_network_requestmetrics_errors_total[30s]))"
    )
    # acks=all into STRICT, whose ISRs (2 now) are below its min.insync.replicas (3): the
    # producer retries NOT_ENOUGH_REPLICAS every 50 ms
    strict = Producer(
        {
            "bootstrap.servers": c.bootstrap,
            "acks": "all",
            "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 50,
        }
    )
    for part in range(3):
        strict.produce(STRICT, value=b"s", partition=part)
    strict.poll(0)
    took["GatewayRequestErrors"] = _wait(
        "KafkaPyGatewayRequestErrors", lambda: prom.firing("KafkaPyGatewayRequestErrors")
    )
    assert prom.query(
        'kafka_network_requestmetrics_errors_total{request="Produce",error="NOT_ENOUGH_REPLICAS"}'
    )
    strict.purge()
    strict.flush(10)

    # 3. heal: node back, filler gone, load stopped and GROUP caught up -> every alert resolves
    c.start_process("storage", 2)
    for fut in monitored.admin.delete_topics([FILLER]).values():
        fut.result(30)
    monitored.load.stop()
    _commit(c.bootstrap, _log_ends(c.bootstrap))
    resolved = {
        "KafkaPyUnderReplicatedPartitions": {},
        "KafkaPyOfflinePartitions": {},
        "KafkaPyIsrShrinking": {},
        "KafkaPyStorageDiskAlmostFull": {},
        "KafkaPyGatewayRequestErrors": {},
        "KafkaPyConsumerLagGrowing": {"consumergroup": GROUP},
        # other services may stall on a loaded machine: only the one stopped here must clear
        "KafkaPyEventLoopLag": {"instance": "transaction_coordinator-0"},
    }
    t0 = time.monotonic()
    for name, labels in resolved.items():
        _wait(f"{name} resolved", lambda n=name, lb=labels: not prom.active(n, **lb), 90)
    took["all resolved"] = time.monotonic() - t0
    _wait("storage-2 scraped again", lambda: prom.scraped().get("storage-2") == "up")
    print("seconds until firing / resolved:", {k: round(v, 1) for k, v in took.items()})


# ---- Grafana dashboards (deploy/grafana) ---------------------------------------------------

RATE_INTERVAL = "10s"  # what Grafana's $__rate_interval gives at least here (4 scrapes and more)
_LABEL_VALUES = re.compile(r"^label_values\((?:(.*),\s*)?(\w+)\)$")
_REGEX_META = re.compile(r"([.^$*+?()\[\]{}|\\])")


def _dashboards() -> dict[str, dict[str, Any]]:
    files = sorted(DASHBOARDS.iterdir())
    assert files and all(f.suffix == ".json" for f in files), "deploy/grafana holds dashboards only"
    return {f.name: json.loads(f.read_text()) for f in files}


def _expand(expr: str, values: dict[str, list[str]]) -> str:
    """Grafana's interpolation of a multi-value "All" selection in a regex matcher:
    ``$var`` / ``${var}`` -> ``(v1|v2|...)``, each value regex-escaped in PromQL's string."""
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    for name, vals in values.items():
        alternation = "(" + "|".join(_REGEX_META.sub(r"\\\\\1", v) for v in vals) + ")"
        expr = expr.replace("${" + name + "}", alternation)
        expr = re.sub(r"\$" + name + r"\b", lambda _m, a=alternation: a, expr)
    assert "$" not in expr, f"unexpanded variable in {expr}"
    return expr


def _variables(prom: Prom, board: dict[str, Any]) -> dict[str, list[str]]:
    """Each query variable's real label values, in order (later ones may use earlier ones)."""
    values: dict[str, list[str]] = {}
    for var in board["templating"]["list"]:
        if var["type"] == "datasource":
            continue
        assert var["type"] == "query", var
        m = _LABEL_VALUES.match(var["query"]["query"])
        assert m and m.group(1), f"{var['name']}: label_values(<metric selector>, <label>) expected"
        selector, label = _expand(m.group(1), values), m.group(2)
        got = sorted({s["metric"][label] for s in prom.query(f"group by ({label}) ({selector})")})
        assert got, f"variable {var['name']}: no values for {selector}"
        values[var["name"]] = got
    return values


def _check_schema(name: str, board: dict[str, Any]) -> list[tuple[str, str]]:
    """Grafana's dashboard model as the chart's ConfigMap and an import need it; returns
    (panel title, expr) of every query."""
    assert board["__inputs"][0]["name"] == "DS_PROMETHEUS", name
    ds = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    assert [(v["name"], v["query"]) for v in ds] == [("DS_PROMETHEUS", "prometheus")], name
    cluster = next(v for v in board["templating"]["list"] if v["name"] == "kafka_cluster")
    assert cluster["includeAll"] and cluster["allValue"] == ".*", name  # unlabelled series too
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 36, name
    panels = [p for p in board["panels"] if p["type"] != "row"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), f"{name}: panel ids repeat"
    queries = []
    for p in panels:
        assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, p["title"]
        assert p["targets"] and {"x", "y", "w", "h"} <= set(p["gridPos"]), p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]
            # the cluster selector (the alert rules' kafka_cluster) applies to every query
            assert 'kafka_cluster=~"$kafka_cluster"' in t["expr"], p["title"]
            queries.append((p["title"], t["expr"]))
    return queries


def test_every_dashboard_panel_query_returns_series(monitored: Monitored) -> None:
    c, prom = monitored.cluster, monitored.prom
    boards = _dashboards()
    assert len({b["uid"] for b in boards.values()}) == len(boards)
    # load: the producer again, and a group that consumes and commits (bytes out, commit rates)
    monitored.load.start()
    stop = threading.Event()

    def consume() -> None:
        cons = Consumer(
            {
                "bootstrap.servers": c.bootstrap,
                "group.id": "mon-consuming",
                "auto.offset.reset": "earliest",
                "auto.commit.interval.ms": 500,
            }
        )
        cons.subscribe([LOAD])
        while not stop.is_set():
            cons.poll(0.2)
        cons.close()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    try:
        wanted = {
            (name, title, expr)
            for name, board in boards.items()
            for title, expr in _check_schema(name, board)
        }
        _wait(
            "the consuming group's lag in Prometheus",
            lambda: prom.query('kafka_consumergroup_current_offset{consumergroup="mon-consuming"}'),
        )

        def empty() -> list[tuple[str, str, str]]:
            out = []
            for name, board in boards.items():
                values = _variables(prom, board)
                out += [
                    (n, t, q)
                    for n, t, e in sorted(wanted)
                    if n == name and not prom.query(q := _expand(e, values))
                ]
            return out

        # rate() needs two scrapes inside its window: a query may be empty for a few seconds
        deadline = time.monotonic() + 30
        while (missing := empty()) and time.monotonic() < deadline:
            time.sleep(1)
        assert not missing, "panels whose query returns no series:\n" + "\n".join(
            f"{n} / {t}: {q}" for n, t, q in missing
        )
        print(f"{len(wanted)} panel queries of {len(boards)} dashboards returned series")
    finally:
        stop.set()
        consumer.join(10)
        monitored.load.stop()
