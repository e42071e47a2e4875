"""The throttles kafka-reassign-partitions.sh sets for a set of moves, the log-dirs output and the
progress rows (pure functions; the commands themselves run against a cluster in
tests/e2e/test_replication_throttle.py)."""

from __future__ import annotations

import json

import pytest

from services.cli.common import CliError
from services.cli.log_dirs import LogDir, ReplicaDir, format_json, parse_answer
from services.cli.reassign_throttle import (
    PartitionMove,
    follower_throttles,
    format_progress,
    leader_throttles,
    move_map,
    ongoing_moves,
    progress,
    reassigning_brokers,
)


def test_throttles_of_moves_are_kafkas() -> None:
    current = {("foo", 0): [1, 2, 3], ("foo", 1): [4, 5, 6], ("bar", 0): [2, 3], ("bar", 1): [1]}
    proposed = {("foo", 0): [1, 2, 4], ("foo", 1): [4, 5, 6], ("bar", 0): [3, 5, 1]}
    # bar-0 is already moving from [2, 3] to [3, 5]; qux-0 from [7] to [8] (not in the file)
    ongoing = {
        ("bar", 0): {"replicas": [2, 3, 5], "adding": [5], "removing": [2]},
        ("qux", 0): {"replicas": [7, 8], "adding": [8], "removing": [7]},
    }
    assert ongoing_moves(ongoing)[("qux", 0)] == PartitionMove((7,), (8,))
    moves = move_map(current, proposed, ongoing)
    assert moves[("bar", 0)] == PartitionMove((2, 3), (3, 5, 1))  # sources: the original ones
    assert moves[("foo", 0)] == PartitionMove((1, 2, 3), (1, 2, 4))
    assert moves[("foo", 0)].adding == (4,)
    assert moves[("foo", 1)].adding == ()
    # leader side: every source replica; follower side: every adding replica (ongoing included)
    assert leader_throttles(moves) == {
        "foo": "0:1,0:2,0:3,1:4,1:5,1:6",
        "bar": "0:2,0:3",
        "qux": "0:7",
    }
    assert follower_throttles(moves) == {"foo": "0:4", "bar": "0:1,0:5", "qux": "0:8"}
    assert reassigning_brokers(moves) == [1, 2, 3, 4, 5, 6, 7, 8]
    with pytest.raises(CliError, match="Topic partition baz-0 does not exist"):
        move_map(current, {("baz", 0): [1]})


def test_log_dirs_json_is_kafkas_shape() -> None:
    answer = {
        "results": [
            {
                "error_code": 0,
                "log_dir": "storage-2:/data/a",
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "partition_size": 10,
                                "offset_lag": 0,
                                "is_future_key": False,
                            }
                        ],
                    }
                ],
                "total_bytes": 100,
                "usable_bytes": 50,
            },
            {"error_code": 56, "log_dir": "storage-2:/data/b", "topics": []},
            {"error_code": 0, "log_dir": "/not/ours", "topics": []},
        ]
    }
    dirs = parse_answer(answer)
    assert list(dirs) == [2]
    text = format_json(dirs, [2], None)
    assert text == (
        '{"version":1,"brokers":[{"broker":2,"logDirs":['
        '{"logDir":"/data/a","error":null,"partitions":'
        '[{"partition":"t-0","size":10,"offsetLag":0,"isFuture":false}]},'
        '{"logDir":"/data/b","error":"org.apache.kafka.common.errors.KafkaStorageException",'
        '"partitions":[]}]}]}'
    )
    filtered = json.loads(format_json(dirs, [2], {"other"}))
    assert filtered["brokers"][0]["logDirs"][0]["partitions"] == []


def test_progress_counts_adding_replicas_against_the_largest_source() -> None:
    moves = {("t", 0): PartitionMove((1, 2), (2, 3)), ("t", 1): PartitionMove((1,), (1,))}
    dirs = {
        1: [LogDir("/a", 0, replicas={("t", 0): ReplicaDir(1000, 0), ("t", 1): ReplicaDir(5, 0)})],
        2: [LogDir("/b", 0, replicas={("t", 0): ReplicaDir(990, 3)})],
        3: [LogDir("/c", 0, replicas={("t", 0): ReplicaDir(250, 40)})],
    }
    (row,) = progress(moves, dirs)
    assert (row.tp, row.broker, row.copied, row.total, row.remaining) == (
        ("t", 0),
        3,
        250,
        1000,
        750,
    )
    assert progress(moves, {1: dirs[1]})[0].copied == 0  # not created yet
    assert format_progress([row]).splitlines() == [
        "Progress of partition reassignment:",
        "Replica 3 of partition t-0: 250 of 1000 bytes copied (25.0%), 750 remaining",
        "Total: 250 of 1000 bytes copied (25.0%), 750 remaining",
    ]


def test_throttle_options_only_with_their_action() -> None:
    import argparse

    from services.cli.common import UsageError
    from services.cli.reassign_throttle import ThrottlePlugin

    plugin = ThrottlePlugin()
    plugin.check_arguments(
        argparse.Namespace(action="execute", throttle=10, preserve_throttles=False)
    )
    plugin.check_arguments(
        argparse.Namespace(action="verify", throttle=-1, preserve_throttles=True)
    )
    with pytest.raises(
        UsageError, match=r'Option "\[throttle\]" can\'t be used with action "\[verify\]"'
    ):
        plugin.check_arguments(
            argparse.Namespace(action="verify", throttle=10, preserve_throttles=False)
        )
    with pytest.raises(UsageError, match="preserve-throttles"):
        plugin.check_arguments(
            argparse.Namespace(action="execute", throttle=-1, preserve_throttles=True)
        )
