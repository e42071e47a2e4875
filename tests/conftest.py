"""Shared fixtures: a real ZooKeeper on a free loopback port; the order of the tiers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common.zk.server import ZooKeeperProcess, free_port


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    zk = ZooKeeperProcess(tmp_path_factory.mktemp("zookeeper"), port=free_port())
    zk.start()
    yield zk
    zk.stop()


_chroot_seq = iter(range(1_000_000))


@pytest.fixture
def zk_connect(zk_server: ZooKeeperProcess) -> str:
    """A connect string with a fresh chroot, so tests never see each other's znodes."""
    return f"{zk_server.connect}/t{next(_chroot_seq)}"


_TESTS = Path(__file__).resolve().parent
# Tiers that start no cluster run first: `make test` builds the kube-sim images in the
# background meanwhile (CPU-bound, timing-insensitive tests beside a mostly I/O-bound build),
# and the cluster tiers then run without a build beside them. `make test` runs the first two
# tiers in one pytest run on every core (pytest-xdist: each worker sorts the same collection
# the same way), then the others in a second run, one test at a time; one plain `pytest` run
# of everything gets the same order.
TIER_ORDER = ("chart", "unit", "e2e", "integration", "kube_sim")


def _tier_rank(item: pytest.Item) -> int:
    try:
        tier = Path(str(item.fspath)).resolve().relative_to(_TESTS).parts[0]
    except ValueError:
        return len(TIER_ORDER)
    return TIER_ORDER.index(tier) if tier in TIER_ORDER else len(TIER_ORDER)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tiers in TIER_ORDER; the order inside a tier (and so fixture reuse) is unchanged."""
    items.sort(key=_tier_rank)
