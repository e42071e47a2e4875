"""The partition JSON files of Kafka's admin tools.

kafka-leader-election.sh ``--path-to-json-file``: ``{"partitions":[{"topic":"t","partition":0}]}``;
kafka-delete-records.sh ``--offset-json-file``:
``{"partitions":[{"topic":"t","partition":0,"offset":5}],"version":1}``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from services.cli.common import CliError

TopicPartition = tuple[str, int]


def read_json(path: str, what: str) -> Any:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not text.strip():
        raise CliError(f"{what} is empty")
    try:
        return json.loads(text)
    except ValueError:
        raise CliError(f"{path}: the input string is not a valid JSON") from None


def tp_text(tp: TopicPartition) -> str:
    """Kafka's ``TopicPartition.toString``: ``topic-partition``."""
    return f"{tp[0]}-{tp[1]}"


def _field(entry: Any, name: str, kind: type) -> Any:
    if not isinstance(entry, dict) or name not in entry:
        raise CliError(f"partition entry {json.dumps(entry)} has no {name!r} field")
    value = entry[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise CliError(f"{name!r} must be an integer in {json.dumps(entry)}")
    if kind is str and not isinstance(value, str):
        raise CliError(f"{name!r} must be a string in {json.dumps(entry)}")
    return value


def _entries(doc: Any, what: str) -> list[Any]:
    if not isinstance(doc, dict) or "partitions" not in doc:
        raise CliError(f'{what} is missing "partitions" field')
    entries = doc["partitions"]
    if not isinstance(entries, list):
        raise CliError(f'"partitions" of {what} must be a list')
    return entries


def _no_duplicates(tps: list[TopicPartition], message: str) -> None:
    dups = [tp for tp, n in Counter(tps).items() if n > 1]
    if dups:
        raise CliError(message + ",".join(tp_text(tp) for tp in dups))


def election_partitions(doc: Any) -> list[TopicPartition]:
    """kafka-leader-election.sh's JSON: duplicates are an error."""
    what = "Replica election data"
    tps = [(_field(e, "topic", str), _field(e, "partition", int)) for e in _entries(doc, what)]
    _no_duplicates(tps, "Replica election data contains duplicate partitions: ")
    return tps


def delete_offsets(doc: Any) -> list[tuple[TopicPartition, int]]:
    """kafka-delete-records.sh's JSON (version 1, the default when absent)."""
    version = doc.get("version", 1) if isinstance(doc, dict) else 1
    if version != 1:
        raise CliError(f"Not supported version field value {version}")
    out = [
        ((_field(e, "topic", str), _field(e, "partition", int)), _field(e, "offset", int))
        for e in _entries(doc, "Offset json file")
    ]
    _no_duplicates([tp for tp, _ in out], "Offset json file contains duplicate topic partitions: ")
    return out


# ---- kafka-reassign-partitions.sh ---------------------------------------------------------------
def topics_to_move(doc: Any) -> list[str]:
    """``--topics-to-move-json-file``: ``{"topics":[{"topic":"foo"}],"version":1}``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("topics"), list):
        raise CliError('Topics to move JSON is missing the "topics" list')
    names = [_field(e, "topic", str) for e in doc["topics"]]
    dups = sorted(n for n, c in Counter(names).items() if c > 1)
    if dups:
        raise CliError("List of topics to reassign contains duplicate entries: " + ",".join(dups))
    return names


def reassignment_moves(doc: Any) -> dict[TopicPartition, list[int]]:
    """``--reassignment-json-file`` (version 1): target replicas per partition. ``log_dirs``, when
    given, must be ``"any"`` for every replica (moves between log dirs are not supported)."""
    version = doc.get("version", 1) if isinstance(doc, dict) else 1
    if version != 1:
        raise CliError(f"Not supported version field value {version}")
    moves: dict[TopicPartition, list[int]] = {}
    dup_parts: list[TopicPartition] = []
    dup_replicas: list[str] = []
    for e in _entries(doc, "Partition reassignment JSON"):
        tp = (_field(e, "topic", str), _field(e, "partition", int))
        replicas = _field(e, "replicas", list)
        if not isinstance(replicas, list) or not all(
            isinstance(r, int) and not isinstance(r, bool) for r in replicas
        ):
            raise CliError(f"'replicas' must be a list of broker ids in {json.dumps(e)}")
        if not replicas:
            raise CliError(f"Partition replica list cannot be empty: {tp_text(tp)}")
        dirs = e.get("log_dirs")
        if dirs is not None:
            if not isinstance(dirs, list) or len(dirs) != len(replicas):
                raise CliError(
                    f"Size of replicas list {replicas} is different from size of log dirs list "
                    f"{dirs} for partition {tp_text(tp)}"
                )
            if any(d != "any" for d in dirs):
                raise CliError(
                    f'log_dirs other than "any" are not supported (partition {tp_text(tp)})'
                )
        if tp in moves:
            dup_parts.append(tp)
        if len(set(replicas)) != len(replicas):
            dup_replicas.append(f"{tp_text(tp)}: {','.join(map(str, replicas))}")
        moves[tp] = list(replicas)
    if dup_parts:
        raise CliError(
            "Partition reassignment contains duplicate topic partitions: "
            + ",".join(tp_text(tp) for tp in dup_parts)
        )
    if dup_replicas:
        raise CliError(
            "Partition replica lists may not contain duplicate entries: " + ", ".join(dup_replicas)
        )
    return moves


def reassignment_json(moves: dict[TopicPartition, list[int]]) -> str:
    """Kafka's ``formatAsReassignmentJson``: one line, sorted, ``log_dirs`` all ``"any"``."""
    return json.dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
                for (t, p), r in sorted(moves.items())
            ],
        },
        separators=(",", ":"),
    )
