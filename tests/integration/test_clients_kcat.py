"""kcat (Debian's /usr/bin/kcat, librdkafka 2.0.2) round trips and metadata listing.

Produce: ``kcat -P -K: -Z -z <codec> -H ... -p <p> -l <file>`` per partition (keys, null keys,
null values via -Z, duplicate header keys, a null header value); consume with
``kcat -C -e -o beginning`` twice — ``-J`` (JSON envelope) and
``-f '%k|%s|%h|%T|%p|%o\\n'`` — and compare both with what was produced. 2,000 records
per codec, 10,000 in total.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from kafka_support import (
    ApiUsage,
    ReadRecord,
    Rec,
    TopicFactory,
    assert_partition_logs,
    make_text_records,
    now_ms,
    split_bootstrap,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed"),
]

KCAT = shutil.which("kcat") or "kcat"
PER_CODEC = 2_000
PARTITIONS = 3
# -H name=value per record of one invocation; "nullh" without '=' is a null header value.
HEADER_ARGS = ["src=kcat", "dup=a", "dup=b", "nullh"]
HEADERS: tuple[tuple[str, bytes | None], ...] = (
    ("src", b"kcat"),
    ("dup", b"a"),
    ("dup", b"b"),
    ("nullh", None),
)


def _run(args: Sequence[str], timeout: float = 60.0, stdin: bytes | None = None) -> str:
    proc = subprocess.run(
        [KCAT, *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, (
        f"kcat {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}"
    )
    return proc.stdout.decode()


def _line(r: Rec) -> str:
    key = "" if r.key is None else r.key.decode()
    value = "" if r.value is None else r.value.decode()
    return f"{key}:{value}\n"


def _produce(bootstrap: str, topic: str, codec: str, records: Sequence[Rec], path: Path) -> None:
    path.write_text("".join(_line(r) for r in records))
    header_flags = [x for h in HEADER_ARGS for x in ("-H", h)]
    _run(
        [
            "-b",
            bootstrap,
            "-P",
            "-t",
            topic,
            "-p",
            str(records[0].partition),
            "-K",
            ":",
            "-Z",
            "-z",
            codec,
            *header_flags,
            "-X",
            "enable.idempotence=true",
            "-l",
            str(path),
        ]
    )


def _consume_json(bootstrap: str, topic: str) -> dict[int, list[ReadRecord]]:
    out = _run(["-b", bootstrap, "-C", "-t", topic, "-e", "-o", "beginning", "-J", "-q"])
    got: dict[int, list[ReadRecord]] = {}
    for line in out.splitlines():
        m = json.loads(line)
        flat = m.get("headers") or []
        headers = tuple(
            (flat[i], None if flat[i + 1] is None else flat[i + 1].encode())
            for i in range(0, len(flat), 2)
        )
        key = None if m["key"] is None else m["key"].encode()
        value = None if m["payload"] is None else m["payload"].encode()
        ts_type = {"create": 0, "logappend": 1}.get(m.get("tstype"), -1)
        rec = Rec(m["partition"], key, value, headers, m["ts"])
        got.setdefault(m["partition"], []).append(ReadRecord(m["offset"], ts_type, rec))
    return got


def _consume_format(bootstrap: str, topic: str) -> dict[int, list[ReadRecord]]:
    """-f output; -Z prints null keys/values as NULL. Header values: kcat prints name=value."""
    out = _run(
        [
            "-b",
            bootstrap,
            "-C",
            "-t",
            topic,
            "-e",
            "-o",
            "beginning",
            "-Z",
            "-q",
            "-f",
            "%k|%s|%h|%T|%p|%o\n",
        ]
    )
    got: dict[int, list[ReadRecord]] = {}
    for line in out.splitlines():
        k, s, h, t, p, o = line.split("|")
        headers = []
        for item in h.split(",") if h else []:
            name, sep, val = item.partition("=")
            headers.append((name, val.encode() if sep and val != "NULL" else None))
        rec = Rec(
            int(p),
            None if k == "NULL" else k.encode(),
            None if s == "NULL" else s.encode(),
            tuple(headers),
            int(t),
        )
        got.setdefault(int(p), []).append(ReadRecord(int(o), 0, rec))
    return got


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_round_trip(
    bootstrap: str, topic: TopicFactory, api_usage: ApiUsage, codec: str, tmp_path: Path
) -> None:
    name = topic(PARTITIONS)
    per_partition = PER_CODEC // PARTITIONS + 1
    expected: list[Rec] = []
    start = now_ms()
    for p in range(PARTITIONS):
        recs = make_text_records(f"kc{codec}", per_partition, p, first_index=p * per_partition)
        recs = [Rec(r.partition, r.key, r.value, HEADERS, 0) for r in recs]
        with api_usage.record("kcat"):
            _produce(bootstrap, name, codec, recs, tmp_path / f"p{p}.txt")
        expected.extend(recs)
    end = now_ms()
    assert len(expected) >= PER_CODEC

    with api_usage.record("kcat"):
        as_json = _consume_json(bootstrap, name)
        as_format = _consume_format(bootstrap, name)
    assert_partition_logs(
        expected, as_json, check_timestamps=False, timestamp_range=(start - 1000, end + 1000)
    )
    # -f cannot tell a null header value from an empty one; compare the rest exactly
    assert_partition_logs(
        [Rec(r.partition, r.key, r.value, _format_headers(r.headers), 0) for r in expected],
        {
            p: [
                ReadRecord(
                    x.offset,
                    x.timestamp_type,
                    Rec(x.rec.partition, x.rec.key, x.rec.value, _format_headers(x.rec.headers), 0),
                )
                for x in rs
            ]
            for p, rs in as_format.items()
        },
        check_timestamps=False,
        timestamp_range=None,
    )


def _format_headers(hs: Sequence[tuple[str, bytes | None]]) -> tuple[tuple[str, bytes], ...]:
    return tuple((k, v or b"") for k, v in hs)


def test_kcat_metadata_lists_gateway_and_topics(
    bootstrap: str, topic: TopicFactory, api_usage: ApiUsage
) -> None:
    a, b = topic(3), topic(5)
    with api_usage.record("kcat"):
        md = json.loads(_run(["-b", bootstrap, "-L", "-J", "-q"]))
        one = json.loads(_run(["-b", bootstrap, "-L", "-J", "-q", "-t", a]))
    host, port = split_bootstrap(bootstrap)
    brokers = {br["id"]: br["name"] for br in md["brokers"]}
    assert f"{host}:{port}" in brokers.values(), f"gateway {bootstrap} not among brokers {brokers}"
    gateway_ids = {i for i, addr in brokers.items() if addr == f"{host}:{port}"}
    topics = {t["topic"]: t for t in md["topics"]}
    for name, n in ((a, 3), (b, 5)):
        assert name in topics, f"{name} not listed by kcat -L"
        t = topics[name]
        assert not t.get("error"), t
        parts = sorted(t["partitions"], key=lambda x: x["partition"])
        assert [x["partition"] for x in parts] == list(range(n))
        for x in parts:
            assert x["leader"] in gateway_ids, f"{name}[{x['partition']}] leader {x['leader']}"
            assert not x.get("error"), x
    # single-topic listing
    assert [t["topic"] for t in one["topics"]] == [a]
