"""tests/e2e/kube runs against a real Kubernetes cluster only when KUBECONFIG is set."""

from __future__ import annotations

import os

import pytest

SKIP_REASON = (
    "KUBECONFIG is not set: the real-cluster tests of deploy/helm (tests/e2e/kube) need a "
    "cluster that can pull the kafka-py image (KAFKAPY_KUBE_IMAGE)"
)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say why, even under -q (skip reasons are otherwise only shown with -rs)."""
    if not os.environ.get("KUBECONFIG") and terminalreporter.stats.get("skipped"):
        terminalreporter.write_line(f"tests/e2e/kube skipped: {SKIP_REASON}")
