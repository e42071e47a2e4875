"""Kafka's deserializers as kafka-console-consumer's DefaultMessageFormatter applies them: the
bytes become the ``toString()`` of what the Java deserializer returns, as UTF-8 text.

Names are the Java class names (``org.apache.kafka.common.serialization.LongDeserializer``) or
short ones (``long``). ``json-pretty`` is kafka-py's own: JSON indented for reading.
"""

from __future__ import annotations

import json
import math
import struct
import uuid
from collections.abc import Callable, Mapping
from decimal import Decimal

from services.cli.common import UsageError

Deserializer = Callable[[bytes], bytes]

_PKG = "org.apache.kafka.common.serialization."


class DeserializationError(ValueError):
    """The bytes do not fit the deserializer (Kafka's SerializationException)."""


def _fixed(name: str, fmt: str, size: int, render: Callable[[float], str] = str) -> Deserializer:
    def deserialize(data: bytes) -> bytes:
        if len(data) != size:
            raise DeserializationError(f"Size of data received by {name} is not {size}")
        return render(struct.unpack(fmt, data)[0]).encode()

    return deserialize


def java_double(value: float) -> str:
    """``Double.toString``: plain between 10^-3 and 10^7, else ``d.dddE±n``; shortest digits."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    return _java_decimal(repr(value), abs(value))


def java_float(value: float) -> str:
    """``Float.toString``: as java_double, with the shortest digits that read back as the
    same 32-bit float."""
    if math.isnan(value) or math.isinf(value) or value == 0:
        return java_double(value)
    packed = struct.pack(">f", value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if struct.pack(">f", float(text)) == packed:
            return _java_decimal(text, abs(value))
    return _java_decimal(repr(value), abs(value))


def _java_decimal(shortest: str, magnitude: float) -> str:
    sign, digits, exponent = Decimal(shortest).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    prefix = "-" if sign else ""
    if 1e-3 <= magnitude < 1e7:
        point = len(text) + exponent  # digits before the decimal point
        if point <= 0:
            whole, frac = "0", "0" * -point + text
        elif point >= len(text):
            whole, frac = text + "0" * (point - len(text)), "0"
        else:
            whole, frac = text[:point], text[point:]
        return f"{prefix}{whole}.{frac}"
    return f"{prefix}{text[0]}.{text[1:] or '0'}E{len(text) - 1 + exponent}"


def _string(encoding: str) -> Deserializer:
    def deserialize(data: bytes) -> bytes:
        return data.decode(encoding, "replace").encode()

    return deserialize


def _uuid(data: bytes) -> bytes:
    try:
        return str(uuid.UUID(data.decode())).encode()
    except ValueError:
        raise DeserializationError("Error parsing data into UUID") from None


def kafka_bytes_text(data: bytes) -> bytes:
    """``org.apache.kafka.common.utils.Bytes.toString``: printable ASCII as is (but ``\\``),
    everything else as ``\\xHH``."""
    return "".join(
        chr(b) if 0x20 <= b <= 0x7E and b != 0x5C else f"\\x{b:02X}" for b in data
    ).encode()


def _json(indent: int | None) -> Deserializer:
    def deserialize(data: bytes) -> bytes:
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise DeserializationError(f"not JSON: {exc}") from None
        if indent is None:
            return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
        return json.dumps(doc, indent=indent, ensure_ascii=False).encode()

    return deserialize


def _raw(data: bytes) -> bytes:
    return data


_BUILDERS: dict[str, Callable[[Mapping[str, str]], Deserializer]] = {
    "StringDeserializer": lambda c: _string(c.get("encoding", "UTF-8")),
    "LongDeserializer": lambda c: _fixed("LongDeserializer", ">q", 8),
    "IntegerDeserializer": lambda c: _fixed("IntegerDeserializer", ">i", 4),
    "ShortDeserializer": lambda c: _fixed("ShortDeserializer", ">h", 2),
    "DoubleDeserializer": lambda c: _fixed("DoubleDeserializer", ">d", 8, java_double),
    "FloatDeserializer": lambda c: _fixed("FloatDeserializer", ">f", 4, java_float),
    "UUIDDeserializer": lambda c: _uuid,
    # Java prints a byte[]'s identity ("[B@1b6d3586"); the bytes themselves are what one wants.
    "ByteArrayDeserializer": lambda c: _raw,
    "BytesDeserializer": lambda c: kafka_bytes_text,
    "JsonDeserializer": lambda c: _json(None),
    "JsonPrettyDeserializer": lambda c: _json(2),
}
_SHORT = {
    "string": "StringDeserializer",
    "long": "LongDeserializer",
    "integer": "IntegerDeserializer",
    "int": "IntegerDeserializer",
    "short": "ShortDeserializer",
    "double": "DoubleDeserializer",
    "float": "FloatDeserializer",
    "uuid": "UUIDDeserializer",
    "bytearray": "ByteArrayDeserializer",
    "bytes": "BytesDeserializer",
    "json": "JsonDeserializer",
    "json-pretty": "JsonPrettyDeserializer",
}
_QUALIFIED = {_PKG + n: n for n in _BUILDERS if not n.startswith("Json")}
_QUALIFIED["org.apache.kafka.connect.json.JsonDeserializer"] = "JsonDeserializer"


def deserializer(name: str, config: Mapping[str, str] | None = None) -> Deserializer:
    """The deserializer called ``name``; ``config`` holds its own properties (``encoding``)."""
    simple = _QUALIFIED.get(name) or _SHORT.get(name.lower())
    if simple is None:
        known = ", ".join(sorted(_SHORT))
        raise UsageError(f"unknown deserializer {name!r}; use a Kafka class name or one of {known}")
    return _BUILDERS[simple](config or {})
