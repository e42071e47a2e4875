"""A page of records from one partition, and one test record produced, for the console."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from services.cli.common import CliError, kafka_cli_error
from services.cli.group_admin import GroupAdmin


def encode_bytes(data: bytes | None) -> tuple[str | None, str]:
    """Bytes as text when they are UTF-8, else base64; returns (text, encoding)."""
    if data is None:
        return None, "null"
    try:
        return data.decode("utf-8"), "utf8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


class RecordReader:
    """Reads a page with a short-lived assigned consumer (no group membership, no commit)."""

    def __init__(self, conf: Mapping[str, Any], groups: GroupAdmin, timeout_s: float) -> None:
        self.conf = dict(conf)
        self.groups = groups
        self.timeout = timeout_s

    def page(
        self, topic: str, partition: int, offset: int | None, timestamp_ms: int | None, limit: int
    ) -> dict[str, Any]:
        tp = (topic, partition)
        start, end = self._bounds(tp, offset, timestamp_ms)
        records: list[dict[str, Any]] = []
        if start < end:
            records = self._read(topic, partition, start, min(end, start + limit))
        next_offset = records[-1]["offset"] + 1 if records else start
        return {
            "topic": topic,
            "partition": partition,
            "start_offset": start,
            "next_offset": next_offset,
            "log_end_offset": end,
            "records": records,
        }

    def _bounds(self, tp: tuple[str, int], offset: int | None, ts: int | None) -> tuple[int, int]:
        parts = self.groups.topic_partitions([tp[0]])
        if tp not in parts:
            raise CliError(f"partition {tp[0]}-{tp[1]} does not exist", kind="not_found")
        first = self.groups.lookup([tp], "earliest")[tp]
        end = self.groups.lookup([tp], "latest")[tp]
        if ts is not None:
            found = self.groups.lookup([tp], ts)[tp]
            start = end if found < 0 else found
        elif offset is None:
            start = first
        else:
            start = min(max(offset, first), end)
        return start, end

    def _read(self, topic: str, partition: int, start: int, stop: int) -> list[dict[str, Any]]:
        consumer = Consumer(
            {
                **self.conf,
                "group.id": "kafka-py-console",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + self.timeout
        try:
            consumer.assign([TopicPartition(topic, partition, start)])
            while len(out) < stop - start and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        break
                    raise kafka_cli_error(KafkaException(err))
                if (msg.offset() or 0) >= stop:
                    break
                out.append(_record_doc(msg))
        finally:
            consumer.close()
        return out


def _record_doc(msg: Any) -> dict[str, Any]:
    key, key_enc = encode_bytes(msg.key())
    value, value_enc = encode_bytes(msg.value())
    ts_type, ts = msg.timestamp()
    headers = []
    for name, raw in msg.headers() or []:
        text, enc = encode_bytes(raw)
        headers.append({"key": name, "value": text, "encoding": enc})
    return {
        "offset": msg.offset(),
        "timestamp": ts,
        "timestamp_type": "LogAppendTime" if ts_type == 2 else "CreateTime",
        "key": key,
        "key_encoding": key_enc,
        "value": value,
        "value_encoding": value_enc,
        "headers": headers,
    }


class TestProducer:
    """One idempotent producer shared by the console's produce calls (thread-safe)."""

    def __init__(self, conf: Mapping[str, Any], groups: GroupAdmin, timeout_s: float) -> None:
        self.timeout = timeout_s
        self.groups = groups
        self._producer = Producer(
            {
                **conf,
                "enable.idempotence": True,
                "linger.ms": 0,
                "message.timeout.ms": int(timeout_s * 1000),
            }
        )
        self._lock = threading.Lock()

    def produce(
        self,
        topic: str,
        partition: int | None,
        key: str | None,
        value: str | None,
        headers: Sequence[tuple[str, str]],
    ) -> dict[str, Any]:
        parts = self.groups.topic_partitions([topic])  # not_found for an unknown topic
        if partition is not None and (topic, partition) not in parts:
            raise CliError(f"partition {topic}-{partition} does not exist", kind="not_found")
        done = threading.Event()
        result: dict[str, Any] = {}

        def delivered(err: Any, msg: Any) -> None:
            result["err"], result["msg"] = err, msg
            done.set()

        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = list(headers)
        try:
            with self._lock:
                self._producer.produce(topic, **kwargs)
        except (KafkaException, BufferError) as exc:
            raise CliError(f"produce failed: {exc}", kind="unavailable") from None
        deadline = time.monotonic() + self.timeout
        while not done.is_set() and time.monotonic() < deadline:
            self._producer.poll(0.1)
        if not done.is_set():
            raise CliError("no acknowledgement from the cluster in time", kind="unavailable")
        if result["err"] is not None:
            raise kafka_cli_error(KafkaException(result["err"]))
        msg = result["msg"]
        return {"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset()}

    def close(self) -> None:
        self._producer.flush(self.timeout)
