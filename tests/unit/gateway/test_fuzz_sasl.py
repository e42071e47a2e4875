"""Fuzz over SaslHandshake/SaslAuthenticate frames on a real SASL_PLAINTEXT KafkaServer: no input
raises out of the connection handler, the server keeps serving, and a request after them is
served only when the connection carried the right PLAIN password."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.protocol import ApiKey, encode_request
from services.gateway.handlers import api_versions, sasl
from services.gateway.handlers.base import ApiHandler
from services.gateway.listeners import Listener
from services.gateway.sasl import SaslConfig
from services.gateway.security import ListenerSecurity
from services.gateway.server import KafkaServer

from .test_fuzz_connection import Harness, mutate

TOKEN = b"\x00u\x00pw"
served: list[int] = []


async def _describe_cluster(ctx, req):  # type: ignore[no-untyped-def]
    served.append(ctx.correlation_id)
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "cluster_id": "c",
            "controller_id": 1, "brokers": [], "cluster_authorized_operations": 0}  # fmt: skip


HANDLERS = {
    ApiKey.API_VERSIONS: api_versions.HANDLER,
    ApiKey.SASL_HANDSHAKE: sasl.HANDSHAKE_HANDLER,
    ApiKey.SASL_AUTHENTICATE: sasl.AUTHENTICATE_HANDLER,
    ApiKey.DESCRIBE_CLUSTER: ApiHandler(
        ApiKey.DESCRIBE_CLUSTER, "DescribeCluster", _describe_cluster, lambda r, v, c: {}
    ),
}
VERSIONS = {
    int(ApiKey.API_VERSIONS): (0, 3),
    int(ApiKey.SASL_HANDSHAKE): (0, 1),
    int(ApiKey.SASL_AUTHENTICATE): (0, 2),
    int(ApiKey.DESCRIBE_CLUSTER): (0, 1),
}


class _Services:
    zk = None


class SaslHarness(Harness):
    def __init__(self) -> None:  # noqa: D107 - a SASL listener instead of the plain one
        self.loop = asyncio.new_event_loop()
        self.errors = []
        self.loop.set_exception_handler(lambda _loop, ctx: self.errors.append(ctx))
        security = ListenerSecurity(
            Listener("SASL_PLAINTEXT", "SASL_PLAINTEXT", "127.0.0.1", 0),
            sasl=SaslConfig(("PLAIN", "SCRAM-SHA-256"), {"u": "pw"}, 0, 0),
        )
        self.server = KafkaServer(
            _Services(), HANDLERS, VERSIONS, max_request_bytes=10_000, max_inflight=4,
            idle_timeout_s=30, security=security,
        )  # fmt: skip
        self.loop.run_until_complete(self.server.start("127.0.0.1", 0))


def _hs(corr: int, mech: str, version: int = 1) -> bytes:
    return encode_request(ApiKey.SASL_HANDSHAKE, version, corr, "f", {"mechanism": mech})


def _auth(corr: int, token: bytes, version: int = 2) -> bytes:
    return encode_request(ApiKey.SASL_AUTHENTICATE, version, corr, "f", {"auth_bytes": token})


REQUEST = encode_request(ApiKey.DESCRIBE_CLUSTER, 0, 77, "f", {"include_cluster_authorized_operations": False})  # fmt: skip
SEQUENCES = [
    _hs(1, "PLAIN") + _auth(2, TOKEN) + REQUEST,
    _hs(1, "PLAIN") + _auth(2, b"\x00u\x00bad") + REQUEST,
    _hs(1, "SCRAM-SHA-256")
    + _auth(2, b"n,,n=u,r=abc")
    + _auth(3, b"c=biws,r=abc,p=AAAA")
    + REQUEST,
    _hs(1, "PLAIN", 0) + struct.pack(">i", len(TOKEN)) + TOKEN + REQUEST,
    _hs(1, "GSSAPI") + REQUEST,
    _auth(1, TOKEN) + REQUEST,
    REQUEST,
]


@pytest.fixture(scope="module")
def harness() -> Iterator[SaslHarness]:
    h = SaslHarness()
    yield h
    h.close()


def test_the_right_password_is_served(harness: SaslHarness) -> None:
    served.clear()
    harness.run(harness.throw(SEQUENCES[0]))
    harness.run(harness.throw(SEQUENCES[3]))
    assert served == [77, 77]
    for seq in SEQUENCES[1:3] + SEQUENCES[4:]:
        harness.run(harness.throw(seq))
    assert served == [77, 77]


flips = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.one_of(
        st.builds(mutate, st.sampled_from(SEQUENCES), flips, st.none() | st.integers(0, 200)),
        st.builds(lambda a, b: a + b, st.sampled_from(SEQUENCES), st.binary(max_size=80)),
    )
)
def test_fuzzed_sasl_frames(harness: SaslHarness, data: bytes) -> None:
    served.clear()
    harness.run(harness.throw(data))
    assert harness.errors == []
    if served:
        assert TOKEN in data, data
    assert harness.run(harness.still_serving())
