"""Record <-> text the way Kafka's console tools do it.

``MessageFormatter`` follows kafka-console-consumer's DefaultMessageFormatter: optional columns in
the order timestamp, partition, offset, headers, key, value, separated by ``key.separator``.
``LineReader`` follows kafka-console-producer's LineMessageReader (``parse.key``,
``parse.headers``, separators, ``null.marker``, ``ignore.error``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from services.cli.common import UsageError, unescape
from services.cli.deserializers import DeserializationError, Deserializer, deserializer

Header = tuple[str, bytes | None]

TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """What the formatter needs from a consumed record (``timestamp_type`` None = no timestamp)."""

    partition: int
    offset: int
    timestamp_type: str | None
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[Header] = ()


def _bool(props: Mapping[str, str], name: str, default: bool) -> bool:
    if name not in props:
        return default
    return props[name].strip().lower() == "true"


_DESERIALIZERS = ("key.deserializer", "value.deserializer", "headers.deserializer")


def _check_known(props: Mapping[str, str], known: set[str], what: str) -> None:
    # "<x>.deserializer.<name>" configures that deserializer (as Kafka's formatter passes it on)
    unknown = sorted(
        k for k in set(props) - known if not k.startswith(tuple(d + "." for d in _DESERIALIZERS))
    )
    if unknown:
        raise UsageError(
            f"unknown {what} property {unknown[0]!r}; known: {', '.join(sorted(known))}"
        )


@dataclass(frozen=True, slots=True)
class MessageFormatter:
    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_delivery: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"
    key_deserializer: Deserializer | None = None
    value_deserializer: Deserializer | None = None
    headers_deserializer: Deserializer | None = None

    PROPERTIES = frozenset(
        {
            *_DESERIALIZERS,
            "print.timestamp",
            "print.partition",
            "print.offset",
            "print.delivery",
            "print.headers",
            "print.key",
            "print.value",
            "key.separator",
            "line.separator",
            "headers.separator",
            "null.literal",
        }
    )

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> MessageFormatter:
        _check_known(props, set(cls.PROPERTIES), "formatter")

        def sep(name: str, default: bytes) -> bytes:
            return unescape(props[name]).encode() if name in props else default

        return cls(
            print_timestamp=_bool(props, "print.timestamp", False),
            print_partition=_bool(props, "print.partition", False),
            print_offset=_bool(props, "print.offset", False),
            print_delivery=_bool(props, "print.delivery", False),
            print_headers=_bool(props, "print.headers", False),
            print_key=_bool(props, "print.key", False),
            print_value=_bool(props, "print.value", True),
            key_separator=sep("key.separator", b"\t"),
            line_separator=sep("line.separator", b"\n"),
            headers_separator=sep("headers.separator", b","),
            null_literal=sep("null.literal", b"null"),
            key_deserializer=_deserializer(props, "key.deserializer"),
            value_deserializer=_deserializer(props, "value.deserializer"),
            headers_deserializer=_deserializer(props, "headers.deserializer"),
        )

    def _text(self, data: bytes | None, deserialize: Deserializer | None) -> bytes:
        # Kafka would hand a null to the deserializer as the null literal's bytes; the null
        # literal itself is what is meant.
        if data is None:
            return self.null_literal
        return data if deserialize is None else deserialize(data)

    def format(self, rec: ConsumedRecord) -> bytes:
        """One record as Kafka's DefaultMessageFormatter writes it."""
        columns: list[bytes] = []
        if self.print_timestamp:
            columns.append(
                f"{rec.timestamp_type}:{rec.timestamp}".encode()
                if rec.timestamp_type
                else b"NO_TIMESTAMP"
            )
        if self.print_partition:
            columns.append(f"Partition:{rec.partition}".encode())
        if self.print_offset:
            columns.append(f"Offset:{rec.offset}".encode())
        if self.print_delivery:
            columns.append(b"Delivery:NONE")  # delivery counts exist only for share groups
        if self.print_headers:
            if not rec.headers:
                columns.append(b"NO_HEADERS")
            else:
                columns.append(
                    self.headers_separator.join(
                        k.encode() + b":" + self._text(v, self.headers_deserializer)
                        for k, v in rec.headers
                    )
                )
        if self.print_key:
            columns.append(self._text(rec.key, self.key_deserializer))
        if self.print_value:
            columns.append(self._text(rec.value, self.value_deserializer))
        if not columns:
            return b""
        # Columns are separated by key.separator; the last one is followed by line.separator.
        return self.key_separator.join(columns) + self.line_separator


def _deserializer(props: Mapping[str, str], name: str) -> Deserializer | None:
    if not props.get(name):
        return None
    prefix = name + "."
    config = {k[len(prefix) :]: v for k, v in props.items() if k.startswith(prefix)}
    return deserializer(props[name], config)


class LoggingMessageFormatter:
    """Kafka's LoggingMessageFormatter: DefaultMessageFormatter's output, plus an INFO log line
    per record (``CreateTime:ts, key:k, value:v``) on stderr."""

    def __init__(self, default: MessageFormatter, log: Callable[[str], None]) -> None:
        self.default = default
        self.log = log

    def format(self, rec: ConsumedRecord) -> bytes:
        out = self.default.format(rec)
        ts = f"{rec.timestamp_type}:{rec.timestamp}, " if rec.timestamp_type else ""
        key = "null " if rec.key is None else rec.key.decode("utf-8", "replace") + ", "
        value = "null" if rec.value is None else rec.value.decode("utf-8", "replace")
        self.log(f"{ts}key:{key}value:{value}")
        return out


class NoOpMessageFormatter:
    """Kafka's NoOpMessageFormatter: prints nothing (records are only counted)."""

    def format(self, rec: ConsumedRecord) -> bytes:
        return b""


class OffsetsMessageFormatter:
    """Kafka's OffsetsMessageFormatter for ``__consumer_offsets``: one line per offset commit,
    ``[group,topic,partition]::OffsetAndMetadata(offset=.., leaderEpoch=Optional[..],
    metadata=.., commitTimestamp=.., expireTimestamp=None)`` (``NULL`` for a deletion); group
    metadata records are skipped."""

    def format(self, rec: ConsumedRecord) -> bytes:
        from services.common.errors import KafkaError

        try:
            return self._format(rec)
        except KafkaError as exc:  # not a record of Kafka's schemas
            raise DeserializationError(str(exc)) from None

    @staticmethod
    def _format(rec: ConsumedRecord) -> bytes:
        from services.common.internal_topics.consumer_offsets import (
            OffsetKey,
            parse_key,
            parse_offset_value,
        )

        if rec.key is None:
            return b""
        key = parse_key(rec.key)
        if not isinstance(key, OffsetKey):
            return b""
        head = f"[{key.group},{key.topic},{key.partition}]::"
        if rec.value is None:
            return (head + "NULL\n").encode()
        o = parse_offset_value(rec.value)
        epoch = f"Optional[{o.leader_epoch}]" if o.leader_epoch >= 0 else "Optional.empty"
        expire = f"Some({o.expire_timestamp})" if o.expire_timestamp >= 0 else "None"
        return (
            f"{head}OffsetAndMetadata(offset={o.offset}, leaderEpoch={epoch}, "
            f"metadata={o.metadata}, commitTimestamp={o.commit_timestamp}, "
            f"expireTimestamp={expire})\n"
        ).encode()


RecordFormatter = (
    MessageFormatter | LoggingMessageFormatter | NoOpMessageFormatter | OffsetsMessageFormatter
)

# --formatter values kafka-console-consumer.sh accepts (3.x names and their 3.8+ successors).
FORMATTERS = {
    "kafka.tools.DefaultMessageFormatter": "default",
    "org.apache.kafka.tools.consumer.DefaultMessageFormatter": "default",
    "kafka.tools.LoggingMessageFormatter": "logging",
    "org.apache.kafka.tools.consumer.LoggingMessageFormatter": "logging",
    "kafka.tools.NoOpMessageFormatter": "noop",
    "org.apache.kafka.tools.consumer.NoOpMessageFormatter": "noop",
    "kafka.coordinator.group.GroupMetadataManager$OffsetsMessageFormatter": "offsets",
    "org.apache.kafka.tools.consumer.OffsetsMessageFormatter": "offsets",
}


def make_formatter(
    name: str, props: Mapping[str, str], log: Callable[[str], None]
) -> RecordFormatter:
    kind = FORMATTERS.get(name)
    if kind is None:
        raise UsageError(
            f"formatter {name!r} is not available here; use one of "
            "kafka.tools.DefaultMessageFormatter, kafka.tools.LoggingMessageFormatter, "
            "kafka.tools.NoOpMessageFormatter, "
            "kafka.coordinator.group.GroupMetadataManager$OffsetsMessageFormatter "
            "(or their org.apache.kafka.tools.consumer names)"
        )
    if kind == "noop":
        return NoOpMessageFormatter()
    if kind == "offsets":
        return OffsetsMessageFormatter()
    default = MessageFormatter.from_properties(props)
    return default if kind == "default" else LoggingMessageFormatter(default, log)


@dataclass(frozen=True, slots=True)
class ProducedRecord:
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


class LineFormatError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class LineReader:
    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None
    ignore_error: bool = False

    PROPERTIES = frozenset(
        {
            "parse.key",
            "key.separator",
            "parse.headers",
            "headers.delimiter",
            "headers.separator",
            "headers.key.separator",
            "null.marker",
            "ignore.error",
        }
    )

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> LineReader:
        _check_known(props, set(cls.PROPERTIES), "reader")

        def raw(name: str, default: bytes) -> bytes:
            return unescape(props[name]).encode() if name in props else default

        reader = cls(
            parse_key=_bool(props, "parse.key", False),
            key_separator=raw("key.separator", b"\t"),
            parse_headers=_bool(props, "parse.headers", False),
            headers_delimiter=raw("headers.delimiter", b"\t"),
            headers_separator=raw("headers.separator", b","),
            headers_key_separator=raw("headers.key.separator", b":"),
            null_marker=unescape(props["null.marker"]).encode()
            if props.get("null.marker")
            else None,
            ignore_error=_bool(props, "ignore.error", False),
        )
        for name in (
            "key.separator",
            "headers.delimiter",
            "headers.separator",
            "headers.key.separator",
        ):
            if name in props and not unescape(props[name]):
                raise UsageError(f"reader property {name} must not be empty")
        return reader

    def parse(self, line: bytes, lineno: int) -> ProducedRecord:
        """One input line (without its line ending) -> key, value and headers."""
        rest = line
        headers: list[Header] = []
        if self.parse_headers:
            head, sep, tail = rest.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise LineFormatError(
                        f"no headers delimiter found on line number {lineno}: {_show(line)}"
                    )
            else:
                headers = self._headers(head, lineno)
                rest = tail
        key: bytes | None = None
        if self.parse_key:
            k, sep, v = rest.partition(self.key_separator)
            if not sep:
                if not self.ignore_error:
                    raise LineFormatError(
                        f"no key separator found on line number {lineno}: {_show(line)}"
                    )
            else:
                key, rest = self._nullable(k), v
        return ProducedRecord(key, self._nullable(rest), headers)

    def _headers(self, text: bytes, lineno: int) -> list[Header]:
        out: list[Header] = []
        for item in text.split(self.headers_separator):
            k, sep, v = item.partition(self.headers_key_separator)
            if not sep:
                raise LineFormatError(
                    f"header {_show(item)} on line number {lineno} has no "
                    f"{self.headers_key_separator.decode()!r} between key and value"
                )
            if self.null_marker is not None and k == self.null_marker:
                raise LineFormatError(
                    f"header key cannot match null.marker on line number {lineno}"
                )
            out.append((k.decode("utf-8", "replace"), self._nullable(v)))
        return out

    def _nullable(self, data: bytes) -> bytes | None:
        return None if self.null_marker is not None and data == self.null_marker else data


def _show(line: bytes) -> str:
    text = line.decode("utf-8", "replace")
    return repr(text if len(text) <= 60 else text[:57] + "...")
