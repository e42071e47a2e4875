"""The ``kafka-py`` command: local cluster, topics, console producer/consumer, dump-log, perf,
leader-election, delete-records, broker-api-versions, reassign-partitions, log-dirs, configs,
consumer-groups, get-offsets, acls, certs, transactions, pipeline (Spark), and the services themselves
(``kafka-py storage|gateway|controller|group-coordinator|transaction-coordinator``).

Every failure is one line on stderr and a non-zero exit status (2 for a bad command line);
Ctrl-C exits 130 quietly. ``-v`` shows client logs and tracebacks.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from services.cli import (
    acls,
    broker_api_versions,
    certs,
    cluster_cmd,
    configs,
    console_consumer,
    console_producer,
    consumer_groups,
    delete_records,
    get_offsets,
    leader_election,
    log_dirs,
    perf,
    pipeline_cmd,
    reassign_partitions,
    serve,
    topics,
    transactions,
    wire,
)
from services.cli.client_security import security_properties
from services.cli.common import (
    DEFAULT_BOOTSTRAP,
    CliError,
    UsageError,
    bootstrap_type,
    client_config,
    ensure_reachable,
    kafka_error_text,
    read_properties,
)

PROG = "kafka-py"
VERBOSE_FLAGS = ("-v", "--verbose")


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one line (UsageError) instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _common(parser: argparse.ArgumentParser, top: bool) -> None:
    """Client options, accepted before or after a nested subcommand (``topics --bootstrap-server
    H:P create`` and ``topics create --bootstrap-server H:P``)."""
    default: Any = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--bootstrap-server",
        type=bootstrap_type,
        default=default,
        metavar="HOST:PORT",
        help=f"gateway address(es), comma-separated (default {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--command-config",
        default=default,
        metavar="FILE",
        help="client properties file: a Kafka tool's (security.protocol, sasl.mechanism, "
        "sasl.jaas.config, ssl.truststore.location...) or librdkafka's names",
    )
    parser.add_argument(
        "--request-timeout-ms",
        type=int,
        default=default,
        metavar="MS",
        help="how long to wait for the cluster (default 30000)",
    )


def build_parser() -> Parser:
    parser = Parser(
        prog=PROG, description="kafka-py: an Apache Kafka-compatible platform in Python."
    )
    parser.add_argument(
        *VERBOSE_FLAGS, dest="verbose", action="store_true", help="show client logs and tracebacks"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    cluster_cmd.add_parser(sub, _common)
    topics.add_parser(sub, _common)
    console_producer.add_parser(sub, _common)
    console_consumer.add_parser(sub, _common)
    sub.add_parser(
        "dump-log",
        add_help=False,
        help="print the contents of log segment files",
        description="kafka-py dump-log --files F [...] [--print-data-log]",
    )
    perf.add_parser(sub, _common)
    leader_election.add_parser(sub, _common)
    delete_records.add_parser(sub, _common)
    broker_api_versions.add_parser(sub, _common)
    transactions.add_parser(sub, _common)
    reassign_partitions.add_parser(sub, _common)
    log_dirs.add_parser(sub, _common)
    configs.add_parser(sub, _common)
    consumer_groups.add_parser(sub, _common)
    get_offsets.add_parser(sub, _common)
    acls.add_parser(sub, _common)
    certs.add_parser(sub, _common)
    for service in serve.SERVICES:
        sub.add_parser(
            service,
            add_help=False,
            help=f"run the {service} service (its settings as flags or KAFKAPY_* env)",
        )
    pipeline_cmd.add_parser(sub, _common)
    return parser


def _client_base(args: argparse.Namespace) -> dict[str, Any]:
    if getattr(args, "request_timeout_ms", None) is None:
        args.request_timeout_ms = 30000
    if args.request_timeout_ms < 1:
        raise UsageError("--request-timeout-ms must be positive")
    bootstrap = getattr(args, "bootstrap_server", None) or DEFAULT_BOOTSTRAP
    path = getattr(args, "command_config", None)
    extra = security_properties(read_properties(path)) if path else {}
    ensure_reachable(bootstrap, timeout=min(5.0, args.request_timeout_ms / 1000.0))
    conf = client_config(bootstrap, args.verbose, extra)
    wire.configure(conf)  # the commands' own requests: the same TLS/SASL settings
    return conf


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "cluster":
        return cluster_cmd.run(args)
    if args.command == "certs":
        return certs.run(args, sys.stdout)
    base = _client_base(args)
    if args.command == "topics":
        return topics.run(args, base, sys.stdout)
    if args.command == "configs":
        return configs.run(args, base, sys.stdout)
    if args.command == "console-producer":
        return console_producer.run(args, base, sys.stdin.buffer)
    if args.command == "console-consumer":
        return console_consumer.run(args, base, sys.stdout.buffer)
    if args.command == "perf":
        return perf.run(args, base)
    if args.command == "leader-election":
        return leader_election.run(args, base, sys.stdout)
    if args.command == "delete-records":
        return delete_records.run(args, base, sys.stdout)
    if args.command == "broker-api-versions":
        return broker_api_versions.run(args, base, sys.stdout)
    if args.command == "transactions":
        return transactions.run(args, base, sys.stdout)
    if args.command == "reassign-partitions":
        return reassign_partitions.run(args, base, sys.stdout)
    if args.command == "log-dirs":
        return log_dirs.run(args, base, sys.stdout)
    if args.command == "pipeline":
        return pipeline_cmd.run(args, base)
    if args.command == "consumer-groups":
        return consumer_groups.run(args, base, sys.stdout)
    if args.command == "get-offsets":
        return get_offsets.run(args, base, sys.stdout)
    if args.command == "acls":
        return acls.run(args, base, sys.stdout)
    raise UsageError(f"{PROG}: unknown command {args.command}")


def _dump_log(argv: list[str]) -> int:
    try:
        from services.cli import dump_log
    except ImportError as exc:
        raise CliError(f"dump-log is not available: {exc}") from None
    return int(dump_log.main(argv) or 0)


def _run(argv: list[str]) -> int:
    first = next((i for i, a in enumerate(argv) if a not in VERBOSE_FLAGS), len(argv))
    if argv[first : first + 1] == ["dump-log"]:  # its own parser: hand over the rest untouched
        return _dump_log(argv[first + 1 :])
    if first < len(argv) and argv[first] in serve.SERVICES:  # the service parses its own flags
        return serve.run_service(argv[first], argv[first + 1 :])
    args = build_parser().parse_args(argv)
    return _dispatch(args)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = any(a in VERBOSE_FLAGS for a in argv) or bool(os.environ.get("KAFKAPY_CLI_DEBUG"))
    try:
        return _run(argv)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, without a second EPIPE at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except SystemExit as exc:  # --help / --version
        return exc.code if isinstance(exc.code, int) else 0
    except Exception as exc:  # one readable line, never a traceback unless asked for
        if verbose:
            traceback.print_exc()
        print(f"error: {_describe(exc)}", file=sys.stderr)
        return 1


def _describe(exc: Exception) -> str:
    if type(exc).__name__ == "KafkaException":
        return kafka_error_text(exc)
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
