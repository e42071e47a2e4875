"""Writers: idempotent acks=all producers of unique sequenced values, one thread each.

Every writer sends ``encode_value(writer, seq)`` for seq = 0, 1, 2 ... to partition
``seq % partitions`` at a paced rate and records each send and each delivery report in the
``History``. A producer that hits a fatal error (the idempotent producer's OutOfOrderSequence,
an epoch it cannot bump...) is replaced by a new incarnation named ``<name>.<n>`` whose
sequence starts at 0 again, so ordering is always judged per incarnation.

``ConfluentWriter`` (librdkafka, 5 in flight), ``KafkaPythonWriter`` and ``AioKafkaWriter``
share ``Writer``: a subclass implements ``_produce_loop``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.e2e.checker.history import History, encode_value
from tests.e2e.checker.timeline import Timeline

#: librdkafka's settings of an idempotent producer that rides out faults (Kafka's defaults
#: otherwise: enable.idempotence implies acks=all and <= 5 in flight)
CONFLUENT_DEFAULTS: dict[str, object] = {
    "enable.idempotence": True,
    "acks": "all",
    "max.in.flight.requests.per.connection": 5,
    "linger.ms": 5,
    "message.timeout.ms": 120_000,
    "retry.backoff.ms": 100,
    "topic.metadata.refresh.interval.ms": 2000,
    # librdkafka's connection chatter stays out of the test output; to see the client's side
    # of an anomaly set RDKAFKA_DEBUG_ENV (below)
    "log_level": 2,
}

#: librdkafka debug contexts (e.g. ``eos,msg,protocol``) for every confluent-kafka writer; their
#: output goes to ``<evidence>/rdkafka-<writer>.log`` (opt-in: it is large)
RDKAFKA_DEBUG_ENV = "KAFKAPY_CHECKER_RDKAFKA_DEBUG"


def rdkafka_debug(writer_id: str, debug_dir: Path | None) -> dict[str, object]:
    """librdkafka settings that write its debug log of ``writer_id`` to ``debug_dir`` when
    RDKAFKA_DEBUG_ENV is set; {} otherwise."""
    contexts = os.environ.get(RDKAFKA_DEBUG_ENV, "").strip()
    if not contexts or debug_dir is None:
        return {}
    debug_dir.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger(f"checker.rdkafka.{writer_id}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    if not logger.handlers:
        handler = logging.FileHandler(debug_dir / f"rdkafka-{writer_id}.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
    return {"debug": contexts, "log_level": 7, "logger": logger}


def quiet_client_logs() -> None:
    """kafka-python and aiokafka log every retry at WARNING: under faults that is thousands of
    lines in a failed test's report. Their errors still show. A logger the checker sends to
    the evidence directory instead (``client_logs``: it no longer propagates) keeps its level."""
    for name in ("kafka", "aiokafka"):
        logger = logging.getLogger(name)
        if logger.propagate:
            logger.setLevel(logging.ERROR)


class Writer:
    """One producer thread; ``start()``, then ``stop()`` to halt and flush."""

    client = "?"

    def __init__(
        self,
        name: str,
        bootstrap: str,
        topic: str,
        partitions: int,
        history: History,
        timeline: Timeline | None = None,
        *,
        rate: float = 200.0,
        config: Mapping[str, Any] | None = None,
        debug_dir: Path | None = None,
    ) -> None:
        self.name = name
        self.debug_dir = debug_dir  # where a client's opt-in debug log goes (the evidence dir)
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.history = history
        self.timeline = timeline or Timeline()
        self.rate = rate
        self.config = dict(config or {})
        self.acks = 0  # delivery reports with an offset (progress, for liveness)
        self.last_ack_at = 0.0  # time.monotonic() of the latest acknowledgement
        self.errors = 0
        self.incarnation = 0
        self.flush_timeout = 60.0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"writer-{name}", daemon=True)
        self._crash: BaseException | None = None
        quiet_client_logs()

    @property
    def writer_id(self) -> str:
        """The name written into values: ``name`` or ``name.<incarnation>``."""
        return self.name if self.incarnation == 0 else f"{self.name}.{self.incarnation}"

    def start(self) -> None:
        self._thread.start()

    def wait_acks(self, count: int, timeout: float = 60.0) -> float:
        """Block until ``count`` records are acknowledged in total; returns the time taken."""
        started = time.monotonic()
        while self.acks < count:
            if time.monotonic() - started > timeout or self._crash is not None:
                raise AssertionError(
                    f"writer {self.name}: {self.acks}/{count} acks within {timeout:g}s"
                )
            time.sleep(0.02)
        return time.monotonic() - started

    def stop(self, flush_timeout: float = 60.0) -> None:
        """Stop sending and wait up to ``flush_timeout`` s for outstanding delivery reports
        (what is still unanswered stays ``unknown``)."""
        self.flush_timeout = flush_timeout
        self._halt.set()
        self._thread.join(flush_timeout + 30)
        if self._thread.is_alive():
            self.timeline.note(self.name, "writer thread did not stop")
        if self._crash is not None:
            raise RuntimeError(f"writer {self.name} crashed") from self._crash

    # ---- for subclasses -------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._produce_loop()
        except BaseException as exc:  # noqa: BLE001 - surfaced by stop()
            self._crash = exc
            self.timeline.note(self.name, f"writer crashed: {exc!r}")

    def _produce_loop(self) -> None:
        raise NotImplementedError

    def _next(self, seq: int) -> tuple[bytes, int]:
        """Record the send of ``seq``: (value, partition)."""
        partition = seq % self.partitions
        self.history.sent(self.writer_id, seq, self.topic, partition)
        return encode_value(self.writer_id, seq), partition

    def _report(self, value: bytes, partition: int, offset: int | None, error: str | None) -> None:
        self.history.delivered(value, partition, offset, error)
        if error is None:
            self.acks += 1
            self.last_ack_at = time.monotonic()
        else:
            self.errors += 1
            if self.errors <= 5:
                self.timeline.note(self.name, f"delivery failed: {error}")

    def _new_incarnation(self, why: str) -> None:
        self.incarnation += 1
        self.timeline.note(self.name, f"new producer {self.writer_id}: {why}")

    def _pace(self, started: float, sent: int) -> None:
        ahead = started + sent / self.rate - time.monotonic()
        if ahead > 0:
            self._halt.wait(ahead)


class ConfluentWriter(Writer):
    client = "confluent-kafka"

    def _produce_loop(self) -> None:
        from confluent_kafka import KafkaError, KafkaException, Producer

        fatal: list[str] = []  # fatal errors of the current incarnation

        def on_error(err: KafkaError) -> None:
            if err.fatal():
                fatal.append(str(err))

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                self._report(msg.value(), msg.partition(), msg.offset(), None)
            else:
                self._report(msg.value(), msg.partition(), None, str(err))
                if err.fatal():
                    fatal.append(str(err))

        while not self._halt.is_set():
            fatal.clear()
            conf = {
                **CONFLUENT_DEFAULTS,
                "bootstrap.servers": self.bootstrap,
                **self.config,
                **rdkafka_debug(self.writer_id, self.debug_dir),
            }
            producer = Producer({**conf, "error_cb": on_error})
            started, seq = time.monotonic(), 0
            while not self._halt.is_set() and not fatal:
                value, partition = self._next(seq)
                while True:
                    try:
                        producer.produce(
                            self.topic, value, partition=partition, on_delivery=on_delivery
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)
                    except KafkaException as exc:  # a producer in a fatal state refuses
                        self._report(value, partition, None, f"produce: {exc.args[0]}")
                        fatal.append(str(exc.args[0]))
                        break
                seq += 1
                producer.poll(0)
                self._pace(started, seq)
            left = producer.flush(5 if fatal else self.flush_timeout)
            if left:
                self.timeline.note(self.name, f"{left} records without a delivery report")
            if fatal:
                self._new_incarnation(f"fatal error {fatal[0]}")


class KafkaPythonWriter(Writer):
    client = "kafka-python"

    def _produce_loop(self) -> None:
        from kafka import KafkaProducer
        from kafka.errors import KafkaTimeoutError

        while not self._halt.is_set():
            producer = KafkaProducer(
                bootstrap_servers=self.bootstrap,
                enable_idempotence=True,
                acks="all",
                linger_ms=5,
                max_in_flight_requests_per_connection=5,
                delivery_timeout_ms=120_000,
                max_block_ms=5000,
                **self.config,
            )
            started, seq = time.monotonic(), 0
            broken: str | None = None
            while not self._halt.is_set() and broken is None:
                value, partition = self._next(seq)
                try:
                    fut = producer.send(self.topic, value, partition=partition)
                except KafkaTimeoutError as exc:
                    self._report(value, partition, None, f"send: {exc}")
                except Exception as exc:  # noqa: BLE001 - a producer in an error state
                    self._report(value, partition, None, f"send: {exc!r}")
                    broken = repr(exc)
                else:
                    fut.add_callback(
                        lambda md, v=value: self._report(v, md.partition, md.offset, None)
                    )
                    fut.add_errback(
                        lambda exc, v=value, p=partition: self._report(v, p, None, repr(exc))
                    )
                seq += 1
                self._pace(started, seq)
            try:
                producer.flush(timeout=5 if broken else self.flush_timeout)
            except KafkaTimeoutError:
                self.timeline.note(self.name, "records without a delivery report at the end")
            producer.close(timeout=5)
            if broken is not None:
                self._new_incarnation(broken)


class AioKafkaWriter(Writer):
    client = "aiokafka"

    def _produce_loop(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        from aiokafka import AIOKafkaProducer

        while not self._halt.is_set():
            producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap,
                enable_idempotence=True,
                acks="all",
                linger_ms=5,
                request_timeout_ms=60_000,
                **self.config,
            )
            try:
                await producer.start()
            except Exception as exc:  # noqa: BLE001 - the cluster may be mid-fault
                self.timeline.note(self.name, f"producer start failed: {exc!r}")
                await producer.stop()
                await asyncio.sleep(1)
                continue
            started, seq = time.monotonic(), 0
            broken: str | None = None
            pending: set[asyncio.Future[Any]] = set()
            while not self._halt.is_set() and broken is None:
                value, partition = self._next(seq)
                try:
                    fut = await producer.send(self.topic, value, partition=partition)
                except Exception as exc:  # noqa: BLE001 - recorded as a failed send
                    self._report(value, partition, None, f"send: {exc!r}")
                    broken = repr(exc)
                else:
                    pending.add(fut)
                    fut.add_done_callback(lambda f, v=value, p=partition: self._done(f, v, p))
                    fut.add_done_callback(pending.discard)
                seq += 1
                ahead = started + seq / self.rate - time.monotonic()
                if ahead > 0:
                    await asyncio.sleep(ahead)
            if pending:
                await asyncio.wait(pending, timeout=5 if broken else self.flush_timeout)
            await producer.stop()
            if broken is not None:
                self._new_incarnation(broken)

    def _done(self, fut: asyncio.Future[Any], value: bytes, partition: int) -> None:
        if fut.cancelled():
            self._report(value, partition, None, "cancelled")
        elif (exc := fut.exception()) is not None:
            self._report(value, partition, None, repr(exc))
        else:
            md = fut.result()
            self._report(value, md.partition, md.offset, None)


WRITERS: dict[str, type[Writer]] = {
    "confluent-kafka": ConfluentWriter,
    "kafka-python": KafkaPythonWriter,
    "aiokafka": AioKafkaWriter,
}
