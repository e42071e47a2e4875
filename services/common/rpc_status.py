"""gRPC statuses that say the connection to a node broke, whatever code gRPC put on them.

gRPC reports a peer that dies mid-call as UNAVAILABLE most of the time, but also as UNKNOWN
"Stream removed" or INTERNAL "RST_STREAM" (grpc/grpc#34076). To a caller all of them mean the
same thing: the node is gone and the call's outcome is unknown, which Kafka clients retry
after a metadata refresh.
"""

from __future__ import annotations

import grpc

_BROKEN_CONNECTION_DETAILS = (
    "Stream removed",
    "Socket closed",
    "Connection reset",
    "RST_STREAM",
    "GOAWAY",
    "Broken pipe",
)


def connection_broke(code: grpc.StatusCode, details: str | None) -> bool:
    """True for UNAVAILABLE, and for UNKNOWN / INTERNAL statuses that gRPC gives a dead peer."""
    if code == grpc.StatusCode.UNAVAILABLE:
        return True
    if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
        text = details or ""
        return any(marker in text for marker in _BROKEN_CONNECTION_DETAILS)
    return False
