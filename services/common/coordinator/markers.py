"""Transaction markers written through the partitions' leader storage nodes (storage's
``WriteTxnMarkers``, Kafka's WriteTxnMarkers API), one call per leader for all its partitions.

A partition is done once its leader appended the marker (or its topic is gone: Kafka drops
markers of deleted partitions). Anything else - no leader, a leader that moved, a node that
cannot be reached, NOT_ENOUGH_REPLICAS - is retried after a short pause, with metadata that may
have moved on meanwhile, until every partition is done or the shard moves away. Storage fencing
the marker's producer epoch (INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED) means a
newer owner or epoch took over: this coordinator stops, as Kafka's marker channel does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

import grpc

from services.common.coordinator.clients import CoordinatorClients, ForwardError
from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.metadata_cache import MetadataCache
from services.common.protocol import ApiKey
from services.common.rpc.kafkapy.v1 import storage_pb2
from services.common.storage_client import StorageClients
from services.common.zk.layout import CONSUMER_OFFSETS_TOPIC

log = get_logger("coordinator.markers")

TopicPartition = tuple[str, int]
_FENCED = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})
WRITE_TXN_MARKERS_VERSION = 1
_CALL_TIMEOUT_S = 10.0  # a leader waits this long for its ISR


Send = Callable[
    [int, list[TopicPartition], int, int, int, bool],
    Awaitable[tuple[set[TopicPartition], bool]],
]


class MarkerWriter:
    def __init__(
        self,
        cache: MetadataCache,
        storage: StorageClients,
        retry_backoff_ms: int,
        groups: CoordinatorClients | None = None,
    ) -> None:
        """With ``groups`` (a transaction coordinator's), the markers of ``__consumer_offsets``
        partitions go to the group coordinator owning each (a forwarded WriteTxnMarkers): it
        writes them and applies or drops the transaction's offsets (TxnOffsetCommit)."""
        self._cache = cache
        self._storage = storage
        self._backoff_s = retry_backoff_ms / 1000.0
        self._groups = groups

    async def write(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Iterable[TopicPartition],
        live: Callable[[], bool],
    ) -> bool:
        remaining = set(partitions)
        while remaining:
            if not live():
                return False
            calls: dict[tuple[Send, int], list[TopicPartition]] = {}
            for tp in sorted(remaining):
                if self._cache.topic(tp[0]) is None:
                    log.info("marker_dropped_for_deleted_topic", topic=tp[0], partition=tp[1])
                    remaining.discard(tp)
                    continue
                target = self._target(tp)
                if target is not None:
                    calls.setdefault(target, []).append(tp)
            results = await asyncio.gather(
                *(
                    send(node, tps, producer_id, producer_epoch, coordinator_epoch, commit)
                    for (send, node), tps in calls.items()
                )
            )
            for done, fenced in results:
                remaining -= done
                if fenced:
                    log.error(
                        "markers_fenced",
                        producer_id=producer_id,
                        producer_epoch=producer_epoch,
                        coordinator_epoch=coordinator_epoch,
                    )
                    return False
            if remaining:
                await asyncio.sleep(self._backoff_s)
        return True

    def _target(self, tp: TopicPartition) -> tuple[Send, int] | None:
        """Who writes ``tp``'s marker: its group coordinator or its leader (None: nobody now)."""
        if self._groups is not None and tp[0] == CONSUMER_OFFSETS_TOPIC:
            shard_map = self._cache.shard_map
            owner = shard_map.shards.get(tp[1]) if shard_map is not None else None
            return (self._via_group, owner.owner) if owner is not None else None
        info = self._cache.partition(*tp)
        return (self._send, info.leader) if info is not None and info.leader >= 0 else None

    async def _via_group(
        self,
        coordinator: int,
        partitions: list[TopicPartition],
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> tuple[set[TopicPartition], bool]:
        assert self._groups is not None
        body = {
            "markers": [
                {
                    "producer_id": producer_id,
                    "producer_epoch": producer_epoch,
                    "transaction_result": commit,
                    "topics": [
                        {
                            "name": CONSUMER_OFFSETS_TOPIC,
                            "partition_indexes": [p for _, p in partitions],
                        }
                    ],
                    "coordinator_epoch": coordinator_epoch,
                }
            ]
        }
        try:
            resp = await self._groups.forward(
                coordinator,
                ApiKey.WRITE_TXN_MARKERS,
                WRITE_TXN_MARKERS_VERSION,
                body,
                client_id="transaction-coordinator",
                client_host="",
                timeout_s=_CALL_TIMEOUT_S + 5.0,
            )
        except ForwardError as exc:
            log.info("group_markers_retry", coordinator=coordinator, error=exc.code.name)
            return set(), False
        done: set[TopicPartition] = set()
        fenced = False
        for marker in resp.get("markers") or ():
            for topic in marker.get("topics") or ():
                for result in topic.get("partitions") or ():
                    code = _code(result.get("error_code", 0))
                    tp = (topic.get("name") or "", result.get("partition_index", -1))
                    if code == ErrorCode.NONE:
                        done.add(tp)
                    elif code in _FENCED:
                        fenced = True
                    else:
                        log.info("group_marker_retry", partition=tp[1], error=code.name)
        return done, fenced

    async def _send(
        self,
        leader: int,
        partitions: list[TopicPartition],
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> tuple[set[TopicPartition], bool]:
        """(partitions done, fenced) of one call to ``leader``."""
        stub = self._storage.stub(leader)
        if stub is None:
            return set(), False
        request = storage_pb2.WriteTxnMarkersRequest(
            markers=[
                storage_pb2.WritableTxnMarker(
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    transaction_result=commit,
                    coordinator_epoch=coordinator_epoch,
                    partitions=[
                        storage_pb2.TxnMarkerPartition(topic=topic, partition=partition)
                        for topic, partition in partitions
                    ],
                )
            ],
            timeout_ms=int(_CALL_TIMEOUT_S * 1000),
        )
        try:
            response = await stub.WriteTxnMarkers(request, timeout=_CALL_TIMEOUT_S + 5.0)
        except grpc.aio.AioRpcError as exc:
            log.info("markers_retry", leader=leader, status=exc.code().name)
            return set(), False
        done: set[TopicPartition] = set()
        fenced = False
        for marker in response.markers:
            for result in marker.partitions:
                code = _code(result.error_code)
                tp = (result.topic, result.partition)
                if code == ErrorCode.NONE:
                    done.add(tp)
                elif code in _FENCED:
                    fenced = True
                else:
                    log.info(
                        "marker_retry",
                        topic=result.topic,
                        partition=result.partition,
                        error=code.name,
                        message=result.error_message,
                    )
        return done, fenced


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
