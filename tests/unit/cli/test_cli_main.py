"""`kafka-py` command line: parsing, one-line errors, exit codes."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.cli.common import read_properties, unescape
from services.cli.main import build_parser, main


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one_line(text: str) -> str:
    lines = text.splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_missing_topic_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics", "create"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert err == "error: kafka-py topics create: the following arguments are required: --topic"


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["nope"],
        ["topics"],
        ["topics", "create", "--topic", "t", "--partitions", "x"],
        ["topics", "--bootstrap-server", "nohost", "list"],
        ["console-consumer", "--topic", "t", "--offset", "soon"],
        ["perf", "produce", "--topic", "t"],
        ["cluster", "up", "--storage-nodes", "0"],
    ],
)
def test_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert _one_line(capsys.readouterr().err).startswith("error: ")


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics", "create", "--help"]) == 0
    assert "--replica-assignment" in capsys.readouterr().out


def test_bootstrap_server_before_or_after_subcommand() -> None:
    parser = build_parser()
    a = parser.parse_args(["topics", "--bootstrap-server", "h:1", "create", "--topic", "t"])
    b = parser.parse_args(["topics", "create", "--topic", "t", "--bootstrap-server", "h:2"])
    c = parser.parse_args(["topics", "list"])
    assert (a.bootstrap_server, b.bootstrap_server, c.bootstrap_server) == ("h:1", "h:2", None)


def test_console_options_parse() -> None:
    args = build_parser().parse_args(
        [
            "console-producer",
            "--bootstrap-server",
            "h:1",
            "--topic",
            "t",
            "--property",
            "parse.key=true",
            "--property",
            "key.separator=:",
            "--header",
            "a=b=c",
            "--acks",
            "1",
            "--compression-type",
            "zstd",
        ]
    )
    assert args.property == [("parse.key", "true"), ("key.separator", ":")]
    assert args.header == [("a", "b=c")]
    assert (args.acks, args.compression_type) == ("1", "zstd")
    args = build_parser().parse_args(
        [
            "console-consumer",
            "--topic",
            "t",
            "--partition",
            "2",
            "--offset",
            "17",
            "--max-messages",
            "5",
            "--timeout-ms",
            "100",
            "--property",
            "print.key=true",
        ]
    )
    assert (args.partition, args.offset, args.max_messages, args.timeout_ms) == (2, 17, 5, 100)


def test_unreachable_bootstrap_fails_fast_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    port = _closed_port()
    t0 = time.monotonic()
    assert main(["topics", "--bootstrap-server", f"127.0.0.1:{port}", "list"]) == 1
    assert time.monotonic() - t0 < 5
    err = _one_line(capsys.readouterr().err)
    assert (
        err
        == f"error: cannot connect to the bootstrap server: 127.0.0.1:{port}: Connection refused"
    )


def test_console_script_entry_point_has_no_traceback() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "services.cli",
            "topics",
            "describe",
            "--bootstrap-server",
            f"127.0.0.1:{_closed_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    _one_line(proc.stderr)


def test_unescape_and_properties_file(tmp_path: Path) -> None:
    assert unescape("a\\tb\\nc\\\\d") == "a\tb\nc\\d"
    f = tmp_path / "client.properties"
    f.write_text("# comment\nsecurity.protocol=PLAINTEXT\n! other\nclient.id : me\nflag\n")
    assert read_properties(str(f)) == {
        "security.protocol": "PLAINTEXT",
        "client.id": "me",
        "flag": "",
    }


def test_dump_log_is_delegated(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.cli import dump_log

    seen: list[list[str]] = []
    monkeypatch.setattr(dump_log, "main", lambda argv: seen.append(list(argv)) or 0)
    assert main(["dump-log", "--files", "a.log,b.index", "--print-data-log"]) == 0
    assert main(["-v", "dump-log", "--files", "c.log"]) == 0
    assert seen == [["--files", "a.log,b.index", "--print-data-log"], ["--files", "c.log"]]


def test_dump_log_reads_a_real_segment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(b"")
    assert main(["dump-log", "--files", str(segment)]) == 0
    assert f"Dumping {segment}" in capsys.readouterr().out
