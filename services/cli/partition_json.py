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
