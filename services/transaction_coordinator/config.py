"""What a transaction coordinator shard applies (Kafka's TransactionConfig)."""

from __future__ import annotations

from dataclasses import dataclass

from services.transaction_coordinator.settings import TransactionCoordinatorSettings


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = 900000
    abort_interval_ms: int = 10000
    remove_expired_interval_ms: int = 3600000
    id_expiration_ms: int = 604800000
    marker_retry_backoff_ms: int = 100

    @classmethod
    def from_settings(cls, s: TransactionCoordinatorSettings) -> TxnConfig:
        return cls(
            max_timeout_ms=s.transaction_max_timeout_ms,
            abort_interval_ms=s.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            remove_expired_interval_ms=(
                s.transaction_remove_expired_transaction_cleanup_interval_ms
            ),
            id_expiration_ms=s.transactional_id_expiration_ms,
            marker_retry_backoff_ms=s.transaction_marker_retry_backoff_ms,
        )
