"""Metadata entries kept across requests (metadata_entries.py): a gateway that reuses them
answers exactly what one that builds every entry afresh answers, whatever changed in between."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.metadata_cache import MetadataCache
from services.common.protocol import ApiKey
from services.common.zk import layout
from services.gateway.handlers import metadata
from services.gateway.metadata_entries import TopicEntries

from .fakes import add_brokers, add_gateway, add_topic, context, services

TOPICS = ("a", "b", "c")
BROKERS = (11, 12, 13)

ops = st.one_of(
    # a partition's leader moves (or goes: -1 / a broker that is not registered)
    st.tuples(
        st.just("state"),
        st.sampled_from(TOPICS),
        st.integers(0, 2),
        st.sampled_from((-1, *BROKERS)),
    ),
    st.tuples(st.just("broker"), st.sampled_from(BROKERS), st.booleans()),  # (de)registers
    st.tuples(st.just("delete"), st.sampled_from(TOPICS)),
    st.tuples(st.just("create"), st.sampled_from(TOPICS), st.integers(1, 3)),
    # a request: all topics or some, from a client hinting a zone (other leading gateways)
    st.tuples(
        st.just("request"),
        st.sampled_from(("z1", "z2", None)),
        st.none() | st.lists(st.sampled_from(TOPICS), max_size=3),
        st.booleans(),  # the authorizer fills topic_authorized_operations in the entries
    ),
)


def _cache() -> MetadataCache:
    cache = MetadataCache()
    cache.apply_cluster_id(layout.cluster_id_json("clu-1"))
    add_gateway(cache, 1, "z1")
    add_gateway(cache, 2, "z2")
    add_brokers(cache, *BROKERS)
    for name in TOPICS:
        add_topic(cache, name, {p: [11 + p % 3, 11 + (p + 1) % 3] for p in range(3)})
    return cache


def _apply(cache: MetadataCache, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "state" and cache.topic(op[1]) is not None:
        _, name, p, leader = op
        if p in cache.topic(name).partitions:  # type: ignore[union-attr]
            data = layout.PartitionStateZk(leader, 5, [11, 12], 1).to_json()
            cache.apply_partition_state(name, p, data, version=7)
    elif kind == "broker":
        _, broker_id, up = op
        if up:
            add_brokers(cache, broker_id)
        else:
            cache.apply_broker(broker_id, None)
    elif kind == "delete":
        cache.apply_topic_names(set(cache.topics) - {op[1]})
    elif kind == "create" and cache.topic(op[1]) is None:
        add_topic(cache, op[1], {p: [11 + p % 3] for p in range(op[2])})


async def _ask(svc: Any, zone: str | None, topics: list[str] | None, authz: bool) -> Any:
    ctx = context(svc, ApiKey.METADATA, 12, client_id=f"c,zone={zone}" if zone else "c")
    req = {"topics": None if topics is None else [{"name": n} for n in topics]}
    resp = await metadata.handle(ctx, req)
    if authz:  # as services.gateway.authz does with include_topic_authorized_operations
        for t in resp["topics"]:
            t["topic_authorized_operations"] = 8
    return resp


@settings(max_examples=150, deadline=None)
@given(st.lists(ops, max_size=25))
def test_kept_entries_answer_what_fresh_ones_do(steps: list[tuple[Any, ...]]) -> None:
    async def run() -> None:
        cache = _cache()
        kept = services(cache)
        for op in steps:
            _apply(cache, op)
            if op[0] != "request":
                continue
            _, zone, topics, authz = op
            fresh = dataclasses.replace(kept, topic_entries=TopicEntries())
            got = await _ask(kept, zone, topics, authz)
            want = await _ask(fresh, zone, topics, False)
            if authz:
                for t in want["topics"]:
                    t["topic_authorized_operations"] = 8
            assert got == want
            # what one response's caller did to its entries is not in the next response
            again = await _ask(kept, zone, topics, False)
            assert again == await _ask(fresh, zone, topics, False)

    asyncio.run(run())


def test_an_unchanged_topic_is_built_once_and_gone_topics_are_dropped() -> None:
    built: list[str] = []
    cache = _cache()

    def build(topic: Any, leaders: list[int], brokers: Any) -> dict[str, Any]:
        built.append(topic.name)
        return {"name": topic.name, "partitions": []}

    entries = TopicEntries()
    brokers = frozenset(cache.brokers)
    for _ in range(3):
        for name in TOPICS:
            entries.entry(cache.topic(name), [1], brokers, build)  # type: ignore[arg-type]
    assert built == list(TOPICS)
    add_topic(cache, "a", {0: [11]})  # a new TopicInfo for "a"
    entries.entry(cache.topic("a"), [1], brokers, build)  # type: ignore[arg-type]
    entries.entry(cache.topic("b"), [1], brokers - {13}, build)  # type: ignore[arg-type]
    entries.entry(cache.topic("c"), [2], brokers, build)  # type: ignore[arg-type]
    assert built == [*TOPICS, "a", "b", "c"]
    assert len(entries._kept) == 4  # c for two sets of leading gateways
    entries.forget_missing({})
    assert len(entries._kept) == 4  # few: kept until they could be many
    many = {f"t{i}": cache.topic("a") for i in range(100)}
    for name in many:
        entries.entry(dataclasses.replace(cache.topic("a"), name=name), [1], brokers, build)  # type: ignore[type-var]
    entries.forget_missing({"t0": many["t0"]})
    assert [k[0] for k in entries._kept] == ["t0"]
