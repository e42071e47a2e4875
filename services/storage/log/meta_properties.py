"""``meta.properties`` in every log dir (Kafka's ZooKeeper-mode format, version 0).

Written like ``java.util.Properties.store(writer, "")``::

    #
    #Sat Nov 22 13:05:00 UTC 2025
    version=0
    broker.id=1
    cluster.id=mKJfV2pqSu-ZuBOq0VKL8w
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from services.storage.log.files import atomic_write

META_PROPERTIES = "meta.properties"


class InvalidMetaPropertiesError(Exception):
    pass


@dataclass(frozen=True)
class MetaProperties:
    broker_id: int
    cluster_id: str | None = None
    version: int = 0
    extra: Mapping[str, str] = field(default_factory=dict)

    def to_properties(self) -> dict[str, str]:
        props = {"version": str(self.version), "broker.id": str(self.broker_id)}
        if self.cluster_id is not None:
            props["cluster.id"] = self.cluster_id
        for k, v in self.extra.items():
            props.setdefault(k, v)
        return props

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> MetaProperties:
        try:
            version = int(props.get("version", "0"))
            broker_id = int(props["broker.id"])
        except (KeyError, ValueError) as e:
            raise InvalidMetaPropertiesError(f"meta.properties is missing or has a bad {e}") from e
        if version != 0:
            raise InvalidMetaPropertiesError(f"unsupported meta.properties version {version}")
        extra = {k: v for k, v in props.items() if k not in ("version", "broker.id", "cluster.id")}
        return cls(
            broker_id=broker_id, cluster_id=props.get("cluster.id"), version=version, extra=extra
        )


def read_meta_properties(log_dir: Path) -> MetaProperties | None:
    path = log_dir / META_PROPERTIES
    try:
        text = path.read_text(encoding="latin-1")
    except FileNotFoundError:
        return None
    return MetaProperties.from_properties(parse_properties(text))


def write_meta_properties(log_dir: Path, meta: MetaProperties) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(
        log_dir / META_PROPERTIES,
        format_properties(meta.to_properties(), comment="").encode("latin-1"),
    )


# ---------------------------------------------------------------- Java properties
def format_properties(
    props: Mapping[str, str], comment: str | None = None, now: float | None = None
) -> str:
    """``Properties.store`` output: optional comment line, a date comment, ``key=value`` lines."""
    out: list[str] = []
    if comment is not None:
        out.append("#" + comment)
    out.append("#" + time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(now)))
    for k, v in props.items():
        out.append(f"{_escape(k, key=True)}={_escape(v, key=False)}")
    return "\n".join(out) + "\n"


def _escape(s: str, *, key: bool) -> str:
    res: list[str] = []
    for i, ch in enumerate(s):
        if ch == " " and (key or i == 0):
            res.append("\\ ")
        elif ch in "\\=:#!":
            res.append("\\" + ch)
        elif ch == "\t":
            res.append("\\t")
        elif ch == "\n":
            res.append("\\n")
        elif ch == "\r":
            res.append("\\r")
        elif ch == "\f":
            res.append("\\f")
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            res.append(f"\\u{ord(ch):04X}")
        else:
            res.append(ch)
    return "".join(res)


def parse_properties(text: str) -> dict[str, str]:
    """Parse ``java.util.Properties`` text (comments, ``=``/``:``/space separators, escapes)."""
    props: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        # join continuation lines (odd number of trailing backslashes)
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        if _continues(line):
            line = line[:-1]
        key_end = 0
        while key_end < len(line):
            ch = line[key_end]
            if ch == "\\":
                key_end += 2
                continue
            if ch in "=: \t\f":
                break
            key_end += 1
        key = line[:key_end]
        rest = line[key_end:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        props[_unescape(key)] = _unescape(rest)
    return props


def _continues(line: str) -> bool:
    n = len(line) - len(line.rstrip("\\"))
    return n % 2 == 1


def _unescape(s: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        ch = s[i]
        if ch != "\\" or i + 1 >= len(s):
            out.append(ch)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "u" and i + 6 <= len(s):
            try:
                out.append(chr(int(s[i + 2 : i + 6], 16)))
                i += 6
                continue
            except ValueError:
                pass
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
        i += 2
    return "".join(out)
