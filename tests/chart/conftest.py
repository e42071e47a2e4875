"""Chart tests: deploy/helm rendered and linted by Helm's own library (helm-python-sdk), every
object validated against the Kubernetes 1.30-1.35 schemas (kubernetes-validate, strict). No
cluster is involved. The subcharts are packed into deploy/helm/charts first (as `make
chart-deps` does)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chart_support import update_dependencies_once  # noqa: E402  # isort: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(here):
            item.add_marker(pytest.mark.chart)


@pytest.fixture(scope="session", autouse=True)
def chart_dependencies(tmp_path_factory: pytest.TempPathFactory) -> None:
    # under pytest-xdist, the parent of a worker's basetemp is the run's own (shared) folder
    update_dependencies_once(tmp_path_factory.getbasetemp().parent)
