"""How a gateway names a storage node's log dir in DescribeLogDirs: ``storage-<id>:<path>``.

A gateway answers for several storage nodes (decision "DescribeLogDirs answers for the storage
nodes a gateway serves"); the id in the name tells them apart, and ``kafka-py log-dirs`` turns
the names back into (storage id, path).
"""

from __future__ import annotations

import re

_DIR_NAME = re.compile(r"^storage-(\d+):(.*)$", re.DOTALL)


def dir_name(broker_id: int, path: str) -> str:
    return f"storage-{broker_id}:{path}"


def parse_dir_name(name: str) -> tuple[int, str] | None:
    """``(storage id, path)`` of a name made by :func:`dir_name`, None for another form."""
    m = _DIR_NAME.match(name)
    return (int(m.group(1)), m.group(2)) if m else None
