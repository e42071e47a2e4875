"""Request handlers, one module per Kafka API; ``HANDLERS`` maps api key -> handler.

A new API is one new module exposing ``HANDLER`` (see ``base.ApiHandler``) added to the list
below; ApiVersions advertises exactly the handled keys, at the codec's SUPPORTED_VERSIONS.
"""

from __future__ import annotations

from collections.abc import Mapping

from services.common.protocol import SUPPORTED_VERSIONS
from services.gateway.handlers import (
    acls,
    alter_configs,
    api_versions,
    client_quotas,
    create_partitions,
    create_topics,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_log_dirs,
    describe_producers,
    elect_leaders,
    fetch,
    find_coordinator,
    group_requests,
    incremental_alter_configs,
    init_producer_id,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    partition_reassignments,
    produce,
    sasl,
    transactions,
    user_scram,
    write_txn_markers,
)
from services.gateway.handlers.base import ApiHandler

HANDLERS: dict[int, ApiHandler] = {
    h.api_key: h
    for h in (
        api_versions.HANDLER,
        metadata.HANDLER,
        produce.HANDLER,
        fetch.HANDLER,
        list_offsets.HANDLER,
        offset_for_leader_epoch.HANDLER,
        create_topics.HANDLER,
        delete_topics.HANDLER,
        delete_records.HANDLER,
        create_partitions.HANDLER,
        alter_configs.HANDLER,
        incremental_alter_configs.HANDLER,
        describe_configs.HANDLER,
        describe_cluster.HANDLER,
        describe_log_dirs.HANDLER,
        elect_leaders.HANDLER,
        partition_reassignments.ALTER_HANDLER,
        partition_reassignments.LIST_HANDLER,
        init_producer_id.HANDLER,
        find_coordinator.HANDLER,
        *group_requests.HANDLERS,
        sasl.HANDSHAKE_HANDLER,
        sasl.AUTHENTICATE_HANDLER,
        user_scram.DESCRIBE_HANDLER,
        user_scram.ALTER_HANDLER,
        *transactions.HANDLERS,
        describe_producers.HANDLER,
        write_txn_markers.HANDLER,
        acls.CREATE_HANDLER,
        acls.DESCRIBE_HANDLER,
        acls.DELETE_HANDLER,
        client_quotas.DESCRIBE_HANDLER,
        client_quotas.ALTER_HANDLER,
    )
}


def advertised_versions(
    handlers: Mapping[int, ApiHandler] = HANDLERS,
) -> dict[int, tuple[int, int]]:
    """Version ranges of the handled APIs (keys the codec does not support are left out)."""
    return {int(k): v for k, v in SUPPORTED_VERSIONS.items() if int(k) in handlers}
