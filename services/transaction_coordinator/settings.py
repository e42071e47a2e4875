"""Transaction coordinator settings (Kafka broker property names)."""

from __future__ import annotations

from services.common.coordinator.settings import CoordinatorSettings
from services.common.settings import kafka_prop


class TransactionCoordinatorSettings(CoordinatorSettings):
    transaction_max_timeout_ms: int = kafka_prop(
        900000,
        "transaction.max.timeout.ms",
        "largest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT)",
        gt=0,
    )
    transaction_state_log_load_buffer_size: int = kafka_prop(
        5242880,
        "transaction.state.log.load.buffer.size",
        "bytes read per fetch when loading a shard",
        gt=0,
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = kafka_prop(
        10000,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "how often transactions open past their timeout are aborted",
        gt=0,
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = kafka_prop(
        3600000,
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "how often idle transactional ids are removed",
        gt=0,
    )
    transactional_id_expiration_ms: int = kafka_prop(
        604800000,
        "transactional.id.expiration.ms",
        "idle time after which a transactional id (not in a transaction) is removed",
        gt=0,
    )
    transaction_marker_retry_backoff_ms: int = kafka_prop(
        100,
        "kafkapy.transaction.marker.retry.backoff.ms",
        "pause before markers a partition leader did not take are sent again",
        gt=0,
    )
