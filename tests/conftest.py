"""Shared fixtures: a real ZooKeeper on a free loopback port; the order of the tiers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from services.common.zk.client import AsyncZk
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
# and the integration tier next, the fault-injection tiers (e2e, kube_sim) last, without a build
# beside them. `make test` runs the first two tiers in one pytest run on every core
# (pytest-xdist: each worker sorts the same collection the same way), the integration tier in a
# second (pytest-xdist, whole modules: pytest_xdist_make_scheduler below), e2e and kube_sim in a
# third, one test at a time; one plain `pytest` run of everything gets the tier order below.
TIER_ORDER = ("chart", "unit", "e2e", "integration", "kube_sim")


def _tier_rank(item: pytest.Item) -> int:
    try:
        tier = Path(str(item.fspath)).resolve().relative_to(_TESTS).parts[0]
    except ValueError:
        return len(TIER_ORDER)
    return TIER_ORDER.index(tier) if tier in TIER_ORDER else len(TIER_ORDER)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tiers in TIER_ORDER, MODULE_GROUPS' modules first in theirs; otherwise the order inside a
    tier (and so fixture reuse) is unchanged."""
    items.sort(key=lambda item: (_tier_rank(item), item.nodeid.split("::")[0] not in MODULE_GROUPS))


# `make test` runs the integration tier with `pytest -n N --dist loadfile`: a module is one unit of
# work, run whole on one worker (its module-scoped cluster starts once; each worker starts its
# own session cluster). A group below is one unit too, its modules one after the other on one
# worker: the Spark modules (one Spark JVM, local[2], per module) never run two at once, and
# run beside at most N-1 other modules. Units go out in collection order (pytest-xdist's default
# is by number of tests), grouped modules first: the Spark unit is the longest (~1/3 of the tier).
MODULE_GROUPS = {
    "tests/integration/test_spark_files.py": "spark",
    "tests/integration/test_spark_pipelines.py": "spark",
    "tests/integration/test_spark_sink.py": "spark",
    "tests/integration/test_spark_source.py": "spark",
}


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` with MODULE_GROUPS (pytest-xdist's `loadgroup` marks do not group
    under pytest 9: xdist sets a node id attribute pytest no longer reads)."""
    if config.getvalue("dist") != "loadfile":
        return None
    config.option.loadscopereorder = False
    from xdist.scheduler import LoadFileScheduling

    class ModuleGroups(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return MODULE_GROUPS.get(module, module)

    return ModuleGroups(config, log)


@pytest.fixture
async def zk(zk_connect: str) -> AsyncIterator[AsyncZk]:
    """A session of the test's own, straight to ZooKeeper (4 s session timeout); modules that
    need more (the layout, a controller) define their own ``zk``."""
    client = AsyncZk(zk_connect, 4000)
    await client.start()
    yield client
    await client.stop()
