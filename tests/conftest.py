"""Shared fixtures: a real ZooKeeper on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator

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
