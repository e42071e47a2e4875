"""kube-sim tier (marker ``kube_sim``, ``make kube-sim``): the real image, the rendered chart's
workloads as podman containers. Skipped with the reason when podman is missing or cannot run
containers here; the images are built (cached) by scripts/build-image.sh first."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "chart"))
sys.path.insert(0, str(HERE.parent / "integration"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(HERE):
            item.add_marker(pytest.mark.kube_sim)
