"""Prometheus metrics of the gateway, named as the JMX exporter names Kafka's MBeans.

``kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce`` becomes
``kafka_network_requestmetrics_totaltimems{request="Produce"}`` and so on, so the usual Kafka
dashboards find them.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_LATENCY_BUCKETS_MS = (
    0.25,
    0.5,
    1,
    2,
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1000,
    2500,
    5000,
    10000,
    30000,
)

REQUESTS = Counter(
    "kafka_network_requestmetrics_requests",
    "Requests received, per API and version",
    ["request", "version"],
)
TOTAL_TIME_MS = Histogram(
    "kafka_network_requestmetrics_totaltimems",
    "Time from request read to response queued (ms)",
    ["request"],
    buckets=_LATENCY_BUCKETS_MS,
)
# Kafka's ErrorsPerSec: error codes in responses (each partition/topic/resource), NONE included
REQUEST_ERRORS = Counter(
    "kafka_network_requestmetrics_errors",
    "Error codes in responses, per API and error (NONE included), as Kafka's ErrorsPerSec",
    ["request", "error"],
)
INFLIGHT = Gauge(
    "kafka_network_requestchannel_requestqueuesize",
    "Requests being handled (all connections)",
)
CONNECTIONS = Gauge(
    "kafka_server_socket_server_metrics_connection_count",
    "Open client connections",
)
CONNECTIONS_CREATED = Counter(
    "kafka_server_socket_server_metrics_connection_creation",
    "Client connections accepted",
)
CONNECTIONS_CLOSED = Counter(
    "kafka_server_socket_server_metrics_connection_close",
    "Client connections closed",
)
BYTES_RECEIVED = Counter(
    "kafka_server_socket_server_metrics_incoming_byte",
    "Bytes read from client connections",
)
BYTES_SENT = Counter(
    "kafka_server_socket_server_metrics_outgoing_byte",
    "Bytes written to client connections",
)
PROTOCOL_CLOSES = Counter(
    "kafkapy_gateway_protocol_closes",
    "Connections closed for a protocol violation",
    ["reason"],
)
TOPIC_BYTES_IN = Counter(
    "kafka_server_brokertopicmetrics_bytesin",
    "Record bytes produced, per topic",
    ["topic"],
)
TOPIC_MESSAGES_IN = Counter(
    "kafka_server_brokertopicmetrics_messagesin",
    "Records produced, per topic",
    ["topic"],
)
TOPIC_BYTES_OUT = Counter(
    "kafka_server_brokertopicmetrics_bytesout",
    "Record bytes fetched, per topic",
    ["topic"],
)
STORAGE_RPC_ERRORS = Counter(
    "kafkapy_gateway_storage_rpc_errors",
    "Failed storage RPCs",
    ["method", "code"],
)
CONNECTIONS_REJECTED = Counter(
    "kafkapy_gateway_connections_rejected",
    "Client connections closed right after accept because a connection limit was reached",
    ["reason"],
)
CONNECTION_LIMIT = Gauge(
    "kafkapy_gateway_connection_limit",
    "Connection limits in force (max.connections, max.connections.per.ip)",
    ["limit"],
)

# kafka.server:type=socket-server-metrics,listener=<l>: successful/failed-authentication-total
SASL_SUCCESSES = Counter(
    "kafka_server_socket_server_metrics_successful_authentication",
    "Connections that completed SASL authentication, per listener and mechanism",
    ["listener", "mechanism"],
)
SASL_FAILURES = Counter(
    "kafka_server_socket_server_metrics_failed_authentication",
    "Connections that failed SASL or TLS authentication, per listener and mechanism",
    ["listener", "mechanism"],
)

# KIP-890 part 1 (Kafka's AddPartitionsToTxnManager VerificationFailureRate): verify-only checks
# of a transaction's first append to a partition, per outcome (the Produce error, NONE = verified)
TXN_VERIFICATIONS = Counter(
    "kafka_server_addpartitionstotxnmanager_verifications",
    "Partitions verified with the transaction coordinator before a transactional append",
    ["error"],
)

# Kafka's authorizer metrics (kafka.server:type=kafka.security.authorizer.metrics,...)
ACLS_TOTAL = Gauge(
    "kafka_server_kafka_security_authorizer_metrics_acls_total_count",
    "ACL bindings in this gateway's authorizer cache",
)
AUTHORIZATION_DENIED = Counter(
    "kafka_server_kafka_security_authorizer_metrics_authorization_denied",
    "Requests (or request entries) refused by the authorizer, per API",
    ["request"],
)

# Client quotas (kafka.server:type=Produce|Fetch|Request,user=<u>,client-id=<c>), as the JMX
# exporter's default mapping names them with lowercaseOutputName: one series per quota entity
# (the sensor's tags: empty where the quota in force has no such part); removed when the
# entity's sensor expires.
_QUOTA_LABELS = ["user", "client_id"]
PRODUCE_THROTTLE_TIME = Gauge(
    "kafka_server_produce_throttle_time",
    "Average Produce throttle time over the quota window (ms), per quota entity",
    _QUOTA_LABELS,
)
PRODUCE_BYTE_RATE = Gauge(
    "kafka_server_produce_byte_rate",
    "Produce request bytes per second over the quota window, per quota entity",
    _QUOTA_LABELS,
)
FETCH_THROTTLE_TIME = Gauge(
    "kafka_server_fetch_throttle_time",
    "Average Fetch throttle time over the quota window (ms), per quota entity",
    _QUOTA_LABELS,
)
FETCH_BYTE_RATE = Gauge(
    "kafka_server_fetch_byte_rate",
    "Fetch response bytes per second over the quota window, per quota entity",
    _QUOTA_LABELS,
)
REQUEST_THROTTLE_TIME = Gauge(
    "kafka_server_request_throttle_time",
    "Average request-quota throttle time over the quota window (ms), per quota entity",
    _QUOTA_LABELS,
)
REQUEST_TIME = Gauge(
    "kafka_server_request_request_time",
    "Request handling time as a percentage of one second, per quota entity",
    _QUOTA_LABELS,
)
CONTROLLER_MUTATION_TOKENS = Gauge(
    "kafka_server_controllermutation_tokens",
    "Credits left in the controller mutation token bucket (KIP-599), per quota entity",
    _QUOTA_LABELS,
)
QUOTA_THROTTLED = Counter(
    "kafkapy_gateway_quota_throttled",
    "Responses throttled by a client quota, per quota type (Produce, Fetch, Request, "
    "ControllerMutation)",
    ["quota"],
)

# Storage calls a Fetch left running for the connection's next Fetch (fetch_park.py), by what
# became of them: taken over by the next Fetch, or cancelled (it asked something else, or the
# connection closed). A high share cancelled means reads thrown away.
FETCH_PARKED_CALLS = Counter(
    "kafkapy_gateway_fetch_parked_calls",
    "Storage Fetch calls parked between a connection's Fetch requests, by outcome",
    ["outcome"],
)
