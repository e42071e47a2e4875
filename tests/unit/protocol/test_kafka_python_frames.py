"""Whole frames exchanged with kafka-python 3.x's independent protocol implementation."""

from __future__ import annotations

import pytest

from services.common.protocol import (
    ApiKey,
    decode_request,
    encode_api_versions_fallback,
    encode_response,
    parse_request_header,
)

metadata = pytest.importorskip("kafka.protocol.metadata")
producer = pytest.importorskip("kafka.protocol.producer")


def _parse(frame: bytes | bytearray) -> tuple[object, dict[str, object]]:
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, offset = parse_request_header(bytes(frame[4:]))
    return header, decode_request(header.api_key, header.api_version, bytes(frame[4:]), offset)


def test_kafka_python_requests_decode() -> None:
    request = metadata.MetadataRequest[12](
        topics=[metadata.MetadataRequest.MetadataRequestTopic(topic_id=None, name="orders")],
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    request.with_header(correlation_id=42, client_id="kp")
    header, body = _parse(request.encode(header=True, framed=True))
    assert header == (3, 12, 42, "kp")
    assert body == {
        "topics": [{"topic_id": bytes(16), "name": "orders"}],
        "allow_auto_topic_creation": True,
        "include_topic_authorized_operations": False,
    }

    versions = metadata.ApiVersionsRequest[3](
        client_software_name="kafka-python", client_software_version="3.0"
    )
    versions.with_header(correlation_id=1, client_id=None)
    header, body = _parse(versions.encode(header=True, framed=True))
    assert header == (18, 3, 1, None)
    assert body == {"client_software_name": "kafka-python", "client_software_version": "3.0"}

    data = producer.ProduceRequest.TopicProduceData
    produce = producer.ProduceRequest[9](
        transactional_id=None,
        acks=-1,
        timeout_ms=1500,
        topic_data=[
            data(
                name="t", partition_data=[data.PartitionProduceData(index=2, records=b"\x01batch")]
            )
        ],
    )
    produce.with_header(correlation_id=7, client_id="kp")
    header, body = _parse(produce.encode(header=True, framed=True))
    assert header == (0, 9, 7, "kp")
    partition = body["topic_data"][0]["partition_data"][0]  # type: ignore[index]
    assert partition["index"] == 2 and partition["records"] == b"\x01batch"
    assert body["acks"] == -1 and body["timeout"] == 1500


def test_kafka_python_reads_our_responses() -> None:
    frame = encode_response(
        ApiKey.METADATA,
        12,
        8,
        {
            "brokers": [{"node_id": 1, "host": "gw-1", "port": 9092, "rack": "az1"}],
            "cluster_id": "cid",
            "controller_id": 1,
            "topics": [
                {
                    "name": "t",
                    "topic_id": b"\x01" * 16,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "leader_id": 1,
                            "leader_epoch": 4,
                            "replica_nodes": [1, 2, 3],
                            "isr_nodes": [1, 2],
                        }
                    ],
                }
            ],
        },
    )
    response = metadata.MetadataResponse.decode(frame, version=12, header=True, framed=True)
    assert response.header.correlation_id == 8
    decoded = response.to_dict()
    assert decoded["brokers"] == [{"node_id": 1, "host": "gw-1", "port": 9092, "rack": "az1"}]
    partition = decoded["topics"][0]["partitions"][0]
    assert (partition["leader_epoch"], partition["replica_nodes"], partition["isr_nodes"]) == (
        4,
        [1, 2, 3],
        [1, 2],
    )

    versions = encode_response(
        ApiKey.API_VERSIONS,
        3,
        9,
        {"api_keys": [{"api_key": 3, "min_version": 1, "max_version": 12}], "throttle_time": 0},
    )
    response = metadata.ApiVersionsResponse.decode(versions, version=3, header=True, framed=True)
    assert response.header.correlation_id == 9
    assert response.to_dict()["api_keys"] == [{"api_key": 3, "min_version": 1, "max_version": 12}]


def test_kafka_python_reads_the_kip511_fallback() -> None:
    # A client that sent ApiVersions v3 gets a v0 body with UNSUPPORTED_VERSION and our ranges.
    response = metadata.ApiVersionsResponse.decode(
        encode_api_versions_fallback(5), version=3, header=True, framed=True
    )
    assert response.header.correlation_id == 5
    decoded = response.to_dict()
    assert decoded["error_code"] == 35
    assert {"api_key": 0, "min_version": 3, "max_version": 9} in decoded["api_keys"]
