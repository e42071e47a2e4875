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
from collections.abc import Callable, Iterable

import grpc

from services.common.errors import ErrorCode
from services.common.logging import get_logger
from services.common.metadata_cache import MetadataCache
from services.common.rpc.kafkapy.v1 import storage_pb2
from services.common.storage_client import StorageClients

log = get_logger("transaction_coordinator.markers")

TopicPartition = tuple[str, int]
_FENCED = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})
_CALL_TIMEOUT_S = 10.0  # a leader waits this long for its ISR


class MarkerWriter:
    def __init__(
        self, cache: MetadataCache, storage: StorageClients, retry_backoff_ms: int
    ) -> None:
        self._cache = cache
        self._storage = storage
        self._backoff_s = retry_backoff_ms / 1000.0

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
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(remaining):
                if self._cache.topic(tp[0]) is None:
                    log.info("marker_dropped_for_deleted_topic", topic=tp[0], partition=tp[1])
                    remaining.discard(tp)
                    continue
                info = self._cache.partition(*tp)
                if info is not None and info.leader >= 0:
                    by_leader.setdefault(info.leader, []).append(tp)
            results = await asyncio.gather(
                *(
                    self._send(leader, tps, producer_id, producer_epoch, coordinator_epoch, commit)
                    for leader, tps in by_leader.items()
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
