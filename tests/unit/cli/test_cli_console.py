"""console-producer / console-consumer driven through fake confluent_kafka clients."""

from __future__ import annotations

import io
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError

from services.cli import console_consumer, console_producer
from services.cli.common import CliError, UsageError
from services.cli.main import build_parser


class FakeProducer:
    def __init__(self, conf: dict[str, Any], fail: bool = False) -> None:
        self.conf = conf
        self.sent: list[tuple[str, bytes | None, bytes | None, Any]] = []
        self.pending: list[Any] = []
        self.fail = fail

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: Any = None,
        on_delivery: Any = None,
    ) -> None:
        self.sent.append((topic, key, value, headers))
        self.pending.append(on_delivery)

    def poll(self, timeout: float = 0) -> int:
        return self.flush(timeout)

    def flush(self, timeout: float = 0) -> int:
        err = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large") if self.fail else None
        for cb in self.pending:
            cb(err, None)
        self.pending.clear()
        return 0


def _producer_args(*extra: str) -> Any:
    return build_parser().parse_args(["console-producer", "--topic", "t", *extra])


def test_producer_one_record_per_line_with_keys_and_headers() -> None:
    made: list[FakeProducer] = []

    def factory(conf: dict[str, Any]) -> FakeProducer:
        made.append(FakeProducer(conf))
        return made[-1]

    args = _producer_args(
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        "--header",
        "src=cli",
        "--acks",
        "1",
        "--compression-type",
        "lz4",
    )
    stdin = io.BytesIO(b"k1:v1\nk2:v2:x\r\n:empty-key\n")
    assert console_producer.run(args, {"bootstrap.servers": "h:1"}, stdin, factory) == 0
    p = made[0]
    assert p.conf["acks"] == "1" and p.conf["compression.type"] == "lz4"
    assert p.conf["bootstrap.servers"] == "h:1"
    assert p.sent == [
        ("t", b"k1", b"v1", [("src", b"cli")]),
        ("t", b"k2", b"v2:x", [("src", b"cli")]),
        ("t", b"", b"empty-key", [("src", b"cli")]),
    ]


def test_producer_plain_lines_have_no_key_and_no_headers() -> None:
    made: list[FakeProducer] = []
    args = _producer_args()
    console_producer.run(
        args, {}, io.BytesIO(b"a\n\nb"), lambda conf: made.append(FakeProducer(conf)) or made[-1]
    )
    assert [(k, v, h) for _, k, v, h in made[0].sent] == [
        (None, b"a", None),
        (None, b"", None),
        (None, b"b", None),
    ]


def test_producer_delivery_error_is_one_line() -> None:
    with pytest.raises(
        CliError, match="2 of 2 records were not delivered to t: MSG_SIZE_TOO_LARGE"
    ):
        console_producer.run(
            _producer_args(), {}, io.BytesIO(b"a\nb\n"), lambda conf: FakeProducer(conf, fail=True)
        )


def test_producer_bad_line_stops() -> None:
    args = _producer_args("--property", "parse.key=true")
    with pytest.raises(CliError, match="line number 2"):
        console_producer.run(args, {}, io.BytesIO(b"k\tv\nnokey\n"), FakeProducer)


class _Msg:
    def __init__(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes,
        headers: list[tuple[str, bytes]] | None = None,
        ts: tuple[int, int] = (1, 1000),
    ) -> None:
        self._p, self._o, self._k, self._v, self._h, self._ts = (
            partition,
            offset,
            key,
            value,
            headers,
            ts,
        )

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes:
        return self._v

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._h

    def timestamp(self) -> tuple[int, int]:
        return self._ts

    def error(self) -> None:
        return None


class _TopicMd:
    def __init__(self, partitions: int) -> None:
        self.partitions = {p: object() for p in range(partitions)}
        self.error = None


class _Md:
    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = {t: _TopicMd(n) for t, n in topics.items()}


class FakeConsumer:
    def __init__(self, conf: dict[str, Any], messages: list[_Msg], partitions: int = 2) -> None:
        self.conf = conf
        self.messages = list(messages)
        self.partitions = partitions
        self.assigned: list[tuple[int, int]] = []
        self.closed = False
        self.times_asked: list[tuple[int, int]] = []

    def list_topics(self, topic: str, timeout: float) -> _Md:
        return _Md({"t": self.partitions})

    def offsets_for_times(self, tps: list[Any], timeout: float) -> list[Any]:
        self.times_asked = [(tp.partition, tp.offset) for tp in tps]
        for tp in tps:
            tp.offset = 7 if tp.partition == 0 else -1
        return tps

    def assign(self, tps: list[Any]) -> None:
        self.assigned = [(tp.partition, tp.offset) for tp in tps]

    def poll(self, timeout: float) -> _Msg | None:
        return self.messages.pop(0) if self.messages else None

    def close(self) -> None:
        self.closed = True


def _consume(argv: list[str], messages: list[_Msg]) -> tuple[FakeConsumer, bytes]:
    args = build_parser().parse_args(["console-consumer", "--topic", "t", *argv])
    args.request_timeout_ms = 1000
    out = io.BytesIO()
    made: list[FakeConsumer] = []

    def factory(conf: dict[str, Any]) -> FakeConsumer:
        made.append(FakeConsumer(conf, messages))
        return made[0]

    assert console_consumer.run(args, {}, out, factory) == 0
    return made[0], out.getvalue()


MSGS = [
    _Msg(0, 5, b"key", b"value", [("k1", b"v1"), ("k2", b"v2")], (1, 1700000000000)),
    _Msg(1, 0, None, b"second", None, (2, 5)),
]


def test_consumer_prints_like_default_message_formatter(capsys: pytest.CaptureFixture[str]) -> None:
    consumer, out = _consume(
        [
            "--from-beginning",
            "--max-messages",
            "2",
            "--property",
            "print.timestamp=true",
            "--property",
            "print.partition=true",
            "--property",
            "print.offset=true",
            "--property",
            "print.headers=true",
            "--property",
            "print.key=true",
        ],
        list(MSGS),
    )
    assert out == (
        b"CreateTime:1700000000000\tPartition:0\tOffset:5\tk1:v1,k2:v2\tkey\tvalue\n"
        b"LogAppendTime:5\tPartition:1\tOffset:0\tNO_HEADERS\tnull\tsecond\n"
    )
    assert consumer.assigned == [(0, OFFSET_BEGINNING), (1, OFFSET_BEGINNING)]
    assert consumer.conf["enable.auto.commit"] is False and consumer.closed
    assert "Processed a total of 2 messages" in capsys.readouterr().err


def test_consumer_partition_offset_and_key_separator() -> None:
    consumer, out = _consume(
        [
            "--partition",
            "1",
            "--offset",
            "3",
            "--max-messages",
            "1",
            "--property",
            "print.key=true",
            "--key-separator",
            "\\t=>",
        ],
        list(MSGS),
    )
    assert consumer.assigned == [(1, 3)]
    assert out == b"key\t=>value\n"


def test_consumer_latest_by_default_and_timeout() -> None:
    consumer, out = _consume(["--timeout-ms", "50"], [])
    assert consumer.assigned == [(0, OFFSET_END), (1, OFFSET_END)]
    assert out == b""


def test_consumer_from_timestamp_uses_offsets_for_times() -> None:
    consumer, _ = _consume(["--from-timestamp", "1234", "--timeout-ms", "10"], [])
    assert consumer.times_asked == [(0, 1234), (1, 1234)]
    assert consumer.assigned == [(0, 7), (1, OFFSET_END)]


def test_consumer_option_conflicts_and_missing_partition() -> None:
    with pytest.raises(UsageError, match="cannot be used together"):
        _consume(["--partition", "0", "--from-beginning", "--offset", "4"], [])
    with pytest.raises(UsageError, match="partition is required when offset"):
        _consume(["--offset", "4"], [])
    with pytest.raises(UsageError, match="group and partition cannot"):
        _consume(["--group", "g", "--partition", "0"], [])
    with pytest.raises(UsageError, match="group ids given with --group"):
        _consume(["--group", "g", "--consumer-property", "group.id=h"], [])
    with pytest.raises(CliError, match="has no partition 9"):
        _consume(["--partition", "9"], [])


def test_producer_partitions_keys_with_murmur2_and_takes_kafka_option_names(
    tmp_path: Any,
) -> None:
    made: list[FakeProducer] = []

    def factory(conf: dict[str, Any]) -> FakeProducer:
        made.append(FakeProducer(conf))
        return made[-1]

    config = tmp_path / "producer.properties"
    config.write_text("linger.ms=50\nacks=1\nbatch.size=100\nkey.serializer=x.Y\n")
    args = _producer_args(
        "--producer.config",
        str(config),
        "--producer-property",
        "batch.size=200",
        "--producer-property",
        "buffer.memory=1048576",
        "--request-required-acks",
        "-1",
        "--compression-codec",
        "--sync",
    )
    console_producer.run(args, {}, io.BytesIO(b"a\nb\n"), factory)
    conf = made[0].conf
    assert conf["partitioner"] == "murmur2_random"  # Kafka's DefaultPartitioner for keys
    assert conf["acks"] == "all" and conf["compression.type"] == "gzip"  # options win
    assert conf["linger.ms"] == "50" and conf["batch.size"] == "200"  # file < --producer-property
    assert conf["queue.buffering.max.kbytes"] == "1024" and "key.serializer" not in conf
    assert conf["client.id"] == "console-producer"
    made.clear()
    console_producer.run(_producer_args("--compression-codec", "lz4"), {}, io.BytesIO(b""), factory)
    assert made[0].conf["compression.type"] == "lz4" and made[0].conf["acks"] == "all"


def test_producer_sync_stops_at_the_first_failed_record() -> None:
    made: list[FakeProducer] = []

    def factory(conf: dict[str, Any]) -> FakeProducer:
        made.append(FakeProducer(conf, fail=True))
        return made[-1]

    with pytest.raises(CliError, match="1 of 1 records were not delivered"):
        console_producer.run(_producer_args("--sync"), {}, io.BytesIO(b"a\nb\nc\n"), factory)
    assert len(made[0].sent) == 1


class GroupConsumer(FakeConsumer):
    def __init__(self, conf: dict[str, Any], messages: list[_Msg]) -> None:
        super().__init__(conf, messages)
        self.subscribed: list[str] = []
        self.stored: list[tuple[int, int]] = []

    def subscribe(self, topics: list[str]) -> None:
        self.subscribed = topics

    def store_offsets(self, message: _Msg) -> None:
        self.stored.append((message.partition(), message.offset()))


def test_consumer_group_subscribes_and_stores_what_it_printed() -> None:
    args = build_parser().parse_args(
        ["console-consumer", "--topic", "t", "--group", "g", "--max-messages", "1"]
    )
    args.request_timeout_ms = 1000
    made: list[GroupConsumer] = []

    def factory(conf: dict[str, Any]) -> GroupConsumer:
        made.append(GroupConsumer(conf, list(MSGS)))
        return made[0]

    out = io.BytesIO()
    assert console_consumer.run(args, {}, out, factory) == 0
    c = made[0]
    assert c.conf["group.id"] == "g" and c.conf["enable.auto.commit"] is True
    assert c.conf["enable.auto.offset.store"] is False
    assert c.subscribed == ["t"] and c.assigned == []
    assert c.stored == [(0, 5)] and out.getvalue() == b"value\n" and c.closed


class _BadMsg(_Msg):
    def topic(self) -> str:
        return "t"


def test_consumer_deserializers_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    msgs = [
        _BadMsg(0, 0, b"w", (42).to_bytes(8, "big")),
        _BadMsg(0, 1, b"x", b"abc"),
        _BadMsg(0, 2, b"y", (7).to_bytes(8, "big")),
    ]
    argv = ["--from-beginning", "--property", "print.key=true", "--value-deserializer"]
    _, out = _consume([*argv, "long", "--skip-message-on-error", "--max-messages", "2"], msgs)
    assert out == b"w\t42\ny\t7\n"
    assert "skipping this message: t-0 offset 1: Size of data received by Long" in (
        capsys.readouterr().err
    )
    with pytest.raises(CliError, match="terminating consumer process: t-0 offset 1"):
        _consume([*argv, "org.apache.kafka.common.serialization.LongDeserializer"], list(msgs))
    assert "Processed a total of 1 messages" in capsys.readouterr().err


def test_consumer_formatters() -> None:
    _, out = _consume(
        [
            "--from-beginning",
            "--max-messages",
            "2",
            "--formatter",
            "kafka.tools.NoOpMessageFormatter",
        ],
        list(MSGS),
    )
    assert out == b""
    with pytest.raises(UsageError, match="formatter 'x.Y' is not available"):
        _consume(["--formatter", "x.Y"], [])
