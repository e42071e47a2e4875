"""Consumer groups with real clients: the group protocol (FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup), committed offsets (OffsetCommit/OffsetFetch) and group admin
(ListGroups, DescribeGroups, DeleteGroups, OffsetDelete) through the gateway, served by the group
coordinators over ``__consumer_offsets``.

Every test uses its own topic and group. What is checked is what applications rely on: a
partition goes to one member of a group at a time, members share the partitions, a member that
leaves hands its partitions over, a restarted group resumes from its committed offsets (nothing
read twice, nothing skipped), and admin tools see the groups, their members and their offsets.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_support import (
    ApiUsage,
    Rec,
    TopicFactory,
    make_text_records,
    produce_confluent,
    unique_topic_name,
)

pytestmark = pytest.mark.integration

PARTITIONS = 6
PER_PARTITION = 50


def _records(tag: str, per_partition: int = PER_PARTITION, first_index: int = 0) -> list[Rec]:
    out: list[Rec] = []
    for p in range(PARTITIONS):
        out += make_text_records(tag, per_partition, p, first_index=first_index)
    return out


def _consumer(bootstrap: str, group: str, **extra: Any) -> Consumer:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 500,
        "fetch.wait.max.ms": 100,
        "topic.metadata.refresh.interval.ms": 2000,
    }
    conf.update(extra)
    return Consumer(conf)


def _poll_until(
    consumers: list[Consumer],
    done: Callable[[], bool],
    on_message: Callable[[int, Any], None],
    timeout: float,
    what: str,
) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        for i, c in enumerate(consumers):
            msg = c.poll(0.1)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consumer {i}: {err}")
            on_message(i, msg)


def _assigned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


@pytest.fixture
def group_name(request: pytest.FixtureRequest) -> str:
    return unique_topic_name(f"group-{request.node.name}")


def test_confluent_group_shares_partitions_and_resumes_from_commits(
    bootstrap: str, topic: TopicFactory, admin: AdminClient, api_usage: ApiUsage, group_name: str
) -> None:
    name = topic(PARTITIONS)
    with api_usage.record("confluent-kafka"):
        c1 = _consumer(bootstrap, group_name, **{"client.id": "member-one"})
        c2 = _consumer(bootstrap, group_name, **{"client.id": "member-two"})
        consumers = [c1, c2]
        try:
            for c in consumers:
                c.subscribe([name])
            # both members get a share of the partitions before anything is produced
            _poll_until(
                consumers,
                lambda: (
                    bool(_assigned(c1))
                    and bool(_assigned(c2))
                    and len(_assigned(c1) | _assigned(c2)) == PARTITIONS
                ),
                lambda i, m: pytest.fail(f"unexpected record before producing: {m.value()}"),
                60,
                "two members sharing the partitions",
            )
            a1, a2 = _assigned(c1), _assigned(c2)
            assert not a1 & a2, f"a partition assigned to both members: {a1} {a2}"
            assert a1 | a2 == set(range(PARTITIONS))

            records = _records("grp")
            produce_confluent(bootstrap, name, records)
            seen: dict[tuple[int, int], int] = {}

            def got(i: int, msg: Any) -> None:
                key = (msg.partition(), msg.offset())
                assert key not in seen, f"record {key} read twice (members {seen[key]} and {i})"
                seen[key] = i
                assert msg.partition() in _assigned(consumers[i])

            _poll_until(consumers, lambda: len(seen) == len(records), got, 60, "all records")
            by_member = {i: {p for (p, _), m in seen.items() if m == i} for i in (0, 1)}
            assert by_member[0] <= a1 and by_member[1] <= a2
            for c in consumers:
                c.commit(asynchronous=False)

            # member one leaves: member two takes every partition
            c1.close()
            consumers = [c2]
            _poll_until(
                consumers,
                lambda: _assigned(c2) == set(range(PARTITIONS)),
                lambda i, m: pytest.fail(f"record read again after the rebalance: {m.offset()}"),
                60,
                "the remaining member to own every partition",
            )
            more = _records("grp2", per_partition=10, first_index=PER_PARTITION)
            produce_confluent(bootstrap, name, more)
            later: list[tuple[int, int]] = []
            _poll_until(
                consumers,
                lambda: len(later) == len(more),
                lambda i, m: later.append((m.partition(), m.offset())),
                60,
                "the records produced after the rebalance",
            )
            assert sorted(later) == sorted(
                (p, PER_PARTITION + k) for p in range(PARTITIONS) for k in range(10)
            ), "the remaining member must resume every partition at its committed offset"
            c2.commit(asynchronous=False)
        finally:
            for c in consumers:
                c.close()

        # committed offsets as an admin tool sees them
        offsets = _group_offsets(admin, group_name)
        assert offsets == {(name, p): PER_PARTITION + 10 for p in range(PARTITIONS)}

        # a new member of the same group starts at the committed offsets: nothing to read
        c3 = _consumer(bootstrap, group_name, **{"enable.partition.eof": True})
        try:
            c3.subscribe([name])
            eof: set[int] = set()
            deadline = time.monotonic() + 60
            while eof != set(range(PARTITIONS)):
                assert time.monotonic() < deadline, f"no EOF on every partition: {eof}"
                msg = c3.poll(0.2)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    eof.add(msg.partition())
                    continue
                pytest.fail(f"restarted group read {msg.partition()}@{msg.offset()} again: {err}")
            committed = c3.committed([TopicPartition(name, p) for p in range(PARTITIONS)], 30)
            assert {tp.partition: tp.offset for tp in committed} == {
                p: PER_PARTITION + 10 for p in range(PARTITIONS)
            }
        finally:
            c3.close()


def _group_offsets(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    result = fut[group].result(timeout=30)
    out = {}
    for tp in result.topic_partitions:
        assert tp.error is None, tp.error
        out[(tp.topic, tp.partition)] = tp.offset
    return out


@pytest.fixture
def stable_member(
    bootstrap: str, topic: TopicFactory, group_name: str
) -> Iterator[tuple[str, Consumer]]:
    name = topic(PARTITIONS)
    c = _consumer(bootstrap, group_name, **{"client.id": "described-member"})
    c.subscribe([name])
    deadline = time.monotonic() + 60
    while len(_assigned(c)) != PARTITIONS:
        assert time.monotonic() < deadline, "the member got no assignment"
        c.poll(0.1)
    try:
        yield name, c
    finally:
        c.close()


def test_confluent_admin_lists_describes_and_deletes_groups(
    bootstrap: str,
    admin: AdminClient,
    api_usage: ApiUsage,
    group_name: str,
    stable_member: tuple[str, Consumer],
) -> None:
    name, member = stable_member
    with api_usage.record("confluent-kafka"):
        listed = admin.list_consumer_groups(request_timeout=30).result(timeout=30)
        states = {g.group_id: g.state for g in listed.valid}
        assert states.get(group_name) == ConsumerGroupState.STABLE, states

        (desc,) = admin.describe_consumer_groups([group_name], request_timeout=30).values()
        d = desc.result(timeout=30)
        assert d.group_id == group_name
        assert d.state == ConsumerGroupState.STABLE
        assert d.partition_assignor == "range"
        assert not d.is_simple_consumer_group
        (m,) = d.members
        assert m.client_id == "described-member"
        assert {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions} == {
            (name, p) for p in range(PARTITIONS)
        }

        # a group with a live member cannot be deleted
        fut = admin.delete_consumer_groups([group_name], request_timeout=30)[group_name]
        with pytest.raises(Exception, match="NON_EMPTY_GROUP|not empty"):
            fut.result(timeout=30)

        member.commit(
            offsets=[TopicPartition(name, p, 7) for p in range(PARTITIONS)], asynchronous=False
        )
        assert _group_offsets(admin, group_name) == {(name, p): 7 for p in range(PARTITIONS)}
        member.close()

        # empty now: offsets can be changed by an admin, then the group deleted
        from confluent_kafka import ConsumerGroupTopicPartitions

        altered = admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_name, [TopicPartition(name, 0, 3)])]
        )[group_name].result(timeout=30)
        assert [(tp.partition, tp.offset) for tp in altered.topic_partitions] == [(0, 3)]
        offsets = _group_offsets(admin, group_name)
        assert offsets[(name, 0)] == 3 and offsets[(name, 1)] == 7

        (desc,) = admin.describe_consumer_groups([group_name], request_timeout=30).values()
        assert desc.result(timeout=30).state == ConsumerGroupState.EMPTY

        admin.delete_consumer_groups([group_name], request_timeout=30)[group_name].result(
            timeout=30
        )
        listed = admin.list_consumer_groups(request_timeout=30).result(timeout=30)
        assert group_name not in {g.group_id for g in listed.valid}
        assert _group_offsets(admin, group_name) == {}


def test_kafka_python_group_consumer_and_admin(
    bootstrap: str, topic: TopicFactory, api_usage: ApiUsage, group_name: str
) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    name = topic(PARTITIONS)
    records = _records("kp")
    produce_confluent(bootstrap, name, records)
    with api_usage.record("kafka-python"):
        consumer = KafkaConsumer(
            name,
            bootstrap_servers=bootstrap,
            group_id=group_name,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=20000,
        )
        seen: set[tuple[int, int]] = set()
        try:
            for msg in consumer:
                assert (msg.partition, msg.offset) not in seen
                seen.add((msg.partition, msg.offset))
                if len(seen) == len(records):
                    break
            assert len(seen) == len(records)
            consumer.commit()
            committed = {
                p: consumer.committed(KpTopicPartition(name, p)) for p in range(PARTITIONS)
            }
            assert committed == {p: PER_PARTITION for p in range(PARTITIONS)}

            admin = KafkaAdminClient(bootstrap_servers=bootstrap)
            try:
                listed = {g["group_id"]: g for g in admin.list_groups()}
                assert listed[group_name]["group_state"] == "Stable"
                assert listed[group_name]["protocol_type"] == "consumer"
                desc = admin.describe_groups([group_name])[group_name]
                assert desc["group_state"] == "Stable" and desc["protocol_data"] == "range"
                (member,) = desc["members"]
                assert member["client_host"] == "/127.0.0.1"
                assert member["member_metadata"]["topics"] == [name]
                assert member["member_assignment"]["assigned_partitions"] == [
                    {"topic": name, "partitions": list(range(PARTITIONS))}
                ]
                offsets = admin.list_group_offsets({group_name: None})[group_name]
                assert {tp.partition: om.offset for tp, om in offsets.items()} == {
                    p: PER_PARTITION for p in range(PARTITIONS)
                }
            finally:
                admin.close()
        finally:
            consumer.close()

        # restarted: resumes where it committed
        more = _records("kp2", per_partition=5, first_index=PER_PARTITION)
        produce_confluent(bootstrap, name, more)
        consumer = KafkaConsumer(
            name,
            bootstrap_servers=bootstrap,
            group_id=group_name,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=20000,
        )
        try:
            again = []
            for msg in consumer:
                again.append((msg.partition, msg.offset))
                if len(again) == len(more):
                    break
            assert sorted(again) == sorted(
                (p, PER_PARTITION + k) for p in range(PARTITIONS) for k in range(5)
            )
            consumer.commit()
        finally:
            consumer.close()

        # empty group: delete the offsets of one partition (OffsetDelete), then the group
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.delete_group_offsets(group_name, [KpTopicPartition(name, 0)])
            offsets = admin.list_group_offsets({group_name: None})[group_name]
            assert {tp.partition for tp in offsets} == set(range(1, PARTITIONS))
            admin.delete_groups([group_name])
            assert group_name not in {g["group_id"] for g in admin.list_groups()}
        finally:
            admin.close()


def test_aiokafka_group_consumer_commits(
    bootstrap: str, topic: TopicFactory, api_usage: ApiUsage, group_name: str
) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    name = topic(PARTITIONS)
    records = _records("aio")
    produce_confluent(bootstrap, name, records)

    async def run(expected: int) -> list[tuple[int, int]]:
        consumer = AIOKafkaConsumer(
            name,
            bootstrap_servers=bootstrap,
            group_id=group_name,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        out: list[tuple[int, int]] = []
        try:
            async with asyncio.timeout(60):
                while len(out) < expected:
                    batch = await consumer.getmany(timeout_ms=500)
                    for msgs in batch.values():
                        out += [(m.partition, m.offset) for m in msgs]
            await consumer.commit()
            committed = {
                p: await consumer.committed(AioTopicPartition(name, p)) for p in range(PARTITIONS)
            }
            assert committed == {p: max(o for q, o in out if q == p) + 1 for p in range(PARTITIONS)}
        finally:
            await consumer.stop()
        return out

    with api_usage.record("aiokafka"):
        first = asyncio.run(run(len(records)))
        assert sorted(first) == sorted(
            (p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)
        )
        more = _records("aio2", per_partition=4, first_index=PER_PARTITION)
        produce_confluent(bootstrap, name, more)
        second = asyncio.run(run(len(more)))
        assert sorted(second) == sorted(
            (p, PER_PARTITION + k) for p in range(PARTITIONS) for k in range(4)
        )


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_balanced_consumer(
    bootstrap: str, topic: TopicFactory, api_usage: ApiUsage, group_name: str
) -> None:
    name = topic(PARTITIONS)
    records = _records("kcat")
    produce_confluent(bootstrap, name, records)
    with api_usage.record("kcat"):
        proc = subprocess.run(
            [
                "kcat",
                "-b",
                bootstrap,
                "-G",
                group_name,
                "-o",
                "beginning",
                "-c",
                str(len(records)),
                "-f",
                "%p %o\n",
                "-X",
                "enable.auto.commit=true",
                "-X",
                "auto.commit.interval.ms=200",
                name,
            ],
            capture_output=True,
            timeout=90,
            check=False,
            text=True,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = sorted(tuple(map(int, line.split())) for line in proc.stdout.splitlines() if line)
    assert got == sorted((p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION))
