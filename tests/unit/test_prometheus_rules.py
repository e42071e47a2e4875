"""The shipped alert rules (deploy/prometheus/kafka-py-rules.yml) pass ``promtool check rules``
and their unit tests (``promtool test rules``: each alert fires on its condition and resolves),
and every metric they use is one a kafka-py service exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

RULES_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (scripts/install-deps.sh)"
)


@needs_promtool
@pytest.mark.parametrize(
    "args", [("check", "rules", "kafka-py-rules.yml"), ("test", "rules", "kafka-py-rules.test.yml")]
)
def test_promtool_accepts_the_rules(args: tuple[str, ...]) -> None:
    assert PROMTOOL is not None
    res = subprocess.run(
        [PROMTOOL, *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_rules_use_metrics_the_services_export() -> None:
    rules = (RULES_DIR / "kafka-py-rules.yml").read_text()
    rules = re.sub(r"\b(?:by|on) \([^)]*\)", "", rules)  # label names (kafka_cluster)
    rules = re.sub(r"\{\{[^}]*\}\}", "", rules)  # annotation templates
    used = set(re.findall(r"\b(kafka(?:py)?_[a-z_]+)", rules))
    sources = "\n".join(p.read_text() for p in (RULES_DIR.parents[1] / "services").rglob("*.py"))
    for name in sorted(used):
        base = re.sub(r"_(total|bucket|count)$", "", name)
        assert f'"{name}"' in sources or f'"{base}"' in sources, f"{name} is no service's metric"
