"""Gateway unit tests: codecs are generated once up front (as the gateway does at start)."""

from __future__ import annotations

import pytest

from services.common import protocol


@pytest.fixture(scope="session", autouse=True)
def _codecs() -> None:
    protocol.precompile()
