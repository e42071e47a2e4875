"""The controller's view of topics, read from ZooKeeper (what ``kafka-topics.sh`` shows).

Metadata names gateways as partition leaders (docs/architecture.md), so an operator's view of
leaders, replicas and ISRs comes from where the controller writes them: ``/brokers/topics/<t>``
(replica assignment, reassignment, topic id), ``/brokers/topics/<t>/partitions/<p>/state``
(leader, ISR) and ``/brokers/ids`` (live storage nodes). The CLI is a short-lived process, so it
uses kazoo's blocking client.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from services.cli.common import CliError, client_logger
from services.cli.zk_client import open_zk
from services.common.zk import layout
from services.common.zk.security import ZkSecurity

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class PartitionState:
    partition: int
    leader: int | None  # None: no leader (-1 in ZooKeeper, or no state node yet)
    replicas: list[int]
    isr: list[int]
    adding: list[int]
    removing: list[int]

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)


@dataclass(frozen=True, slots=True)
class TopicState:
    name: str
    topic_id: str | None
    partitions: list[PartitionState]
    marked_for_deletion: bool


@dataclass(frozen=True, slots=True)
class ClusterState:
    live_brokers: frozenset[int]
    topics: dict[str, TopicState]


@contextmanager
def connected(
    zk_connect: str, timeout_s: float, security: ZkSecurity | None = None
) -> Iterator[KazooClient]:
    """A started kazoo client (chroot included), stopped on exit; one-line errors.
    ``security``: the environment's (zk_client) by default."""
    # kazoo logs connection trouble; it goes where the client libraries' logs go (--verbose)
    try:
        client = open_zk(
            zk_connect, timeout_s, security, logger=client_logger(False), read_only=True
        )
    except CliError as exc:
        raise CliError(f"{exc} (give its address with --zookeeper)") from None
    try:
        yield client
    finally:
        client.stop()
        client.close()


def read_cluster(
    zk_connect: str, names: Iterable[str], timeout_s: float, security: ZkSecurity | None = None
) -> ClusterState:
    """Partition states of ``names`` (topics missing from ZooKeeper are left out)."""
    with connected(zk_connect, timeout_s, security) as client:
        return read_state(client, list(names))


def read_state(client: KazooClient, names: list[str]) -> ClusterState:
    """Partition states of ``names`` through a started client."""
    try:
        live = frozenset(int(i) for i in client.get_children(layout.BROKER_IDS) if i.isdigit())
    except NoNodeError:
        live = frozenset()
    # Every znode is asked for at once (kazoo pipelines async calls on its one connection),
    # so thousands of partitions cost one round trip's wait, not one each.
    assignments = {name: client.get_async(layout.topic_path(name)) for name in names}
    marked = {name: client.exists_async(layout.delete_topic_path(name)) for name in names}
    parsed: dict[str, tuple[dict[str, object], dict[int, list[int]], str | None]] = {}
    states = {}
    for name in names:
        try:
            data, _ = assignments[name].get()
        except NoNodeError:
            continue
        assignment, topic_id = layout.parse_topic_assignment(data)
        parsed[name] = (layout.loads(data) or {}, assignment, topic_id)
        for p in assignment:
            states[(name, p)] = client.get_async(layout.partition_state_path(name, p))
    topics: dict[str, TopicState] = {}
    for name, (body, assignment, topic_id) in parsed.items():
        adding = _ids_by_partition(body.get("adding_replicas"))
        removing = _ids_by_partition(body.get("removing_replicas"))
        parts = []
        for p, replicas in sorted(assignment.items()):
            leader: int | None = None
            isr: list[int] = []
            try:
                raw, _ = states[(name, p)].get()
                state = layout.PartitionStateZk.from_json(raw)
                leader = None if state.leader == NO_LEADER else state.leader
                isr = state.isr
            except NoNodeError:
                pass  # not elected yet
            parts.append(
                PartitionState(p, leader, replicas, isr, adding.get(p, []), removing.get(p, []))
            )
        topics[name] = TopicState(name, topic_id, parts, marked[name].get() is not None)
    return ClusterState(live, topics)


def _ids_by_partition(raw: object) -> dict[int, list[int]]:
    if not isinstance(raw, dict):
        return {}
    return {int(p): [int(b) for b in ids] for p, ids in raw.items()}


@dataclass(frozen=True, slots=True)
class NodesView:
    """Who is registered: the active controller, storage nodes (``/brokers/ids``) and gateways."""

    controller_id: int | None
    storage: dict[int, layout.BrokerRegistration]
    gateways: dict[int, layout.Endpoint]


def read_nodes(client: KazooClient) -> NodesView:
    """The active controller and the registered storage nodes and gateways."""

    def children(path: str) -> list[int]:
        try:
            return sorted(int(c) for c in client.get_children(path) if c.isdigit())
        except NoNodeError:
            return []

    storage = {}
    for i in children(layout.BROKER_IDS):
        try:
            storage[i] = layout.BrokerRegistration.from_json(
                i, client.get(layout.broker_path(i))[0]
            )
        except NoNodeError:
            continue  # gone meanwhile
    gateways = {}
    for i in children(layout.GATEWAYS):
        try:
            gateways[i] = layout.Endpoint.from_json(i, client.get(layout.gateway_path(i))[0])
        except NoNodeError:
            continue
    try:
        body = layout.loads(client.get(layout.CONTROLLER)[0]) or {}
        controller: int | None = int(body["brokerid"])
    except (NoNodeError, KeyError, TypeError, ValueError):
        controller = None
    return NodesView(controller, storage, gateways)
