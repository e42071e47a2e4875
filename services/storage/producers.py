"""Storage.DescribeProducers: the active producers of the partitions this node leads, from
each log's producer state (Kafka's ``ReplicaManager.activeProducerState``): last sequence,
epoch, last timestamp, last marker's coordinator epoch, and the first offset of the open
transaction (-1 when none). A partition led elsewhere answers NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

from services.common.errors import ErrorCode, KafkaError
from services.common.logging import get_logger
from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
from services.storage.partition import NO_EPOCH
from services.storage.replica_manager import ReplicaManager

log = get_logger("storage.producers")


def describe_producers(
    rm: ReplicaManager, req: pb.DescribeProducersRequest
) -> pb.DescribeProducersResponse:
    response = pb.DescribeProducersResponse()
    for tp in req.partitions:
        result = response.partitions.add(topic=tp.topic, partition=tp.partition)
        try:
            p = rm.leader_or_error(tp.topic, tp.partition, NO_EPOCH)
            for pid, entry in sorted(p.log.producer_state.producers.items()):
                first = entry.current_txn_first_offset
                result.active_producers.add(
                    producer_id=pid,
                    producer_epoch=entry.producer_epoch,
                    last_sequence=entry.last_seq,
                    last_timestamp=entry.last_timestamp,
                    coordinator_epoch=entry.coordinator_epoch,
                    current_txn_start_offset=-1 if first is None else first,
                )
        except KafkaError as exc:
            result.error_code, result.error_message = exc.code, exc.message
        except Exception:
            log.exception("describe producers failed", topic=tp.topic, partition=tp.partition)
            result.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
    return response
