"""`helm dependency update` of deploy/helm and its subcharts (deepest first), through the Helm
SDK (helm-python-sdk): packs the file:// subcharts into each chart's charts/ (never committed)."""

from __future__ import annotations

import sys
from pathlib import Path

import helm_python as helm

ROOT = Path(__file__).resolve().parents[1]
SUBCHARTS = ROOT / "deploy" / "charts"
CHART = ROOT / "deploy" / "helm"


def update(chart: Path = CHART) -> None:
    for sub in sorted(SUBCHARTS.iterdir()):
        if (sub / "Chart.yaml").is_file() and "dependencies:" in (sub / "Chart.yaml").read_text():
            helm.dependency_update(sub, skip_refresh=True)
    helm.dependency_update(chart, skip_refresh=True)


if __name__ == "__main__":
    update(Path(sys.argv[1]) if len(sys.argv) > 1 else CHART)
