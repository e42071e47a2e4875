"""The ``__transaction_state`` shards this transaction coordinator owns (common's
``ShardManager`` with ``TxnShard`` as a shard's state)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from services.common.coordinator.shard_log import ShardLog
from services.common.coordinator.shard_manager import ShardLogSettings, ShardManager
from services.common.internal_topics.transaction_state import transaction_key
from services.common.metadata_cache import MetadataCache
from services.common.storage_client import StorageClients
from services.common.zk.layout import TRANSACTION
from services.transaction_coordinator.config import TxnConfig
from services.transaction_coordinator.metrics import TransactionMetrics
from services.transaction_coordinator.replay import TxnReplay
from services.transaction_coordinator.settings import TransactionCoordinatorSettings
from services.transaction_coordinator.transactions import Markers, ProducerIds, TxnShard


class TxnShardManager(ShardManager[TxnShard, TxnReplay]):
    def __init__(
        self,
        node_id: int,
        cache: MetadataCache,
        storage: StorageClients,
        settings: TransactionCoordinatorSettings,
        metrics: TransactionMetrics,
        producer_ids: ProducerIds,
        markers: Markers,
        registration: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(
            TRANSACTION,
            node_id,
            cache,
            storage,
            ShardLogSettings(
                commit_timeout_ms=settings.request_timeout_ms,
                request_timeout_ms=settings.request_timeout_ms,
                load_buffer_bytes=settings.transaction_state_log_load_buffer_size,
            ),
            metrics,
            fence_key=transaction_key(""),  # the transactional id "" cannot exist
            registration=registration,
        )
        self._config = TxnConfig.from_settings(settings)
        self._txn_metrics = metrics
        self._producer_ids = producer_ids
        self._markers = markers

    def new_replay(self) -> TxnReplay:
        return TxnReplay()

    def build(self, partition: int, shard_log: ShardLog, replay: TxnReplay) -> TxnShard:
        shard = TxnShard(
            partition,
            shard_log,
            self._config,
            self._producer_ids,
            self._markers,
            coordinator_epoch=shard_log.owner.epoch,
            on_completed=self._completed,
        )
        shard.load(replay.transactions)
        return shard

    def loaded_fields(self, replay: TxnReplay) -> dict[str, Any]:
        return {"transactional_ids": len(replay.transactions)}

    def _completed(self, commit: bool) -> None:
        self._txn_metrics.completed.labels("commit" if commit else "abort").inc()
