"""Every service raises its soft open-file limit to the hard one at start (the JVM's MaxFDLimit)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PROBE = (
    "import json, resource; from services.common.runtime import raise_open_file_limit; "
    "r = raise_open_file_limit(); "
    "print(json.dumps([r, resource.getrlimit(resource.RLIMIT_NOFILE)]))"
)


def _run(soft: int) -> tuple[list[int], list[int]]:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        preexec_fn=lower,  # noqa: PLW1509 - the child's own limit, set before it runs
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    result, limits = json.loads(out)
    return result, limits


def test_a_low_soft_limit_is_raised_to_the_hard_one() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    result, limits = _run(256)
    if hard == resource.RLIM_INFINITY:  # nothing to raise to: left as it is
        assert result == [256, 256] and limits[0] == 256
    else:
        assert result == [256, hard]
        assert limits == [hard, hard]


def test_a_soft_limit_already_at_the_hard_one_is_left_alone() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        pytest.skip("the hard limit is unlimited here")
    result, limits = _run(hard)
    assert result == [hard, hard] and limits == [hard, hard]
