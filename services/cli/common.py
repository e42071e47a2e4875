"""Helpers shared by the ``kafka-py`` subcommands: errors, key=value options, client config."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from services.cli.probes import split_bootstrap, unreachable_reason

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
CLIENT_LOGGER = "kafka_py.cli.client"
_ESCAPES = {"\\t": "\t", "\\n": "\n", "\\r": "\r", "\\\\": "\\"}


class CliError(Exception):
    """A failure reported as one line on stderr; ``code`` is the exit status.

    ``kind`` says what went wrong for callers that answer in another medium (the console's REST
    API maps it to an HTTP status): ``invalid``, ``not_found``, ``conflict`` or ``unavailable``.
    """

    def __init__(self, message: str, code: int = 1, kind: str = "invalid") -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind


class UsageError(CliError):
    """Bad command line (exit status 2, like argparse)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 2)


def unescape(text: str) -> str:
    """Turn ``\\t``, ``\\n``, ``\\r`` and ``\\\\`` typed on a command line into the characters."""
    out: list[str] = []
    i = 0
    while i < len(text):
        pair = text[i : i + 2]
        if pair in _ESCAPES:
            out.append(_ESCAPES[pair])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def key_value(text: str) -> tuple[str, str]:
    """argparse type for ``k=v``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value


def kv_dict(pairs: Iterable[tuple[str, str]] | None) -> dict[str, str]:
    return dict(pairs or ())


def bootstrap_type(text: str) -> str:
    """argparse type for ``--bootstrap-server``: validates host:port[,host:port]."""
    try:
        split_bootstrap(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def read_properties(path: str) -> dict[str, str]:
    """A Java-style ``.properties`` file (``k=v`` or ``k: v`` lines, ``#``/``!`` comments)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep_at = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep_at < 0:
            props[line] = ""
        else:
            props[line[:sep_at].strip()] = line[sep_at + 1 :].strip()
    return props


# Java client properties with another name in librdkafka (value scale, if any).
_JAVA_RENAMES = {
    "max.request.size": ("message.max.bytes", 1),
    "buffer.memory": ("queue.buffering.max.kbytes", 1024),
    "send.buffer.bytes": ("socket.send.buffer.bytes", 1),
    "receive.buffer.bytes": ("socket.receive.buffer.bytes", 1),
}
# Java client properties without meaning here: the console tools handle bytes themselves
# (deserializers are formatter properties) and librdkafka never blocks a send.
_JAVA_ONLY = frozenset(
    {
        "key.serializer",
        "value.serializer",
        "key.deserializer",
        "value.deserializer",
        "max.block.ms",
        "max.poll.records",
        "exclude.internal.topics",
    }
)


def java_client_properties(props: Mapping[str, str]) -> dict[str, str]:
    """Client properties as a Kafka tool takes them, turned into librdkafka's names; names
    librdkafka shares with Java pass through (librdkafka rejects unknown ones)."""
    out: dict[str, str] = {}
    for name, value in props.items():
        if name in _JAVA_ONLY:
            continue
        if name in _JAVA_RENAMES:
            target, scale = _JAVA_RENAMES[name]
            try:
                out[target] = str(max(1, int(value) // scale))
            except ValueError:
                raise CliError(f"{name} must be a number, got {value!r}") from None
            continue
        out[name] = value
    return out


def client_logger(verbose: bool) -> logging.Logger:
    """The logger librdkafka logs go to: silent unless ``--verbose``."""
    log = logging.getLogger(CLIENT_LOGGER)
    log.propagate = False
    if not log.handlers:
        if verbose:
            handler: logging.Handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
            log.setLevel(logging.DEBUG)
        else:
            handler = logging.NullHandler()
        log.addHandler(handler)
    return log


def client_config(
    bootstrap: str, verbose: bool = False, extra: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Base librdkafka configuration for every client the CLI creates."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": "kafka-py-cli",
        "logger": client_logger(verbose),
    }
    conf.update(extra or {})
    return conf


def ensure_reachable(bootstrap: str, timeout: float = 5.0) -> None:
    """Fail fast, with one line, when no bootstrap server accepts a TCP connection."""
    reason = unreachable_reason(bootstrap, timeout)
    if reason is not None:
        raise CliError(f"cannot connect to the bootstrap server: {reason}")


def kafka_error_text(exc: BaseException) -> str:
    """One line for a confluent_kafka KafkaException / KafkaError."""
    err = exc.args[0] if exc.args else exc
    name = getattr(err, "name", None)
    text = getattr(err, "str", None)
    if callable(name) and callable(text):
        detail = str(text()).strip().rstrip(".")
        code = str(name())
        return f"{code}: {detail}" if code and code not in detail else detail
    return str(err)


_KINDS = {
    "not_found": frozenset(
        {"UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC_ID", "GROUP_ID_NOT_FOUND", "UNKNOWN_PARTITION"}
    ),
    "conflict": frozenset(
        {
            "TOPIC_ALREADY_EXISTS",
            "NON_EMPTY_GROUP",
            "GROUP_SUBSCRIBED_TO_TOPIC",
            "UNKNOWN_MEMBER_ID",
            "REBALANCE_IN_PROGRESS",
            "ILLEGAL_GENERATION",
        }
    ),
    "unavailable": frozenset(
        {
            "_TRANSPORT",
            "_TIMED_OUT",
            "_ALL_BROKERS_DOWN",
            "REQUEST_TIMED_OUT",
            "COORDINATOR_NOT_AVAILABLE",
            "COORDINATOR_LOAD_IN_PROGRESS",
            "NOT_COORDINATOR",
            "LEADER_NOT_AVAILABLE",
            "NOT_CONTROLLER",
        }
    ),
    "forbidden": frozenset(
        {
            "TOPIC_AUTHORIZATION_FAILED",
            "GROUP_AUTHORIZATION_FAILED",
            "CLUSTER_AUTHORIZATION_FAILED",
            "_AUTHENTICATION",
            "SASL_AUTHENTICATION_FAILED",
        }
    ),
}


def kafka_cli_error(exc: BaseException) -> CliError:
    """A confluent_kafka KafkaException as a CliError whose ``kind`` follows the error code."""
    err: Any = exc.args[0] if exc.args else exc
    name = str(err.name()) if callable(getattr(err, "name", None)) else ""
    kind = next((k for k, names in _KINDS.items() if name in names), "invalid")
    return CliError(kafka_error_text(exc), kind=kind)


# librdkafka error names that differ from Kafka's Errors enum (the exception class's name).
_LIBRDKAFKA_NAMES = {
    "UNKNOWN_TOPIC_OR_PART": "UnknownTopicOrPartitionException",
    "NOT_LEADER_FOR_PARTITION": "NotLeaderOrFollowerException",
    "OFFSET_OUT_OF_RANGE": "OffsetOutOfRangeException",
    "REQUEST_TIMED_OUT": "TimeoutException",
}


def java_error_text(err: Any) -> str:
    """A KafkaError as Kafka's tools print an exception: ``org.apache.kafka.common.errors.
    UnknownTopicOrPartitionException: message`` (librdkafka's local errors as kafka_error_text)."""
    name = str(err.name()) if callable(getattr(err, "name", None)) else ""
    if not name or name.startswith("_"):
        return kafka_error_text(Exception(err))
    words = name.removesuffix("_EXCEPTION").split("_")
    cls = _LIBRDKAFKA_NAMES.get(name) or "".join(w.capitalize() for w in words) + "Exception"
    detail = str(err.str()).strip() if callable(getattr(err, "str", None)) else ""
    return f"org.apache.kafka.common.errors.{cls}: {detail}" if detail else cls
