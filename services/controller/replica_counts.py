"""Replicas per storage node, kept up to date from the topics whose assignment changed instead of
recounted from every partition at each look of the elastic loop (issue 19).

The controller marks a topic (``ControllerContext.topic_changed``) wherever it changes or learns
of a change of its assignment: creation, new partitions, a reassignment step, deletion queued or
done, a topic found in or removed from ZooKeeper. :meth:`ReplicaCounts.refresh` takes the marks
and replaces those topics' share of the totals, so its cost follows what changed.

What is counted is what the elastic loop plans with (``services.controller.elastic``): a
partition's replicas are its reassignment target while it moves, else its assignment
(``replicas``, and the replication factor ``max_rf``); ``hosting`` counts the full replica set,
origin and target, as both still hold data. Topics queued for deletion are left out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from services.controller.model import ControllerContext, TopicState
from services.controller.replica_assignment import ReplicaAssignment


@dataclass(slots=True)
class Counts:
    """Partitions per node (``replicas``: planned set, ``hosting``: full set) and per
    replication factor (``rfs``)."""

    replicas: Counter[int] = field(default_factory=Counter)
    hosting: Counter[int] = field(default_factory=Counter)
    rfs: Counter[int] = field(default_factory=Counter)

    def add(self, other: Counts, sign: int = 1) -> None:
        for mine, theirs in (
            (self.replicas, other.replicas),
            (self.hosting, other.hosting),
            (self.rfs, other.rfs),
        ):
            for k, v in theirs.items():
                left = mine[k] + sign * v
                if left:
                    mine[k] = left
                else:
                    del mine[k]

    @property
    def max_rf(self) -> int:
        return max(self.rfs, default=0)


def count_topic(topic: TopicState) -> Counts:
    """One topic's share (every partition of it visited)."""
    out = Counts()
    for p, replicas in topic.assignment.items():
        planned: tuple[int, ...] | list[int] = replicas
        if p in topic.adding or p in topic.removing:
            planned = ReplicaAssignment(
                tuple(replicas),
                tuple(topic.adding.get(p, ())),
                tuple(topic.removing.get(p, ())),
            ).target
        out.replicas.update(planned)
        out.hosting.update(set(replicas))
        out.rfs[len(planned)] += 1
    return out


def recount(ctx: ControllerContext) -> Counts:
    """The totals counted from every partition (the first refresh; tests compare with it)."""
    total = Counts()
    for name, topic in ctx.topics.items():
        if name not in ctx.topics_to_delete:
            total.add(count_topic(topic))
    return total


class ReplicaCounts:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self.total = Counts()
        self._by_topic: dict[str, Counts] = {}
        self._started = False

    def refresh(self) -> Counts:
        """The totals now: the marked topics recounted (every topic the first time)."""
        ctx = self.ctx
        marked, ctx.changed_topics = ctx.changed_topics, set()
        if not self._started:
            self._started = True
            marked = set(ctx.topics)
        for name in marked:
            old = self._by_topic.pop(name, None)
            if old is not None:
                self.total.add(old, -1)
            topic = ctx.topics.get(name)
            if topic is None or name in ctx.topics_to_delete:
                continue
            share = self._by_topic[name] = count_topic(topic)
            self.total.add(share)
        return self.total
