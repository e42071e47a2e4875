"""Which kafka-py services a Kafka broker id names.

Gateways (``node.id``) and storage nodes (``broker.id``) share one id space: broker id N names
gateway N and storage node N, whichever are registered. A BROKER config resource N therefore
covers both; each service applies the dynamic configs that concern it (storage: log and cleaner
settings, replication throttles; gateway: connection limits, message.max.bytes). Every admin
path that turns a broker id into services goes through ``services_of_broker_id``.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.metadata_cache import MetadataCache


@dataclass(frozen=True, slots=True)
class BrokerIdServices:
    broker_id: int
    gateway: bool  # a gateway with this node.id is registered
    storage: bool  # a storage node with this broker.id is registered

    @property
    def known(self) -> bool:
        return self.gateway or self.storage


def services_of_broker_id(cache: MetadataCache, broker_id: int) -> BrokerIdServices:
    return BrokerIdServices(broker_id, broker_id in cache.gateways, broker_id in cache.brokers)
