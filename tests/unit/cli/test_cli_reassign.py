"""kafka-reassign-partitions.sh's JSON files and command line, without a cluster."""

from __future__ import annotations

import json

import pytest

from services.cli.common import CliError, UsageError
from services.cli.main import build_parser
from services.cli.partition_json import reassignment_json, reassignment_moves, topics_to_move


def test_plan_file_round_trip() -> None:
    doc = {
        "version": 1,
        "partitions": [
            {"topic": "b", "partition": 0, "replicas": [3, 1], "log_dirs": ["any", "any"]},
            {"topic": "a", "partition": 2, "replicas": [1, 2, 3]},
        ],
    }
    moves = reassignment_moves(doc)
    assert moves == {("b", 0): [3, 1], ("a", 2): [1, 2, 3]}
    text = reassignment_json(moves)
    assert text == (
        '{"version":1,"partitions":[{"topic":"a","partition":2,"replicas":[1,2,3],'
        '"log_dirs":["any","any","any"]},{"topic":"b","partition":0,"replicas":[3,1],'
        '"log_dirs":["any","any"]}]}'
    )
    assert reassignment_moves(json.loads(text)) == moves


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]},
            "Partition replica lists may not contain duplicate entries: t-0: 1,1",
        ),
        (
            {"partitions": [{"topic": "t", "partition": 0, "replicas": []}]},
            "Partition replica list cannot be empty: t-0",
        ),
        (
            {
                "partitions": [
                    {"topic": "t", "partition": 0, "replicas": [1]},
                    {"topic": "t", "partition": 0, "replicas": [2]},
                ]
            },
            "Partition reassignment contains duplicate topic partitions: t-0",
        ),
        ({"version": 2, "partitions": []}, "Not supported version field value 2"),
        ({"partitions": [{"topic": "t", "partition": 0}]}, "has no 'replicas' field"),
        (
            {"partitions": [{"topic": "t", "partition": 0, "replicas": "1,2"}]},
            "'replicas' must be a list of broker ids",
        ),
        (
            {"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": []}]},
            "is different from size of log dirs list",
        ),
        (
            {"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}]},
            'log_dirs other than "any" are not supported',
        ),
        ({"topics": []}, 'missing "partitions" field'),
    ],
)
def test_bad_plan_files(doc: object, message: str) -> None:
    with pytest.raises(CliError) as err:
        reassignment_moves(doc)
    assert message in str(err.value)


def test_topics_to_move() -> None:
    assert topics_to_move({"version": 1, "topics": [{"topic": "a"}, {"topic": "b"}]}) == ["a", "b"]
    with pytest.raises(CliError, match="duplicate entries: a"):
        topics_to_move({"topics": [{"topic": "a"}, {"topic": "a"}]})
    with pytest.raises(CliError, match='missing the "topics" list'):
        topics_to_move({"partitions": []})


def test_command_line() -> None:
    args = build_parser().parse_args(
        ["reassign-partitions", "--verify", "--reassignment-json-file", "p.json"]
    )
    assert (args.command, args.action, args.reassignment_json_file) == (
        "reassign-partitions",
        "verify",
        "p.json",
    )
    with pytest.raises(UsageError):
        build_parser().parse_args(["reassign-partitions", "--verify", "--execute"])
    with pytest.raises(UsageError):
        build_parser().parse_args(["reassign-partitions"])
