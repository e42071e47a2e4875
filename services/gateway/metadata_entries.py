"""Metadata response entries kept across requests, one per topic.

A Metadata request for every topic used to build ~10 objects per partition each time: at 10,000
partitions ~100,000 short-lived objects per request, which also pushed the cyclic collector into
full collections over the whole (growing) heap. A topic's entry depends only on its cached
:class:`TopicInfo` (replaced, never mutated, when the topic changes), the gateways that may lead
for the client and the set of live storage node ids; it is rebuilt when one of them changes and
reused otherwise. Callers get a fresh top-level dict per request (authorization fills fields in
it); the partition list is shared and must not be mutated.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from services.common.metadata_cache import TopicInfo

Body = dict[str, Any]
Build = Callable[[TopicInfo, list[int], Collection[int]], Body]

PRUNE_FACTOR = 4  # entries per topic before gone topics are dropped (zones of clients)
PRUNE_SLACK = 64


class TopicEntries:
    def __init__(self) -> None:
        # (topic, leading gateways) -> (the TopicInfo built from, live storage ids, entry):
        # clients of different zones have different leading gateways, each kept
        self._kept: dict[tuple[str, tuple[int, ...]], tuple[TopicInfo, frozenset[int], Body]] = {}

    def entry(
        self, topic: TopicInfo, leaders: list[int], brokers: frozenset[int], build: Build
    ) -> Body:
        """``build(topic, leaders, brokers)``, reused while its inputs are the same."""
        key = (topic.name, tuple(leaders))
        kept = self._kept.get(key)
        if kept is None or kept[0] is not topic or kept[1] != brokers:
            kept = (topic, brokers, build(topic, leaders, brokers))
            self._kept[key] = kept
        return dict(kept[2])

    def forget_missing(self, topics: Mapping[str, TopicInfo]) -> None:
        """Drop the entries of topics that are gone, once they could be many (a recreated
        topic is a new TopicInfo, so a leftover entry is never reused for it)."""
        if len(self._kept) > PRUNE_FACTOR * len(topics) + PRUNE_SLACK:
            self._kept = {k: e for k, e in self._kept.items() if k[0] in topics}
