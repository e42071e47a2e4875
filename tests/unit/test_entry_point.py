"""Every ``python -m services.<name>`` entry point keeps hypothesis (a test library kio imports
when it can, 0.15 s of CPU) out of its process: services.entry_point is its first services
import."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENTRY_POINTS = sorted((ROOT / "services").glob("*/__main__.py"))


@pytest.mark.parametrize("path", ENTRY_POINTS, ids=lambda p: p.parent.name)
def test_entry_point_is_the_first_services_import(path: Path) -> None:
    first = next(
        node
        for node in ast.parse(path.read_text()).body
        if (isinstance(node, ast.Import) and node.names[0].name.startswith("services"))
        or (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("services"))
    )
    assert isinstance(first, ast.Import) and first.names[0].name == "services.entry_point"


def test_the_protocol_loads_without_hypothesis() -> None:
    code = (
        "import services.entry_point, sys\n"
        "from services.gateway.app import Gateway\n"
        "import kio.static._phantom as phantom\n"
        "assert phantom.hypothesis is None, phantom.hypothesis\n"
        "assert sys.modules['hypothesis'] is None\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
