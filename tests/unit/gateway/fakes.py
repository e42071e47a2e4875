"""Fakes for gateway unit tests: metadata, storage stubs, controller, request contexts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from services.common.errors import ErrorCode
from services.common.metadata_cache import MetadataCache
from services.common.protocol import SUPPORTED_VERSIONS
from services.common.rpc.kafkapy.v1 import controller_pb2 as cpb
from services.common.rpc.kafkapy.v1 import storage_pb2 as spb
from services.common.zk import layout
from services.gateway.context import GatewayServices, RequestContext
from services.gateway.controller_client import ControllerClient
from services.gateway.offsets_cache import OffsetsCache
from services.gateway.settings import GatewaySettings

TOPIC_ID = "Z3a2Ehp5QCKsVQTTFPE3xA"  # Kafka's Uuid.toString() form


def settings(**overrides: Any) -> GatewaySettings:
    return GatewaySettings.load([], env={}, **{"node_id": 1, **overrides})


def add_topic(
    cache: MetadataCache,
    name: str,
    partitions: dict[int, Sequence[int]],
    leaders: dict[int, int] | None = None,
    config: dict[str, str] | None = None,
    topic_id: str | None = TOPIC_ID,
    epoch: int = 3,
) -> None:
    """Publish a topic the way the ZooKeeper watches would (assignment, states, config)."""
    cache.apply_topic_names(set(cache._raw) | {name})
    cache.apply_assignment(
        name, layout.topic_assignment_json({p: list(r) for p, r in partitions.items()}, topic_id)
    )
    for p, replicas in partitions.items():
        leader = (leaders or {}).get(p, replicas[0] if replicas else -1)
        cache.apply_partition_state(
            name, p, layout.PartitionStateZk(leader, epoch, list(replicas), 1).to_json(), version=1
        )
    cache.apply_topic_config(name, layout.topic_config_json(config or {}) if config else None)


def add_brokers(cache: MetadataCache, *ids: int) -> None:
    for i in ids:
        cache.apply_broker(
            i, layout.BrokerRegistration(i, "127.0.0.1", 7000 + i, f"z{i}").to_json()
        )


def add_gateway(cache: MetadataCache, node_id: int, rack: str | None, port: int = 0) -> None:
    cache.apply_gateway(
        node_id, layout.Endpoint(node_id, "127.0.0.1", port or 9000 + node_id, rack).to_json()
    )


class FakeStorageNode:
    """A storage stub: each method records its requests and answers through a handler."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.calls: list[tuple[str, Any]] = []
        self.append_handler: Callable[[Any], Awaitable[Any]] | None = None
        self.fetch_handler: Callable[[Any], Awaitable[Any]] | None = None
        self.list_offsets_handler: Callable[[Any], Awaitable[Any]] | None = None
        self.producers_handler: Callable[[Any], Awaitable[Any]] | None = None
        self.delete_records_error: BaseException | None = None
        self.epoch_error: BaseException | None = None

    async def Append(self, request: Any, timeout: float | None = None) -> Any:  # noqa: N802, ASYNC109
        if isinstance(request, list):  # buffers of a serialized request (append_request_parts)
            request = b"".join(request)
        if isinstance(request, bytes):  # serialized by the gateway, as storage's server reads it
            request = spb.AppendRequest.FromString(request)
        self.calls.append(("Append", request))
        if self.append_handler is not None:
            return await self.append_handler(request)
        return spb.AppendResponse(
            partitions=[
                spb.PartitionAppendResult(
                    topic=p.topic,
                    partition=p.partition,
                    base_offset=100 + i,
                    log_append_time_ms=-1,
                    log_start_offset=0,
                )
                for i, p in enumerate(request.partitions)
            ]
        )

    async def Fetch(self, request: Any, timeout: float | None = None) -> Any:  # noqa: N802, ASYNC109
        self.calls.append(("Fetch", request))
        assert self.fetch_handler is not None
        return await self.fetch_handler(request)

    async def DescribeLogDirs(self, request: Any, timeout: float | None = None) -> Any:  # noqa: N802, ASYNC109
        """One dir ``/data/<id>`` holding partition ``a``-0 (when asked for)."""
        self.calls.append(("DescribeLogDirs", request))
        d = spb.LogDirInfo(path=f"/data/{self.node_id}", total_bytes=100, usable_bytes=40)
        if request.all_topics or any(t.topic == "a" and 0 in t.partitions for t in request.topics):
            d.replicas.add(topic="a", partition=0, size=10, offset_lag=0)
        return spb.DescribeLogDirsResponse(broker_id=self.node_id, log_dirs=[d])

    async def ListOffsets(self, request: Any, timeout: float | None = None) -> Any:  # noqa: N802, ASYNC109
        self.calls.append(("ListOffsets", request))
        assert self.list_offsets_handler is not None
        return await self.list_offsets_handler(request)

    async def DeleteRecords(self, request: Any, timeout: float | None = None) -> Any:  # noqa: N802, ASYNC109
        """Answers every partition with its requested offset as the low watermark (or raises
        ``delete_records_error``)."""
        self.calls.append(("DeleteRecords", (request, timeout)))
        if self.delete_records_error is not None:
            raise self.delete_records_error
        return spb.DeleteRecordsResponse(
            partitions=[
                spb.PartitionDeleteRecordsResult(
                    topic=q.topic, partition=q.partition, low_watermark=q.offset
                )
                for q in request.partitions
            ]
        )

    async def DescribeProducers(self, request: Any, timeout: float | None = None) -> Any:  # noqa: N802, ASYNC109
        """One producer (id 7, epoch 1) with a transaction open at offset 3 in each partition
        (or what ``producers_handler`` answers)."""
        self.calls.append(("DescribeProducers", request))
        if self.producers_handler is not None:
            return await self.producers_handler(request)
        return spb.DescribeProducersResponse(
            partitions=[
                spb.DescribeProducersPartitionResult(
                    topic=q.topic,
                    partition=q.partition,
                    active_producers=[
                        spb.ActiveProducer(
                            producer_id=7,
                            producer_epoch=1,
                            last_sequence=4,
                            last_timestamp=1000,
                            coordinator_epoch=-1,
                            current_txn_start_offset=3,
                        )
                    ],
                )
                for q in request.partitions
            ]
        )

    async def WriteTxnMarkers(self, request: Any, timeout: float | None = None) -> Any:  # noqa: N802, ASYNC109
        """Every marker lands at offset 9."""
        self.calls.append(("WriteTxnMarkers", request))
        return spb.WriteTxnMarkersResponse(
            markers=[
                spb.WritableTxnMarkerResult(
                    producer_id=m.producer_id,
                    partitions=[
                        spb.TxnMarkerPartitionResult(topic=q.topic, partition=q.partition, offset=9)
                        for q in m.partitions
                    ],
                )
                for m in request.markers
            ]
        )

    async def OffsetForLeaderEpoch(self, request: Any, timeout: float | None = None) -> Any:  # noqa: N802, ASYNC109
        """Epoch e ends at offset 100 * (e + 1); a current leader epoch above 5 is fenced."""
        self.calls.append(("OffsetForLeaderEpoch", request))
        if self.epoch_error is not None:
            raise self.epoch_error
        return spb.OffsetForLeaderEpochResponse(
            partitions=[
                spb.EpochEndOffset(
                    topic=q.topic,
                    partition=q.partition,
                    error_code=ErrorCode.UNKNOWN_LEADER_EPOCH if q.current_leader_epoch > 5 else 0,
                    leader_epoch=q.leader_epoch if q.current_leader_epoch <= 5 else -1,
                    end_offset=100 * (q.leader_epoch + 1) if q.current_leader_epoch <= 5 else -1,
                )
                for q in request.partitions
            ]
        )


class FakeStorage:
    def __init__(self, cache: MetadataCache) -> None:
        self.cache = cache
        self.nodes: dict[int, FakeStorageNode] = {}

    def node(self, node_id: int) -> FakeStorageNode:
        return self.nodes.setdefault(node_id, FakeStorageNode(node_id))

    def stub(self, node_id: int) -> FakeStorageNode | None:
        if node_id not in self.cache.brokers:
            return None
        return self.node(node_id)

    async def close(self) -> None:
        return None


ControllerFn = Callable[[str, Any], Awaitable[Any]]


class FakeController:
    """``call`` and ``call_items`` like ControllerClient, answered by ``fn(method, request)``."""

    def __init__(self, fn: ControllerFn | None = None) -> None:
        self.fn = fn
        self.requests: list[tuple[str, Any]] = []

    async def call(self, method: str, request: Any, deadline: float) -> Any:
        self.requests.append((method, request))
        assert self.fn is not None
        remaining = deadline - asyncio.get_running_loop().time()
        return await asyncio.wait_for(self.fn(method, request), max(remaining, 0))

    async def call_items(
        self,
        method: str,
        items: Sequence[Any],
        build: Callable[..., Any],
        item_key: Callable[[Any], Any],
        results: Callable[[Any], Iterable[Any]],
        result_key: Callable[[Any], Any],
        deadline: float,
    ) -> dict[Any, Any]:
        request = build(items)
        self.requests.append((method, request))
        assert self.fn is not None
        try:
            resp = await asyncio.wait_for(
                self.fn(method, request), deadline - asyncio.get_running_loop().time()
            )
        except TimeoutError:
            return {}
        return {result_key(r): r for r in results(resp)}

    # the real client's calls built on call_items run unchanged over the fake
    create_internal_topic = ControllerClient.create_internal_topic

    async def close(self) -> None:
        return None


def services(
    cache: MetadataCache | None = None,
    *,
    rack: str | None = "z1",
    controller: FakeController | None = None,
    **settings_overrides: Any,
) -> GatewayServices:
    cache = cache or MetadataCache()
    cache.loaded = True
    st = settings(broker_rack=rack, **settings_overrides)
    return GatewayServices(
        settings=st,
        endpoint=layout.Endpoint(st.node_id, "127.0.0.1", 9092, rack),
        cache=cache,
        storage=FakeStorage(cache),  # type: ignore[arg-type]
        controller=controller or FakeController(),  # type: ignore[arg-type]
        offsets=OffsetsCache(),
    )


def context(
    svc: GatewayServices, api_key: int, version: int, client_id: str | None = "test"
) -> RequestContext:
    return RequestContext(
        svc,
        api_key,
        version,
        7,
        client_id,
        "127.0.0.1:1",
        {int(k): v for k, v in SUPPORTED_VERSIONS.items()},
    )


def topic_result(
    name: str, code: int = 0, partitions: int = 1, rf: int = 1, message: str = ""
) -> Any:
    return cpb.TopicResult(
        name=name,
        error_code=code,
        error_message=message,
        num_partitions=partitions,
        replication_factor=rf,
    )


class FakeCoordinators:
    """Stands in for CoordinatorClients: every group is on coordinator 0, and ``answer`` makes
    the forwarded response (default: the API's all-clear shape)."""

    def __init__(self, answer: Callable[[int, int, dict[str, Any]], Any] | None = None) -> None:
        from services.common.coordinator.clients import Route

        self._route = Route(0, 0)
        self.calls: list[tuple[int, int, int, dict[str, Any], str, str, float]] = []
        self.answer = answer

    def route(self, group_id: str) -> Any:
        return self._route

    async def forward(
        self,
        coordinator: int,
        api_key: int,
        api_version: int,
        body: dict[str, Any],
        *,
        client_id: str,
        client_host: str,
        timeout_s: float,
    ) -> dict[str, Any]:
        from services.common.errors import ErrorCode
        from services.common.group_errors import error_response

        self.calls.append(
            (coordinator, api_key, api_version, body, client_id, client_host, timeout_s)
        )
        if self.answer is not None:
            result = self.answer(api_key, api_version, body)
            return await result if asyncio.iscoroutine(result) else result  # type: ignore[no-any-return]
        return error_response(api_key, api_version, body, ErrorCode.NONE)

    async def close(self) -> None:
        return None


def leaders_setup() -> tuple[Any, MetadataCache]:
    """Services for the requests partition leaders answer: gateway 1; storage nodes 11 and 12;
    topic "a" with partitions 0 and 2 led by 11 and 1 by 12; "leaderless" with no leader."""
    cache = MetadataCache()
    add_gateway(cache, 1, "z1")
    add_brokers(cache, 11, 12)
    add_topic(cache, "a", {0: [11], 1: [12], 2: [11]})
    add_topic(cache, "leaderless", {0: [12]}, leaders={0: -1})
    return services(cache), cache
