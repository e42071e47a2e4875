"""Every handler at every advertised version, through the real codec: encode the request,
decode it as the server does, handle it, encode and decode the response."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from services.common import txn_errors
from services.common.errors import ErrorCode
from services.common.metadata_cache import MetadataCache
from services.common.protocol import (
    ApiKey,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
)
from services.common.records.record import Record, build_batch
from services.common.rpc.kafkapy.v1 import controller_pb2 as cpb
from services.common.rpc.kafkapy.v1 import storage_pb2 as spb
from services.common.zk.client import AsyncZk
from services.gateway.authorizer import Authorizer
from services.gateway.context import GatewayServices
from services.gateway.handlers import HANDLERS, advertised_versions
from services.gateway.listeners import Listener
from services.gateway.sasl import SaslConfig, Session

from .fakes import (
    FakeController,
    FakeCoordinators,
    FakeStorage,
    add_brokers,
    add_gateway,
    add_topic,
    context,
    services,
)

BATCH = build_batch([Record(value=b"x")])


async def _controller(method: str, request: Any) -> Any:
    if method == "CreateTopics":
        return cpb.CreateTopicsResponse(
            topics=[
                cpb.TopicResult(
                    name=t.name, num_partitions=1, replication_factor=1, topic_id=uuid.uuid4().bytes
                )
                for t in request.topics
            ]
        )
    if method in ("DeleteTopics", "CreatePartitions"):
        names = request.names if method == "DeleteTopics" else [t.name for t in request.topics]
        resp = (
            cpb.DeleteTopicsResponse if method == "DeleteTopics" else cpb.CreatePartitionsResponse
        )
        return resp(topics=[cpb.TopicResult(name=n) for n in names])
    if method == "ElectLeaders":
        return cpb.ElectLeadersResponse(
            partitions=[
                cpb.PartitionElection(topic=r.topic, partition=r.partition)
                for r in request.partitions
            ]
        )
    if method == "AlterPartitionReassignments":
        return cpb.AlterPartitionReassignmentsResponse(
            partitions=[
                cpb.ReassignmentResult(topic=r.topic, partition=r.partition)
                for r in request.partitions
            ]
        )
    if method == "ListPartitionReassignments":
        return cpb.ListPartitionReassignmentsResponse(
            reassignments=[
                cpb.OngoingReassignment(
                    topic="a", partition=0, replicas=[1, 2, 3], adding_replicas=[3]
                )
            ]
        )
    return cpb.AlterConfigsResponse(
        resources=[
            cpb.ConfigResourceResult(resource_type=r.resource_type, name=r.name)
            for r in request.resources
        ]
    )


class _Ids:
    async def next_id(self) -> int:
        return 1000


def _services() -> GatewayServices:
    cache = MetadataCache()
    add_gateway(cache, 1, "z1")
    add_brokers(cache, 11)
    add_topic(cache, "a", {0: [11]})
    svc = services(cache, controller=FakeController(_controller))
    svc.producer_ids = _Ids()  # type: ignore[assignment]
    svc.coordinators = FakeCoordinators()  # type: ignore[assignment]
    svc.txn_coordinators = FakeCoordinators(  # type: ignore[assignment]
        lambda key, version, body: txn_errors.error_response(key, version, body, ErrorCode.NONE)
    )
    add_topic(cache, "__consumer_offsets", {0: [11]})
    cache.apply_shard_map(
        b'{"version":1,"partitions":1,"shards":{"0":{"owner":0,"epoch":0,"producer_id":1}}}'
    )
    cache.apply_group_coordinator(0, b'{"host":"127.0.0.1","port":1}')
    storage: FakeStorage = svc.storage  # type: ignore[assignment]

    async def fetch(request: Any) -> Any:
        return spb.FetchResponse(
            partitions=[
                spb.PartitionFetchResult(
                    topic=p.topic,
                    partition=p.partition,
                    high_watermark=1,
                    last_stable_offset=1,
                    log_start_offset=0,
                    records=BATCH,
                )
                for p in request.partitions
            ]
        )

    async def list_offsets(request: Any) -> Any:
        return spb.ListOffsetsResponse(
            partitions=[
                spb.PartitionOffsetResult(
                    topic=q.topic, partition=q.partition, offset=1, timestamp=-1, leader_epoch=3
                )
                for q in request.partitions
            ]
        )

    storage.node(11).fetch_handler = fetch
    storage.node(11).list_offsets_handler = list_offsets
    return svc


REQUESTS: dict[int, dict[str, Any]] = {
    ApiKey.API_VERSIONS: {"client_software_name": "t", "client_software_version": "1"},
    ApiKey.METADATA: {
        "topics": [{"name": "a", "topic_id": None}],
        "allow_auto_topic_creation": False,
    },
    ApiKey.PRODUCE: {
        "transactional_id": None,
        "acks": 1,
        "timeout": 1000,
        "topic_data": [{"name": "a", "partition_data": [{"index": 0, "records": BATCH}]}],
    },
    ApiKey.FETCH: {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": "a",
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    },
    ApiKey.LIST_OFFSETS: {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": "a", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
    },
    ApiKey.CREATE_TOPICS: {
        "topics": [
            {
                "name": "x",
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
        ],
        "timeout": 0,
        "validate_only": False,
    },
    ApiKey.DELETE_TOPICS: {
        "topic_names": ["a"],
        "topics": [{"name": "a", "topic_id": None}],
        "timeout": 0,
    },
    ApiKey.DELETE_RECORDS: {
        "topics": [{"name": "a", "partitions": [{"partition_index": 0, "offset": 1}]}],
        "timeout": 1000,
    },
    ApiKey.OFFSET_FOR_LEADER_EPOCH: {
        "replica_id": -1,
        "topics": [
            {
                "topic": "a",
                "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}],
            }
        ],
    },
    ApiKey.CREATE_PARTITIONS: {
        "topics": [{"name": "a", "count": 2, "assignments": None}],
        "timeout": 0,
        "validate_only": False,
    },
    ApiKey.ALTER_CONFIGS: {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": "a",
                "configs": [{"name": "retention.ms", "value": "1"}],
            }
        ],
        "validate_only": True,
    },
    ApiKey.INCREMENTAL_ALTER_CONFIGS: {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": "a",
                "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1"}],
            }
        ],
        "validate_only": True,
    },
    ApiKey.DESCRIBE_CONFIGS: {
        "resources": [
            {"resource_type": 2, "resource_name": "a", "configuration_keys": None},
            {"resource_type": 4, "resource_name": "1", "configuration_keys": None},
        ],
        "include_synonyms": True,
        "include_documentation": True,
    },
    ApiKey.DESCRIBE_CLUSTER: {"include_cluster_authorized_operations": False},
    ApiKey.DESCRIBE_LOG_DIRS: {"topics": [{"topic": "a", "partitions": [0]}]},
    ApiKey.ELECT_LEADERS: {
        "election_type": 0,
        "topic_partitions": [{"topic": "a", "partitions": [0]}],
        "timeout": 1000,
    },
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: {
        "timeout": 1000,
        "allow_replication_factor_change": True,
        "topics": [
            {
                "name": "a",
                "partitions": [
                    {"partition_index": 0, "replicas": [1, 2]},
                    {"partition_index": 1, "replicas": None},
                ],
            }
        ],
    },
    ApiKey.LIST_PARTITION_REASSIGNMENTS: {
        "timeout": 1000,
        "topics": [{"name": "a", "partition_indexes": [0]}],
    },
    ApiKey.INIT_PRODUCER_ID: {"transactional_id": None, "transaction_timeout": 1000},
    ApiKey.ADD_PARTITIONS_TO_TXN: {
        "v3_and_below_transactional_id": "tx",
        "v3_and_below_producer_id": 5,
        "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": "a", "partitions": [0]}],
    },
    ApiKey.ADD_OFFSETS_TO_TXN: {
        "transactional_id": "tx",
        "producer_id": 5,
        "producer_epoch": 0,
        "group_id": "g",
    },
    ApiKey.TXN_OFFSET_COMMIT: {
        "transactional_id": "tx",
        "group_id": "g",
        "producer_id": 5,
        "producer_epoch": 0,
        "generation_id": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": "a",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 3,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    },
    ApiKey.DESCRIBE_TRANSACTIONS: {"transactional_ids": ["tx", "ty"]},
    ApiKey.DESCRIBE_PRODUCERS: {"topics": [{"name": "a", "partition_indexes": [0]}]},
    ApiKey.CREATE_ACLS: {
        "creations": [
            {
                "resource_type": 2,
                "resource_name": "wire-acl-",
                "resource_pattern_type": 4,
                "principal": "User:wire",
                "host": "*",
                "operation": 3,
                "permission_type": 3,
            }
        ]
    },
    ApiKey.DESCRIBE_ACLS: {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": "User:wire",
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    },
    ApiKey.DELETE_ACLS: {
        "filters": [
            {
                "resource_type_filter": 2,
                "resource_name_filter": "wire-acl-",
                "pattern_type_filter": 2,
                "principal_filter": None,
                "host_filter": None,
                "operation": 1,
                "permission_type": 1,
            }
        ]
    },
    ApiKey.DESCRIBE_CLIENT_QUOTAS: {
        "components": [{"entity_type": "user", "match_type": 2, "match": None}],
        "strict": False,
    },
    ApiKey.ALTER_CLIENT_QUOTAS: {
        "entries": [
            {
                "entity": [{"entity_type": "client-id", "entity_name": "wire-client"}],
                "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}],
            }
        ],
        "validate_only": False,
    },
    ApiKey.WRITE_TXN_MARKERS: {
        "markers": [
            {
                "producer_id": 7,
                "producer_epoch": 1,
                "transaction_result": False,
                "topics": [{"name": "a", "partition_indexes": [0]}],
                "coordinator_epoch": 0,
            }
        ]
    },
    ApiKey.LIST_TRANSACTIONS: {
        "state_filters": ["Ongoing"],
        "producer_id_filters": [],
        "duration_filter": -1,
    },
    ApiKey.END_TXN: {
        "transactional_id": "tx",
        "producer_id": 5,
        "producer_epoch": 0,
        "committed": True,
    },
    ApiKey.FIND_COORDINATOR: {"key": "g", "key_type": 0, "coordinator_keys": ["g", "h"]},
    ApiKey.JOIN_GROUP: {
        "group_id": "g",
        "session_timeout": 10000,
        "rebalance_timeout": 30000,
        "member_id": "m",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"x"}],
        "reason": None,
    },
    ApiKey.SYNC_GROUP: {
        "group_id": "g",
        "generation_id": 1,
        "member_id": "m",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [],
    },
    ApiKey.HEARTBEAT: {
        "group_id": "g",
        "generation_id": 1,
        "member_id": "m",
        "group_instance_id": None,
    },
    ApiKey.LEAVE_GROUP: {
        "group_id": "g",
        "member_id": "m",
        "members": [{"member_id": "m", "group_instance_id": None, "reason": None}],
    },
    ApiKey.OFFSET_COMMIT: {
        "group_id": "g",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "retention_time": -1,
        "topics": [
            {
                "name": "a",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 1,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    },
    ApiKey.OFFSET_FETCH: {
        "group_id": "g",
        "topics": [{"name": "a", "partition_indexes": [0]}],
        "require_stable": False,
        "groups": [{"group_id": "g", "topics": None}],
    },
    ApiKey.DESCRIBE_GROUPS: {"groups": ["g"], "include_authorized_operations": False},
    ApiKey.LIST_GROUPS: {"states_filter": []},
    ApiKey.DELETE_GROUPS: {"groups_names": ["g"]},
    ApiKey.OFFSET_DELETE: {
        "group_id": "g",
        "topics": [{"name": "a", "partitions": [{"partition_index": 0}]}],
    },
    ApiKey.SASL_HANDSHAKE: {"mechanism": "PLAIN"},
    ApiKey.SASL_AUTHENTICATE: {"auth_bytes": b"\x00u\x00p"},
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: {"users": None},
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: {
        "deletions": [],
        "upsertions": [
            {
                "name": "wire-user",
                "mechanism": 1,
                "iterations": 4096,
                "salt": b"s" * 16,
                "salted_password": b"p" * 32,
            }
        ],
    },
}
_ZK_APIS = (
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    ApiKey.DESCRIBE_CLIENT_QUOTAS,
    ApiKey.ALTER_CLIENT_QUOTAS,
)
_ACL_APIS = (ApiKey.CREATE_ACLS, ApiKey.DESCRIBE_ACLS, ApiKey.DELETE_ACLS)


def _sasl_session(api_key: int) -> Session:
    """A SASL_PLAINTEXT connection's session, at the step where ``api_key`` is expected."""
    session = Session(
        Listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "", 0),
        SaslConfig(("PLAIN",), {"u": "p"}, 0, 0),
    )
    if api_key == ApiKey.SASL_AUTHENTICATE:
        session.handshake("PLAIN", 1)
    return session


CASES = [
    (int(key), v)
    for key, (lo, hi) in sorted(advertised_versions().items())
    for v in range(lo, hi + 1)
]


def _error_codes(body: Any) -> list[int]:
    """Every error_code in a decoded response."""
    out: list[int] = []
    if isinstance(body, dict):
        for k, v in body.items():
            if k == "error_code":
                out.append(v)
            else:
                out.extend(_error_codes(v))
    elif isinstance(body, list):
        for item in body:
            out.extend(_error_codes(item))
    return out


def test_every_handled_api_has_a_request_here() -> None:
    assert set(REQUESTS) == set(HANDLERS)


@pytest.mark.parametrize(
    ("api_key", "version"), CASES, ids=[f"{ApiKey(k).name}-v{v}" for k, v in CASES]
)
async def test_handler_round_trip(
    api_key: int, version: int, request: pytest.FixtureRequest
) -> None:
    svc = _services()
    if api_key in _ZK_APIS + _ACL_APIS:  # these read and write ZooKeeper: a real one
        svc.zk = AsyncZk(request.getfixturevalue("zk_connect"))
        await svc.zk.start()
    if api_key in _ACL_APIS:  # they answer SECURITY_DISABLED without an authorizer
        svc.authorizer = Authorizer(frozenset(), False)
    frame = encode_request(api_key, version, 42, "wire-test", REQUESTS[api_key])
    header, offset = parse_request_header(frame[4:])
    req = decode_request(api_key, version, frame[4:], offset)
    handler = HANDLERS[api_key]
    ctx = context(svc, api_key, version)
    if api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
        ctx.session = _sasl_session(api_key)
    resp = await handler.handle(ctx, req)
    assert resp is not None
    corr, body = decode_response(api_key, version, encode_response(api_key, version, 42, resp)[4:])
    assert corr == 42
    assert set(_error_codes(body)) <= {0}, body
    # and the error answer of the same request encodes too
    err = handler.error_response(req, version, ErrorCode.UNKNOWN_SERVER_ERROR)
    _, body = decode_response(api_key, version, encode_response(api_key, version, 42, err)[4:])
    assert set(_error_codes(body)) <= {0, -1}
    if svc.zk is not None:
        await svc.zk.stop()
