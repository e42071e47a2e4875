"""Transactions end to end with confluent-kafka through the transaction coordinator: commits
and aborts over several topics and partitions read by read_committed / read_uncommitted
consumers, zombie fencing, an expired transaction aborted by the coordinator, and what the
coordinator wrote to ``__transaction_state`` (read back with the project's decoder)."""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kafka_support import (
    ApiUsage,
    TopicFactory,
    cli_ok,
    consume_confluent,
    gateway_requests,
    kafka_py,
    one_line,
    wait_for,
)

from services.cli.local_cluster import LocalCluster
from services.common.internal_topics.transaction_state import (
    TxnState,
    parse_key,
    parse_value,
)
from services.common.zk.layout import TRANSACTION_STATE_TOPIC

pytestmark = pytest.mark.integration

TOPICS, PARTITIONS = 3, 3


def _producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 5,
            **extra,
        }
    )


def _values(bootstrap: str, topic: str, expected: int, isolation: str) -> set[bytes]:
    got = consume_confluent(
        bootstrap,
        topic,
        list(range(PARTITIONS)),
        expected,
        extra_config={"isolation.level": isolation},
    )
    return {r.rec.value for recs in got.values() for r in recs if r.rec.value is not None}


def _state_records(bootstrap: str, txn_id: str) -> list[TxnState]:
    """The states written for ``txn_id`` to ``__transaction_state``, in log order."""
    got = consume_confluent(bootstrap, TRANSACTION_STATE_TOPIC, list(range(50)), 1, timeout=30.0)
    out = []
    for recs in got.values():
        for r in recs:
            if r.rec.key is not None and parse_key(r.rec.key) == txn_id and r.rec.value:
                out.append((r.offset, parse_value(r.rec.value).state))
    return [state for _, state in sorted(out)]


def test_commit_abort_over_topics_and_partitions(
    bootstrap: str, topic: TopicFactory, cluster: LocalCluster, api_usage: ApiUsage
) -> None:
    names = [topic(PARTITIONS) for _ in range(TOPICS)]
    txn_id = f"txn-{uuid.uuid4().hex[:8]}"
    with api_usage.record("confluent-kafka"):
        _commit_and_abort(bootstrap, names, txn_id)
    for api in ("InitProducerId", "AddPartitionsToTxn", "EndTxn", "FindCoordinator"):
        print(api, gateway_requests(cluster, api))


def _commit_and_abort(bootstrap: str, names: list[str], txn_id: str) -> None:
    p = _producer(bootstrap, txn_id)
    started = time.monotonic()
    p.init_transactions(60)
    print(f"init_transactions took {time.monotonic() - started:.2f}s")
    committed: set[bytes] = set()
    aborted: set[bytes] = set()
    for n in range(6):
        commit = n % 3 != 2
        p.begin_transaction()
        batch = set()
        for t in names:
            for part in range(PARTITIONS):
                for i in range(5):
                    value = f"{n}-{t}-{part}-{i}".encode()
                    p.produce(t, value=value, partition=part)
                    batch.add((t, value))
        assert p.flush(30) == 0  # in the log before the end (abort would purge unsent ones)
        if commit:
            p.commit_transaction(30)
            committed |= batch
        else:
            p.abort_transaction(30)
            aborted |= batch
    p.flush(10)
    for t in names:
        want_committed = {v for tt, v in committed if tt == t}
        want_all = want_committed | {v for tt, v in aborted if tt == t}
        assert _values(bootstrap, t, len(want_committed), "read_committed") == want_committed
        assert _values(bootstrap, t, len(want_all), "read_uncommitted") == want_all
    states = _state_records(bootstrap, txn_id)
    assert states[0] == TxnState.EMPTY
    assert states[-1] == TxnState.COMPLETE_ABORT  # the last transaction (n = 5) aborts
    assert states.count(TxnState.PREPARE_ABORT) == 2 and states.count(TxnState.COMPLETE_ABORT) == 2
    assert states.count(TxnState.PREPARE_COMMIT) == 4


def test_a_second_producer_fences_the_first(bootstrap: str, topic: TopicFactory) -> None:
    name = topic(1)
    txn_id = f"zombie-{uuid.uuid4().hex[:8]}"
    first = _producer(bootstrap, txn_id)
    first.init_transactions(60)
    first.begin_transaction()
    first.produce(name, value=b"zombie-open", partition=0)
    first.flush(10)
    # the new instance aborts the zombie's open transaction and takes over the id
    second = _producer(bootstrap, txn_id)
    second.init_transactions(60)
    second.begin_transaction()
    second.produce(name, value=b"fresh", partition=0)
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as info:
        first.produce(name, value=b"zombie-late", partition=0)
        first.commit_transaction(30)
    err = info.value.args[0]
    print(f"zombie: {err}")
    assert err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                          KafkaError.INVALID_PRODUCER_EPOCH), err  # fmt: skip
    assert _values_one(bootstrap, name, "read_committed", 1) == [b"fresh"]


def _values_one(
    bootstrap: str, name: str, isolation: str, expected: int, timeout: float = 60.0
) -> list[bytes | None]:
    got = consume_confluent(
        bootstrap, name, [0], expected, timeout=timeout, extra_config={"isolation.level": isolation}
    )
    return [r.rec.value for r in got[0]]


def test_an_expired_transaction_is_aborted_by_the_coordinator(
    bootstrap: str, topic: TopicFactory
) -> None:
    name = topic(1)
    txn_id = f"expire-{uuid.uuid4().hex[:8]}"
    p = _producer(bootstrap, txn_id, **{"transaction.timeout.ms": 2000})
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(name, value=b"left-open", partition=0)
    p.flush(10)
    # the coordinator checks every transaction.abort.timed.out.transaction.cleanup.interval.ms
    # (10 s by default): the transaction's records stay invisible and the LSO moves past them
    after = _producer(bootstrap, f"after-{uuid.uuid4().hex[:8]}")
    after.init_transactions(60)
    after.begin_transaction()
    after.produce(name, value=b"after", partition=0)
    after.commit_transaction(30)

    def aborted() -> bool:
        try:
            return _values_one(bootstrap, name, "read_committed", 1, timeout=3.0) == [b"after"]
        except AssertionError:  # still blocked at the open transaction's first offset
            return False

    wait_for("the expired transaction to be aborted", aborted, timeout=40)
    assert _values_one(bootstrap, name, "read_uncommitted", 2) == [b"left-open", b"after"]
    # too long a timeout is refused before anything starts
    bad = _producer(bootstrap, f"bad-{uuid.uuid4().hex[:8]}", **{"transaction.timeout.ms": 900001})
    with pytest.raises(KafkaException) as info:
        bad.init_transactions(30)
    assert info.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT


def test_kafka_python_and_aiokafka_transactions(bootstrap: str, topic: TopicFactory) -> None:
    """The same commit/abort cycle with kafka-python's and aiokafka's transactional producers."""
    import asyncio

    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    name = topic(2)
    kp = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:8]}")
    try:
        kp.init_transactions()
        for n, commit in enumerate((True, False, True)):
            kp.begin_transaction()
            for part in range(2):
                kp.send(name, value=f"kp-{n}-{part}".encode(), partition=part)
            kp.flush()
            if commit:
                kp.commit_transaction()
            else:
                kp.abort_transaction()
    finally:
        kp.close(5)

    async def aio() -> None:
        p = AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=f"aio-{uuid.uuid4().hex[:8]}"
        )
        await p.start()
        try:
            for n, commit in enumerate((False, True)):
                await p.begin_transaction()
                for part in range(2):
                    await p.send_and_wait(name, f"aio-{n}-{part}".encode(), partition=part)
                if commit:
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(aio())
    committed = {f"kp-{n}-{p}".encode() for n in (0, 2) for p in range(2)}
    committed |= {f"aio-1-{p}".encode() for p in range(2)}
    got = consume_confluent(
        bootstrap, name, [0, 1], len(committed), extra_config={"isolation.level": "read_committed"}
    )
    assert {r.rec.value for recs in got.values() for r in recs} == committed


def test_consume_transform_produce_with_send_offsets(
    bootstrap: str, topic: TopicFactory, cluster: LocalCluster
) -> None:
    """Exactly once with confluent-kafka: the input offsets commit with the output
    (AddOffsetsToTxn + TxnOffsetCommit); an aborted batch leaves neither output nor offsets."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as TP

    source, sink = topic(1), topic(1)
    feeder = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(20):
        feeder.produce(source, value=f"in-{i}".encode(), partition=0)
    assert feeder.flush(30) == 0
    group = f"eos-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    producer = _producer(bootstrap, f"eos-{uuid.uuid4().hex[:8]}")
    producer.init_transactions(60)
    try:
        consumer.subscribe([source])

        def batch(n: int) -> list[bytes]:
            out: list[bytes] = []
            deadline = time.monotonic() + 60
            while len(out) < n and time.monotonic() < deadline:
                for msg in consumer.consume(n - len(out), timeout=1.0):
                    assert msg.error() is None, msg.error()
                    out.append(msg.value())
            assert len(out) == n, out
            return out

        for commit in (True, False, True):
            values = batch(10)
            producer.begin_transaction()
            for v in values:
                producer.produce(sink, value=v.replace(b"in-", b"out-"), partition=0)
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
                consumer.seek(TP(source, 0, 10))  # the aborted batch is read again
        committed = consumer.committed([TP(source, 0)], timeout=30)
        assert committed[0].offset == 20
    finally:
        consumer.close()
    out = _values_one(bootstrap, sink, "read_committed", 20)
    assert out == [f"out-{i}".encode() for i in range(20)]
    for api in ("AddOffsetsToTxn", "TxnOffsetCommit"):
        print(api, gateway_requests(cluster, api))


def test_transactions_cli_lists_and_describes(bootstrap: str, topic: TopicFactory) -> None:
    """``kafka-py transactions list|describe`` (DescribeTransactions, ListTransactions)."""
    name = topic(2)
    txn_id = f"cli-{uuid.uuid4().hex[:8]}"
    p = _producer(bootstrap, txn_id)
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(name, value=b"x", partition=1)
    p.produce(name, value=b"y", partition=0)
    assert p.flush(30) == 0
    listed = cli_ok("transactions", "list", "--bootstrap-server", bootstrap, "--state", "Ongoing")
    header, *rows = listed.splitlines()
    assert header.split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    mine = [r.split() for r in rows if r.split()[0] == txn_id]
    assert len(mine) == 1 and mine[0][3] == "Ongoing"
    described = cli_ok(
        "transactions", "describe", "--bootstrap-server", bootstrap, "--transactional-id", txn_id
    )
    head, row = described.splitlines()
    fields = dict(zip(head.split(), row.split(), strict=True))
    assert fields["TransactionState"] == "Ongoing" and fields["ProducerId"] == mine[0][2]
    assert fields["TopicPartitions"] == f"{name}-0,{name}-1"
    p.commit_transaction(30)
    after = cli_ok(
        "transactions", "describe", "--bootstrap-server", bootstrap, "--transactional-id", txn_id
    )
    assert "CompleteCommit" in after
    missing = kafka_py(
        "transactions", "describe", "--bootstrap-server", bootstrap, "--transactional-id", "nope"
    )
    assert missing.returncode != 0
    assert "TRANSACTIONAL_ID_NOT_FOUND" in one_line(missing.stderr)


EOS_INPUT, EOS_BATCH = 30, 10
# per client: three transactions over the input in batches of 10: commit, commit, abort
EOS_PLAN = (True, True, False)


def _eos_source(bootstrap: str, topic: TopicFactory) -> tuple[str, str]:
    """A one-partition input topic holding ``in-0`` .. ``in-29`` and an empty output topic."""
    source, sink = topic(1), topic(1)
    feeder = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(EOS_INPUT):
        feeder.produce(source, value=f"in-{i}".encode(), partition=0)
    assert feeder.flush(30) == 0
    return source, sink


def _assert_eos_outcome(bootstrap: str, source: str, sink: str, group: str) -> None:
    """The two committed transactions are all read_committed sees, and their offsets are the
    group's committed position; the aborted one is visible only to read_uncommitted."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as TP

    committed_out = [f"out-{i}".encode() for i in range(2 * EOS_BATCH)]
    assert _values_one(bootstrap, sink, "read_committed", len(committed_out)) == committed_out
    everything = committed_out + [f"out-{i}".encode() for i in range(2 * EOS_BATCH, EOS_INPUT)]
    assert _values_one(bootstrap, sink, "read_uncommitted", EOS_INPUT) == everything
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        assert c.committed([TP(source, 0)], timeout=30)[0].offset == 2 * EOS_BATCH
    finally:
        c.close()


def test_kafka_python_send_offsets_to_transaction(
    bootstrap: str, topic: TopicFactory, api_usage: ApiUsage
) -> None:
    """kafka-python 3.x consume-transform-produce: a read_committed group consumer, the
    producer's ``send_offsets_to_transaction`` with the consumer's group metadata (KIP-447)."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    source, sink = _eos_source(bootstrap, topic)
    group = f"kp-eos-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        max_poll_records=EOS_BATCH,
    )
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"kp-eos-{uuid.uuid4().hex[:8]}"
    )
    try:
        with api_usage.record("kafka-python"):
            producer.init_transactions()
            for commit in EOS_PLAN:
                values: list[bytes] = []
                deadline = time.monotonic() + 60
                while len(values) < EOS_BATCH and time.monotonic() < deadline:
                    for recs in consumer.poll(1000, max_records=EOS_BATCH - len(values)).values():
                        values += [r.value for r in recs]
                assert len(values) == EOS_BATCH, values
                producer.begin_transaction()
                for v in values:
                    producer.send(sink, value=v.replace(b"in-", b"out-"), partition=0)
                producer.flush()  # in the log before the end (abort drops unsent records)
                tp = KTP(source, 0)
                offsets = {tp: OffsetAndMetadata(consumer.position(tp), "", -1)}
                producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
                if commit:
                    producer.commit_transaction()
                else:
                    producer.abort_transaction()
    finally:
        producer.close(5)
        consumer.close(autocommit=False)
    _assert_eos_outcome(bootstrap, source, sink, group)


def test_aiokafka_send_offsets_to_transaction(
    bootstrap: str, topic: TopicFactory, api_usage: ApiUsage
) -> None:
    """aiokafka consume-transform-produce: a read_committed group consumer, the producer's
    ``send_offsets_to_transaction(offsets, group_id)``."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    source, sink = _eos_source(bootstrap, topic)
    group = f"aio-eos-{uuid.uuid4().hex[:8]}"

    async def run() -> None:
        consumer = AIOKafkaConsumer(
            source,
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=f"aio-eos-{uuid.uuid4().hex[:8]}"
        )
        await consumer.start()
        await producer.start()
        try:
            for commit in EOS_PLAN:
                values: list[bytes] = []
                deadline = time.monotonic() + 60
                while len(values) < EOS_BATCH and time.monotonic() < deadline:
                    got = await consumer.getmany(
                        timeout_ms=1000, max_records=EOS_BATCH - len(values)
                    )
                    values += [r.value for recs in got.values() for r in recs]
                assert len(values) == EOS_BATCH, values
                await producer.begin_transaction()
                for v in values:
                    await producer.send_and_wait(
                        sink, value=v.replace(b"in-", b"out-"), partition=0
                    )
                tp = ATP(source, 0)
                await producer.send_offsets_to_transaction({tp: await consumer.position(tp)}, group)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()
            await consumer.stop()

    with api_usage.record("aiokafka"):
        asyncio.run(run())
    _assert_eos_outcome(bootstrap, source, sink, group)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_kafkajs_transaction_with_send_offsets(
    bootstrap: str, topic: TopicFactory, api_usage: ApiUsage, tmp_path: Path
) -> None:
    """kafkajs 2.2.4 ``producer.transaction()`` with ``sendOffsets`` for a group: commit,
    commit, abort; the group's committed offset is the second transaction's."""
    import base64

    from test_clients_kafkajs import run_node

    source, sink = _eos_source(bootstrap, topic)
    group = f"js-eos-{uuid.uuid4().hex[:8]}"
    transactions = []
    for n, commit in enumerate(EOS_PLAN):
        first = n * EOS_BATCH
        messages = [
            {"partition": 0, "value": base64.b64encode(f"out-{i}".encode()).decode()}
            for i in range(first, first + EOS_BATCH)
        ]
        offsets = [{"topic": source, "partition": 0, "offset": first + EOS_BATCH}]
        transactions.append({"commit": commit, "messages": messages, "offsets": offsets})
    spec = {
        "brokers": [bootstrap],
        "transactionalId": f"js-eos-{uuid.uuid4().hex[:8]}",
        "groupId": group,
        "topic": sink,
        "transactions": transactions,
    }
    with api_usage.record("kafkajs"):
        res = run_node("transaction.js", spec, tmp_path)
    assert res["ok"], (res.get("error"), res["stderr"][-3000:])
    _assert_eos_outcome(bootstrap, source, sink, group)


def test_find_hanging_and_abort_a_transaction_no_coordinator_knows(
    bootstrap: str, topic: TopicFactory, cluster: LocalCluster
) -> None:
    """Acceptance 5: a transactional batch written with no coordinator record of it (an hour
    old) holds partition 0's LSO; ``describe-producers`` shows it open, ``find-hanging`` finds
    it (and not a live transaction on partition 1), ``abort --start-offset`` writes an ABORT
    marker through the leader (WriteTxnMarkers), after which the LSO moves on."""
    import asyncio

    from txn_support import READ_COMMITTED, TxnPartition, init_producer_id

    name = topic(2)
    pid, epoch = init_producer_id(bootstrap)  # idempotent: no transactional id, no coordinator
    hung = TxnPartition(cluster, name, pid, epoch)
    an_hour_ago = int(time.time() * 1000) - 3_600_000
    start = asyncio.run(hung.append([b"hung-0", b"hung-1"], timestamp=an_hour_ago))
    live = _producer(bootstrap, f"live-{uuid.uuid4().hex[:8]}")
    live.init_transactions(60)
    live.begin_transaction()
    live.produce(name, value=b"live", partition=1)
    assert live.flush(30) == 0
    after = _producer(bootstrap, f"after-{uuid.uuid4().hex[:8]}")
    after.init_transactions(60)
    after.begin_transaction()
    after.produce(name, value=b"after", partition=0)
    after.commit_transaction(30)
    # the LSO is held at the hung transaction's first offset, the committed record after it
    assert asyncio.run(hung.latest(READ_COMMITTED)) == start < asyncio.run(hung.latest(0))

    def tool(*args: str) -> list[dict[str, str]]:
        head, *rows = cli_ok("transactions", *args, "--bootstrap-server", bootstrap).splitlines()
        return [dict(zip(head.split("\t"), r.split("\t"), strict=True)) for r in rows]

    def strip(rows: list[dict[str, str]]) -> list[dict[str, str]]:
        return [{k.strip(): v.strip() for k, v in r.items()} for r in rows]

    producers = strip(tool("describe-producers", "--topic", name, "--partition", "0"))
    mine = {r["ProducerId"]: r for r in producers}
    assert mine[str(pid)]["CurrentTransactionStartOffset"] == str(start)
    assert (
        mine[str(pid)]["LastSequence"] == "1" and mine[str(pid)]["LatestCoordinatorEpoch"] == "-1"
    )
    assert mine[str(pid)]["LastTimestamp"] == str(an_hour_ago)
    assert len(producers) == 2  # and the committed "after" producer, no transaction open
    found = strip(tool("find-hanging", "--topic", name))
    assert [(r["Partition"], r["ProducerId"], r["StartOffset"]) for r in found] == [
        ("0", str(pid), str(start))
    ]
    assert int(found[0]["Duration(min)"]) >= 60
    # with no age limit the live transaction is a candidate, but its coordinator has it
    everything = strip(tool("find-hanging", "--topic", name, "--max-transaction-timeout", "0"))
    assert [(r["Partition"], r["ProducerId"]) for r in everything] == [("0", str(pid))]

    cli_ok("transactions", "abort", "--bootstrap-server", bootstrap, "--topic", name,
           "--partition", "0", "--start-offset", str(start))  # fmt: skip
    assert _values_one(bootstrap, name, "read_committed", 1) == [b"after"]
    lso = asyncio.run(hung.latest(READ_COMMITTED))
    assert lso == asyncio.run(hung.latest(0)) > start  # the LSO is the high watermark again
    producers = strip(tool("describe-producers", "--topic", name, "--partition", "0"))
    assert {r["ProducerId"]: r for r in producers}[str(pid)]["CurrentTransactionStartOffset"] == (
        "None"
    )
    assert strip(tool("find-hanging", "--topic", name)) == []
    again = kafka_py("transactions", "abort", "--bootstrap-server", bootstrap, "--topic", name,
                     "--partition", "0", "--start-offset", str(start))  # fmt: skip
    assert again.returncode != 0
    assert f"Could not find any open transactions starting at offset {start}" in one_line(
        again.stderr
    )
    live.commit_transaction(30)
    got = consume_confluent(
        bootstrap, name, [0, 1], 4, extra_config={"isolation.level": "read_uncommitted"}
    )
    assert {p: [r.rec.value for r in recs] for p, recs in got.items()} == {
        0: [b"hung-0", b"hung-1", b"after"],
        1: [b"live"],
    }


def test_kip890_refuses_produce_outside_the_transaction_and_a_late_batch(
    bootstrap: str, topic: TopicFactory, cluster: LocalCluster
) -> None:
    """KIP-890 part 1, with raw requests through the gateway: a transactional batch to a
    partition never added to the transaction is INVALID_TXN_STATE; one to an added partition is
    appended (verified with the coordinator on the way); a batch of the transaction sent after
    its commit marker (a late retry) is INVALID_TXN_STATE instead of opening a transaction
    nobody will end, and the LSO stays at the high watermark. Last, on the storage node itself:
    a guard handed out before the producer's marker landed no longer lets the batch in."""
    import asyncio
    import socket

    from txn_support import READ_COMMITTED, READ_UNCOMMITTED, TxnPartition

    from services.common.protocol.api_keys import ApiKey
    from services.common.protocol.messages import decode_response, encode_request
    from services.common.records.record import Record, build_batch
    from services.common.rpc.kafkapy.v1 import storage_pb2 as pb
    from tests.integration.kafka_support import read_frame, split_bootstrap

    name = topic(2)
    txn_id = f"kip890-{uuid.uuid4().hex[:8]}"
    sock = socket.create_connection(split_bootstrap(bootstrap), timeout=30)
    corr = iter(range(1, 1000))

    def call(key: ApiKey, version: int, body: dict[str, object]) -> dict[str, object]:
        sock.sendall(encode_request(key, version, next(corr), "kip890", body))
        frame = read_frame(sock, timeout=30)
        assert frame is not None
        return decode_response(key, version, frame)[1]

    def retrying(key: ApiKey, version: int, body: dict[str, object]) -> dict[str, object]:
        deadline = time.monotonic() + 60  # the coordinator's shard is made on first use
        while (resp := call(key, version, body))["error_code"] in (14, 15, 16, 51):
            assert time.monotonic() < deadline, resp
            time.sleep(0.2)
        return resp

    def produce(partition: int, seq: int) -> int:
        batch = build_batch(
            [Record(timestamp=int(time.time() * 1000), value=f"v{seq}".encode())],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=True,
        )
        data = [{"index": partition, "records": batch}]
        body = {"transactional_id": txn_id, "acks": -1, "timeout": 30000,
                "topic_data": [{"name": name, "partition_data": data}]}  # fmt: skip
        resp = call(ApiKey.PRODUCE, 8, body)
        return int(resp["responses"][0]["partition_responses"][0]["error_code"])  # type: ignore[index]

    try:
        # FindCoordinator makes __transaction_state on first use, as clients start
        retrying(ApiKey.FIND_COORDINATOR, 1, {"key": txn_id, "key_type": 1})
        init = retrying(ApiKey.INIT_PRODUCER_ID, 1,
                    {"transactional_id": txn_id, "transaction_timeout": 60000})  # fmt: skip
        assert init["error_code"] == 0, init
        pid, epoch = int(init["producer_id"]), int(init["producer_epoch"])  # type: ignore[call-overload]
        added = call(ApiKey.ADD_PARTITIONS_TO_TXN, 1, {
            "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": name, "partitions": [0]}]})  # fmt: skip
        assert (
            added["results_by_topic_v3_and_below"][0]["results_by_partition"][0][  # type: ignore[index]
                "partition_error_code"
            ]
            == 0
        ), added
        assert produce(1, 0) == KafkaError.INVALID_TXN_STATE  # (a) never added
        assert produce(0, 0) == 0  # added: verified, appended
        assert produce(0, 1) == 0  # the transaction is open there: no verification
        ended = retrying(ApiKey.END_TXN, 1, {"transactional_id": txn_id, "producer_id": pid,
                                         "producer_epoch": epoch, "committed": True})  # fmt: skip
        assert ended["error_code"] == 0, ended
        p0 = TxnPartition(cluster, name, pid, epoch)
        deadline = time.monotonic() + 30
        while asyncio.run(p0.latest(READ_COMMITTED)) != asyncio.run(p0.latest(READ_UNCOMMITTED)):
            assert time.monotonic() < deadline, "the commit marker never landed"
            time.sleep(0.1)
        end = asyncio.run(p0.latest(READ_UNCOMMITTED))
        # (b) a late batch of the committed transaction: refused, no hanging transaction
        assert produce(0, 2) == KafkaError.INVALID_TXN_STATE
        assert produce(1, 1) == KafkaError.INVALID_TXN_STATE
        assert asyncio.run(p0.latest(READ_UNCOMMITTED)) == end
        assert asyncio.run(p0.latest(READ_COMMITTED)) == end
        p1 = TxnPartition(cluster, name, pid, epoch, partition=1)
        assert asyncio.run(p1.latest(READ_COMMITTED)) == asyncio.run(p1.latest(READ_UNCOMMITTED))
        # the guard: a marker landing between verification and append voids it (storage direct)
        batch = build_batch([Record(timestamp=int(time.time() * 1000), value=b"race")],
                            producer_id=pid, producer_epoch=epoch, base_sequence=0,
                            is_transactional=True)  # fmt: skip

        async def append(guard: int) -> pb.PartitionAppendResult:
            part = pb.PartitionAppend(topic=name, partition=1, records=batch,
                                      current_leader_epoch=-1, verification_guard=guard)  # fmt: skip
            req = pb.AppendRequest(acks=-1, timeout_ms=10000, transactional_id=txn_id,
                                   partitions=[part])  # fmt: skip
            return (await p1.call(p1.leader(), "Append", req)).partitions[0]

        held = asyncio.run(append(0))
        assert held.error_code == KafkaError.NOT_ENOUGH_REPLICAS and held.verification_guard
        assert asyncio.run(p1.marker(True, coordinator_epoch=0)).error_code == 0
        late = asyncio.run(append(held.verification_guard))
        assert late.error_code == KafkaError.INVALID_TXN_STATE, late
        assert asyncio.run(p1.latest(READ_COMMITTED)) == asyncio.run(p1.latest(READ_UNCOMMITTED))
    finally:
        sock.close()
    assert _values_one(bootstrap, name, "read_committed", 2) == [b"v0", b"v1"]
