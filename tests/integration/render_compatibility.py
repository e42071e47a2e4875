"""Render the API table of docs/compatibility.md from an integration-test run.

    KAFKAPY_ITEST_API_USAGE=/tmp/api-usage.json .venv/bin/python -m pytest -m integration \\
        tests/integration
    .venv/bin/python tests/integration/render_compatibility.py /tmp/api-usage.json

Rows: every API key the gateway advertises (services.common.protocol.SUPPORTED_VERSIONS) with
its version range; columns: the clients, each cell the versions that client actually sent to the
gateway during the run (from the gateway's per-API request counters, see ApiUsage).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from services.common.protocol import SUPPORTED_VERSIONS, ApiKey

CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka", "kcat", "kafkajs")


def kafka_name(key: ApiKey) -> str:
    """Kafka's request name for an API key, as the gateway labels its metrics."""
    return "".join(part.capitalize() for part in key.name.split("_"))


# Kafka's RequestMetrics split Fetch by who sent it; both are API key 1.
METRIC_ALIASES = {"FetchConsumer": "Fetch", "FetchFollower": "Fetch"}


def normalise(usage: dict[str, dict[str, list[int]]]) -> dict[str, dict[str, list[int]]]:
    out: dict[str, dict[str, list[int]]] = {}
    for client, apis in usage.items():
        merged: dict[str, set[int]] = {}
        for api, versions in apis.items():
            merged.setdefault(METRIC_ALIASES.get(api, api), set()).update(versions)
        out[client] = {api: sorted(vs) for api, vs in merged.items()}
    return out


def versions_text(versions: list[int]) -> str:
    if not versions:
        return "—"
    runs: list[str] = []
    start = prev = versions[0]
    for v in [*versions[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        runs.append(f"v{start}" if start == prev else f"v{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(runs)


def render(usage: dict[str, dict[str, list[int]]]) -> str:
    usage = normalise(usage)
    head = "| API (key) | advertised | " + " | ".join(CLIENTS) + " |"
    sep = "|---|---|" + "---|" * len(CLIENTS)
    rows = [head, sep]
    for key, (lo, hi) in sorted(SUPPORTED_VERSIONS.items()):
        name = kafka_name(key)
        cells = [versions_text(usage.get(c, {}).get(name, [])) for c in CLIENTS]
        rows.append(f"| {name} ({int(key)}) | v{lo}-v{hi} | " + " | ".join(cells) + " |")
    unadvertised = sorted(
        {api for c in usage.values() for api in c} - {kafka_name(k) for k in SUPPORTED_VERSIONS}
    )
    if unadvertised:
        rows.append("")
        rows.append(
            "Requests counted for APIs outside the advertised table: " + ", ".join(unadvertised)
        )
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(render(json.loads(Path(argv[1]).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
