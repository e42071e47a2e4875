"""The web console against the session's real cluster: its REST API driven with HTTP and real
Kafka clients, fuzzed with schemathesis from its own OpenAPI spec, and its page driven in
Debian's Chromium (headless, through Playwright) with a screenshot kept as an artifact."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer
from kafka_support import unique_topic_name, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class ConsoleProcess:
    def __init__(self, cluster: Any, log_path: Path, *flags: str) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.console",
                "--bootstrap.servers",
                cluster.bootstrap,
                "--zookeeper.connect",
                cluster.zk_connect,
                "--console.port",
                "0",
                "--console.lag.sample.interval.ms",
                "500",
                "--log.format",
                "json",
                *flags,
            ],
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.url = wait_for("the console's URL in its log", self._url, timeout=30)
        wait_for("the console's /api/info", self._answers, timeout=30)

    def _url(self) -> str | None:
        assert self.proc.poll() is None, self.log_path.read_text()
        for line in self.log_path.read_text().splitlines():
            if '"console serving"' in line:
                return str(json.loads(line)["url"]).rstrip("/")
        return None

    def _answers(self) -> bool:
        try:
            return httpx.get(f"{self.url}/api/info", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        try:
            assert self.proc.wait(timeout=15) == 0, self.log_path.read_text()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self._log.close()


@pytest.fixture(scope="module")
def console(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    c = ConsoleProcess(cluster, tmp_path_factory.mktemp("console") / "console.log")
    yield c
    c.stop()


@pytest.fixture(scope="module")
def http(console: ConsoleProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=console.url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def lagging_group(cluster: Any, http: httpx.Client) -> dict[str, Any]:
    """A topic with 30 records and a group that consumed and committed 10 of them, then left."""
    topic = unique_topic_name("console-lag")
    r = http.post("/api/topics", json={"name": topic, "partitions": 1, "replication_factor": 3})
    assert r.status_code == 201, r.text
    p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for i in range(30):
        p.produce(topic, key=f"k{i}", value=f"value-{i}", headers=[("n", str(i).encode())])
    assert p.flush(30) == 0
    group = unique_topic_name("console-group")
    c = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + 60
    while len(got) < 10 and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg)
    assert len(got) >= 10
    c.commit(offsets=None, message=got[9], asynchronous=False)
    c.close()
    return {"topic": topic, "group": group}


def test_overview_shows_nodes_by_zone_and_the_controller(http: httpx.Client) -> None:
    c = http.get("/api/cluster").json()
    assert c["controller_id"] is not None
    live = [n for n in c["storage_nodes"] if n["live"]]
    assert len(live) == 3
    assert {n["zone"] for n in live} == {"zone-a", "zone-b", "zone-c"}
    assert len(c["gateways"]) == 1 and c["gateways"][0]["address"]
    assert c["offline_partitions"] == 0


def test_topic_lifecycle_configs_records_and_errors(http: httpx.Client, cluster: Any) -> None:
    name = unique_topic_name("console-topic")
    r = http.post(
        "/api/topics",
        json={"name": name, "partitions": 3, "replication_factor": 3, "configs": {}},
    )
    assert r.status_code == 201, r.text
    detail = r.json()
    assert [p["partition"] for p in detail["partitions"]] == [0, 1, 2]
    assert all(len(p["replicas"]) == 3 and p["leader"] is not None for p in detail["partitions"])
    assert any(t["name"] == name for t in http.get("/api/topics").json())

    # the same errors as the CLI: exists -> 409, impossible RF -> 400, unknown -> 404
    again = http.post("/api/topics", json={"name": name, "partitions": 1})
    assert again.status_code == 409 and "already exists" in again.json()["error"].lower()
    too_big = http.post(
        "/api/topics", json={"name": name + "-rf", "partitions": 1, "replication_factor": 9}
    )
    assert too_big.status_code == 400 and too_big.json()["error"]
    assert http.get("/api/topics/no-such-topic-xyz").status_code == 404

    # configs: an override shows with its source, then goes away
    r = http.patch(f"/api/topics/{name}/configs", json={"set": {"retention.ms": "3600000"}})
    assert r.status_code == 200, r.text
    entry = next(c for c in r.json() if c["name"] == "retention.ms")
    assert entry["value"] == "3600000" and entry["source"] == "DYNAMIC_TOPIC_CONFIG"
    r = http.patch(f"/api/topics/{name}/configs", json={"delete": ["retention.ms"]})
    assert next(c for c in r.json() if c["name"] == "retention.ms")["is_default"]

    # produce through the API, read back by offset, by timestamp and through a real consumer
    before = int(time.time() * 1000)
    r = http.post(
        f"/api/topics/{name}/records",
        json={
            "key": "k",
            "value": "hello",
            "partition": 1,
            "headers": [{"key": "h", "value": "v"}],
        },
    )
    assert r.status_code == 201, r.text
    assert r.json()["partition"] == 1 and r.json()["offset"] == 0
    page = http.get(f"/api/topics/{name}/partitions/1/records", params={"offset": 0}).json()
    (rec,) = page["records"]
    assert (rec["key"], rec["value"], rec["offset"]) == ("k", "hello", 0)
    assert rec["headers"] == [{"key": "h", "value": "v", "encoding": "utf8"}]
    by_time = http.get(
        f"/api/topics/{name}/partitions/1/records", params={"timestamp": before - 1000}
    ).json()
    assert [r["offset"] for r in by_time["records"]] == [0]
    late = http.get(
        f"/api/topics/{name}/partitions/1/records", params={"timestamp": before + 3_600_000}
    ).json()
    assert late["records"] == [] and late["start_offset"] == 1
    assert http.get(f"/api/topics/{name}/partitions/7/records").status_code == 404

    assert http.delete(f"/api/topics/{name}").status_code == 204
    wait_for(
        "the deleted topic gone",
        lambda: http.get(f"/api/topics/{name}").status_code == 404,
        timeout=30,
    )


def test_group_lag_history_and_reset(http: httpx.Client, lagging_group: dict[str, Any]) -> None:
    group, topic = lagging_group["group"], lagging_group["topic"]
    assert {"group": group, "state": "Empty"} in http.get("/api/groups").json()
    g = http.get(f"/api/groups/{group}").json()
    assert g["state"] == "Empty"
    (row,) = g["offsets"]
    assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (10, 30, 20)
    assert g["total_lag"] == 20
    # the sampler keeps a history once the group was looked at
    wait_for(
        "three lag samples",
        lambda: len(http.get(f"/api/groups/{group}").json()["lag_history"]) >= 3,
        timeout=20,
    )
    # a dry run changes nothing; --execute moves the group
    dry = http.post(
        f"/api/groups/{group}/reset-offsets",
        json={"scenario": "to_offset", "value": "25", "topics": [topic]},
    ).json()
    assert dry == {
        "group": group,
        "executed": False,
        "offsets": [{"topic": topic, "partition": 0, "new_offset": 25}],
    }
    assert http.get(f"/api/groups/{group}").json()["total_lag"] == 20
    done = http.post(
        f"/api/groups/{group}/reset-offsets",
        json={"scenario": "shift_by", "value": "-5", "all_topics": True, "execute": True},
    )
    assert done.status_code == 200 and done.json()["offsets"][0]["new_offset"] == 5
    assert http.get(f"/api/groups/{group}").json()["total_lag"] == 25
    bad = http.post(
        f"/api/groups/{group}/reset-offsets",
        json={"scenario": "to_offset", "value": "x", "all_topics": True},
    )
    assert bad.status_code == 400 and "expected a number" in bad.json()["error"]
    assert http.get("/api/groups/no-such-group-xyz").status_code == 404


def test_resetting_an_active_group_is_refused(http: httpx.Client, cluster: Any) -> None:
    topic = unique_topic_name("console-active")
    assert http.post("/api/topics", json={"name": topic, "partitions": 1}).status_code == 201
    group = unique_topic_name("console-active-group")
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    c.subscribe([topic])
    try:
        wait_for("the consumer's assignment", lambda: (c.poll(0.2), c.assignment())[1], timeout=30)
        r = http.post(
            f"/api/groups/{group}/reset-offsets",
            json={"scenario": "to_earliest", "all_topics": True, "execute": True},
        )
        assert r.status_code == 409
        assert "can only be reset if the group" in r.json()["error"]
    finally:
        c.close()


def test_read_only_console_refuses_every_change(cluster: Any, tmp_path: Path) -> None:
    ro = ConsoleProcess(cluster, tmp_path / "ro.log", "--console.read.only", "true")
    try:
        with httpx.Client(base_url=ro.url, timeout=30) as http:
            assert http.get("/api/info").json()["read_only"] is True
            name = unique_topic_name("console-ro")
            r = http.post("/api/topics", json={"name": name})
            assert r.status_code == 403 and "read-only" in r.json()["error"]
            assert all(t["name"] != name for t in http.get("/api/topics").json())
            assert http.post("/api/topics/x/records", json={"value": "v"}).status_code == 403
            assert http.delete("/api/topics/__consumer_offsets").status_code == 403
    finally:
        ro.stop()


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_console_page_in_headless_chromium(
    console: ConsoleProcess,
    http: httpx.Client,
    lagging_group: dict[str, Any],
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect, sync_playwright

    artifacts = Path(os.environ.get("KAFKAPY_TEST_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    topic, group = lagging_group["topic"], lagging_group["group"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(console.url + "/")
            expect(page.locator("#zones .zone")).to_have_count(3)
            expect(page.locator("#zones .storage-node .dot.up")).to_have_count(3)
            expect(page.locator("#controller")).not_to_have_text("none")
            page.screenshot(path=str(artifacts / "console-overview.png"), full_page=True)

            page.click("a[data-nav=topics]")
            page.click(f"#topics-table a:text-is('{topic}')")
            expect(page.locator("#topic-name")).to_have_text(topic)
            expect(page.locator("#partitions-table tbody tr")).to_have_count(1)
            expect(page.locator("#partitions-table tbody tr td").nth(6)).to_have_text("in sync")
            page.fill("#browse input[name=offset]", "3")
            page.fill("#browse input[name=limit]", "4")
            page.click("#browse button")
            rows = page.locator("#records-table tbody tr")
            expect(rows).to_have_count(4)
            expect(rows.first.locator("td").nth(3)).to_have_text("value-3")

            page.click("a[data-nav=groups]")
            page.click(f"#groups-table a:text-is('{group}')")
            total = http.get(f"/api/groups/{group}").json()["total_lag"]
            expect(page.locator("#group-lag-total")).to_have_text(str(total))
            expect(page.locator("#lag-chart polyline")).to_have_count(1)
            page.screenshot(path=str(artifacts / "console-group.png"), full_page=True)
            assert errors == []
        finally:
            browser.close()
    assert (artifacts / "console-group.png").stat().st_size > 10_000


# ---- the REST API fuzzed from its own OpenAPI spec (last: it leaves junk it then removes) -------
@pytest.fixture(scope="module")
def console_schema(console: ConsoleProcess) -> Any:
    import schemathesis

    return schemathesis.openapi.from_url(console.url + "/openapi.json")


@pytest.fixture(scope="module")
def fuzz_cleanup(http: httpx.Client, cluster: Any) -> Iterator[None]:
    """Topics the fuzzer creates are deleted afterwards (the session cluster is shared)."""
    from confluent_kafka.admin import AdminClient

    before = {t["name"] for t in http.get("/api/topics").json()}
    yield
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    junk = sorted(set(admin.list_topics(timeout=30).topics) - before)
    for fut in admin.delete_topics(junk, operation_timeout=30).values() if junk else ():
        fut.result(timeout=60)


def test_rest_api_fuzzed_has_no_server_error(
    console_schema: Any, console: ConsoleProcess, fuzz_cleanup: None
) -> None:
    """schemathesis' generated requests for every operation: never a 5xx, every answer as its
    schema says (the pytest plugin is not used: it breaks with this pytest)."""
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import (
        not_a_server_error,
        response_schema_conformance,
        status_code_conformance,
    )

    operations = [result.ok() for result in console_schema.get_all_operations()]
    assert len(operations) >= 11
    for operation in operations:

        @settings(
            max_examples=12,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        @given(case=operation.as_strategy())
        def check(case: Any) -> None:
            body = case.body
            if isinstance(body, dict) and isinstance(body.get("partitions"), int):
                # the shared cluster gets small topics (out-of-range values are left alone:
                # they must still be refused)
                if 1 <= body["partitions"] <= 1000:
                    body["partitions"] = min(body["partitions"], 2)
            case.call_and_validate(
                base_url=console.url,
                checks=[not_a_server_error, response_schema_conformance, status_code_conformance],
            )

        check()
