"""Small Kafka files: checkpoints, meta.properties, partition.metadata, names, the epoch cache."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services.storage.log import checkpoint as ckpt
from services.storage.log import files
from services.storage.log.leader_epoch import LeaderEpochCache
from services.storage.log.meta_properties import (
    MetaProperties,
    format_properties,
    parse_properties,
    read_meta_properties,
    write_meta_properties,
)
from services.storage.log.partition_metadata import (
    read_partition_metadata,
    write_partition_metadata,
)


def test_offset_checkpoint_format(tmp_path: Path) -> None:
    path = tmp_path / ckpt.RECOVERY_POINT_CHECKPOINT
    ckpt.write_offset_checkpoint(path, {("orders", 1): 99, ("orders", 0): 1234, ("a-b", 10): 0})
    assert path.read_text() == "0\n3\na-b 10 0\norders 0 1234\norders 1 99\n"
    assert ckpt.read_offset_checkpoint(path) == {
        ("orders", 1): 99,
        ("orders", 0): 1234,
        ("a-b", 10): 0,
    }
    assert [p.name for p in tmp_path.iterdir()] == [ckpt.RECOVERY_POINT_CHECKPOINT]  # no .tmp left
    assert ckpt.read_offset_checkpoint(tmp_path / "missing") == {}
    ckpt.write_offset_checkpoint(path, {})
    assert path.read_text() == "0\n0\n"
    for bad in ("1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt x 1\n", "zero\n"):
        path.write_text(bad)
        with pytest.raises(ckpt.CorruptCheckpointError):
            ckpt.read_offset_checkpoint(path)


def test_clean_shutdown_marker(tmp_path: Path) -> None:
    assert not ckpt.take_clean_shutdown_marker(tmp_path)
    ckpt.mark_clean_shutdown(tmp_path)
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    assert ckpt.take_clean_shutdown_marker(tmp_path)
    assert not ckpt.take_clean_shutdown_marker(tmp_path)


def test_meta_properties(tmp_path: Path) -> None:
    write_meta_properties(
        tmp_path, MetaProperties(broker_id=3, cluster_id="mKJfV2pqSu-ZuBOq0VKL8w")
    )
    lines = (tmp_path / "meta.properties").read_text().splitlines()
    assert lines[0] == "#"
    assert re.fullmatch(r"#\w{3} \w{3} \d{2} \d{2}:\d{2}:\d{2} UTC \d{4}", lines[1])
    assert lines[2:] == ["version=0", "broker.id=3", "cluster.id=mKJfV2pqSu-ZuBOq0VKL8w"]
    meta = read_meta_properties(tmp_path)
    assert meta == MetaProperties(broker_id=3, cluster_id="mKJfV2pqSu-ZuBOq0VKL8w")
    assert read_meta_properties(tmp_path / "none") is None


def test_java_properties_parsing() -> None:
    text = (
        "# comment\n! other comment\n  spaced.key = value with spaces  \ncolon:x\n"
        "broker.id 7\ncont=a\\\n    b\nesc=c\\:d\\u0041\\\\\nempty=\n"
    )
    assert parse_properties(text) == {
        "spaced.key": "value with spaces  ",
        "colon": "x",
        "broker.id": "7",
        "cont": "ab",
        "esc": "c:dA\\",
        "empty": "",
    }
    props = {"k=1": "v:2 #x", "unicode": "é"}
    assert parse_properties(format_properties(props)) == props


def test_partition_metadata_and_uuid(tmp_path: Path) -> None:
    raw = bytes(15) + b"\x01"
    assert files.uuid_to_str(raw) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert files.uuid_from_str("AAAAAAAAAAAAAAAAAAAAAQ") == raw
    write_partition_metadata(tmp_path, raw)
    assert (
        tmp_path / "partition.metadata"
    ).read_text() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n"
    assert read_partition_metadata(tmp_path) == raw
    assert read_partition_metadata(tmp_path / "x") is None


def test_names() -> None:
    assert files.log_file(Path("/d"), 367814).name == "00000000000000367814.log"
    assert files.snapshot_file(Path("/d"), 5).name == "00000000000000000005.snapshot"
    assert files.offset_from_name("00000000000000367814.timeindex") == 367814
    assert files.offset_from_name("leader-epoch-checkpoint") is None
    assert files.parse_partition_dir("my-topic-12") == ("my-topic", 12)
    assert files.parse_partition_dir("t-0.abc-delete") is None
    assert files.parse_partition_dir("meta.properties") is None


def test_leader_epoch_cache_rules(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path, lambda: 100)
    cache.assign(1, 0)
    cache.assign(1, 5)  # same epoch, later offset: ignored
    cache.assign(2, 10)
    cache.assign(4, 30)
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n2 10\n4 30\n"
    assert cache.end_offset_for(3) == (2, 30)
    assert cache.end_offset_for(4) == (4, 100)
    assert cache.end_offset_for(0) == (0, 0)
    assert cache.end_offset_for(-1) == (-1, -1)
    cache.assign(3, 20)  # conflicting: entries with epoch >= 3 or offset >= 20 go
    assert [(e.epoch, e.start_offset) for e in cache.entries] == [(1, 0), (2, 10), (3, 20)]
    cache.truncate_from_end(15)
    assert [(e.epoch, e.start_offset) for e in cache.entries] == [(1, 0), (2, 10)]
    cache.truncate_from_start(12)
    assert [(e.epoch, e.start_offset) for e in cache.entries] == [(2, 12)]
    assert [(e.epoch, e.start_offset) for e in LeaderEpochCache(tmp_path).entries] == [(2, 12)]
