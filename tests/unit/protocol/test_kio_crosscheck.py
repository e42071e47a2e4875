"""Our bytes are kio's bytes (kio's serializer implements Kafka's spec independently of ours)."""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer

from services.common.protocol import message_spec
from services.common.protocol.schema import Kind, kio_class

from .helpers import ALL_MESSAGES, decode_body, encode_body, examples, message_id
from .kio_bridge import from_kio, to_kio
from .strategies import entity_strategy


@pytest.mark.parametrize("msg", ALL_MESSAGES, ids=message_id)
@settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_same_bytes_as_kio(msg: tuple[int, int, Kind], data: st.DataObject) -> None:
    key, version, kind = msg
    cls = kio_class(key, version, kind)
    body = data.draw(entity_strategy(message_spec(key, version, kind), kio_safe=True))

    ours = encode_body(key, version, kind, body)
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, to_kio(cls, body))
    theirs = buffer.getvalue()
    assert ours == theirs

    # kio reads our bytes back to the same message, and we read kio's.
    obj, size = entity_reader(cls)(ours, 0)  # type: ignore[var-annotated]
    assert size == len(ours)
    assert from_kio(obj) == body
    assert decode_body(key, version, kind, theirs)[0] == body
