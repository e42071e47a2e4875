"""`kafka-py cluster up --group-coordinators N` and how LocalCluster launches group coordinators
(flags, zones, log files, the controllers' offsets.topic.replication.factor). No process runs:
the cluster's process table and command lines are built, never spawned."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from services.cli import cluster_cmd
from services.cli.common import UsageError
from services.cli.local_cluster import LocalCluster, LocalClusterInterrupted
from services.cli.main import build_parser


def _flag(argv: list[str], name: str) -> str:
    """The value of the last ``--name`` in ``argv`` (argparse semantics: the last one wins)."""
    values = [argv[i + 1] for i, a in enumerate(argv) if a == f"--{name}"]
    assert values, f"--{name} missing from {argv}"
    return values[-1]


def _argv(cluster: LocalCluster, role: str) -> list[list[str]]:
    cluster._layout()  # ports and the process table; nothing is started
    return [cluster._flags(svc) for svc in cluster._services[role]]


class _Recorder:
    """Stands in for LocalCluster in run_up: records the arguments, then 'is interrupted'."""

    calls: list[dict[str, Any]] = []

    def __init__(self, data_dir: Path, **kwargs: Any) -> None:
        _Recorder.calls.append({"data_dir": data_dir, **kwargs})

    def start(self, timeout: float) -> None:
        raise LocalClusterInterrupted("start-up interrupted")

    def stop(self) -> None:
        pass

    def interrupt(self) -> None:
        pass

    def hurry(self) -> None:
        pass


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> type[_Recorder]:
    _Recorder.calls = []
    monkeypatch.setattr(cluster_cmd, "LocalCluster", _Recorder)
    return _Recorder


def _up(argv: list[str]) -> int:
    args = build_parser().parse_args(["cluster", "up", *argv])
    return cluster_cmd.run_up(args, out=io.StringIO(), err=io.StringIO())


def test_group_coordinators_default_to_two(recorder: type[_Recorder], tmp_path: Path) -> None:
    assert _up(["--data-dir", str(tmp_path)]) == 0
    assert recorder.calls[0]["group_coordinators"] == 2


@pytest.mark.parametrize("count", [0, 1, 5])
def test_group_coordinators_knob_reaches_the_cluster(
    recorder: type[_Recorder], tmp_path: Path, count: int
) -> None:
    assert _up(["--data-dir", str(tmp_path), "--group-coordinators", str(count)]) == 0
    assert recorder.calls[0]["group_coordinators"] == count


def test_negative_group_coordinators_is_a_usage_error(
    recorder: type[_Recorder], tmp_path: Path
) -> None:
    with pytest.raises(UsageError, match="--group-coordinators"):
        _up(["--data-dir", str(tmp_path), "--group-coordinators", "-1"])
    assert recorder.calls == []


def test_local_cluster_rejects_a_negative_count(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="group_coordinators"):
        LocalCluster(tmp_path, group_coordinators=-1)


def test_coordinators_get_ids_zones_session_timeout_and_their_own_logs(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path,
        group_coordinators=4,
        zones=("zone-a", "zone-b", "zone-c"),
        gateway_port=0,
        zk_port=0,
        zk_session_timeout_ms=4321,
        extra={"group_coordinator": ["--group.initial.rebalance.delay.ms", "0"]},
    )
    argvs = _argv(cluster, "group_coordinator")
    assert [_flag(a, "node.id") for a in argvs] == ["0", "1", "2", "3"]
    assert [_flag(a, "broker.rack") for a in argvs] == ["zone-a", "zone-b", "zone-c", "zone-a"]
    for i, argv in enumerate(argvs):
        assert _flag(argv, "zookeeper.session.timeout.ms") == "4321"
        assert _flag(argv, "zookeeper.connect") == cluster.zk_connect
        assert _flag(argv, "listeners") == cluster.address("group_coordinator", i)
        admin_port = cluster.admin_url("group_coordinator", i).rsplit(":", 1)[-1]
        assert _flag(argv, "admin.port") == admin_port
        assert _flag(argv, "group.initial.rebalance.delay.ms") == "0"
    # the storage nodes and controllers get the same session timeout
    assert _flag(_argv(cluster, "storage")[0], "zookeeper.session.timeout.ms") == "4321"
    assert _flag(_argv(cluster, "controller")[0], "zookeeper.session.timeout.ms") == "4321"
    procs = [p for p in cluster.processes() if p.role == "group_coordinator"]
    assert [p.name for p in procs] == [f"group_coordinator-{i}" for i in range(4)]
    assert [p.log_path for p in procs] == [
        tmp_path.resolve() / "logs" / f"group-coordinator-{i}.log" for i in range(4)
    ]
    # every process has its own ports
    ports = [p.port for p in cluster.processes()] + [
        p.admin_port for p in cluster.processes() if p.admin_port
    ]
    assert len(ports) == len(set(ports))


def test_no_coordinators_means_no_processes(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, group_coordinators=0, gateway_port=0, zk_port=0)
    assert _argv(cluster, "group_coordinator") == []
    assert all(p.role != "group_coordinator" for p in cluster.processes())


@pytest.mark.parametrize(("storage_nodes", "rf"), [(1, "1"), (2, "2"), (3, "3"), (5, "3")])
def test_controllers_get_an_offsets_replication_factor_the_cluster_can_host(
    tmp_path: Path, storage_nodes: int, rf: str
) -> None:
    cluster = LocalCluster(tmp_path, storage_nodes=storage_nodes, gateway_port=0, zk_port=0)
    for argv in _argv(cluster, "controller"):
        assert _flag(argv, "offsets.topic.replication.factor") == rf


def test_extra_controller_flags_override_the_offsets_replication_factor(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path,
        storage_nodes=3,
        gateway_port=0,
        zk_port=0,
        extra={"controller": ["--offsets.topic.replication.factor", "1"]},
    )
    assert _flag(_argv(cluster, "controller")[0], "offsets.topic.replication.factor") == "1"


def test_saved_ports_of_coordinators_are_reused(tmp_path: Path) -> None:
    first = LocalCluster(tmp_path, group_coordinators=2, gateway_port=0, zk_port=0)
    first._layout()
    before = [(p.port, p.admin_port) for p in first.processes() if p.role == "group_coordinator"]
    again = LocalCluster(tmp_path, group_coordinators=2, gateway_port=0, zk_port=0)
    again._layout()
    after = [(p.port, p.admin_port) for p in again.processes() if p.role == "group_coordinator"]
    assert after == before


def test_secure_reaches_the_cluster_and_defaults_to_plaintext(
    recorder: type[_Recorder], tmp_path: Path
) -> None:
    assert _up(["--data-dir", str(tmp_path)]) == 0
    assert _up(["--data-dir", str(tmp_path), "--secure"]) == 0
    assert [c["secure"] for c in recorder.calls] == [False, True]


def test_secure_cluster_flags_load_through_every_service_settings(tmp_path: Path) -> None:
    from services.cli.local_cluster.security import secure_layout
    from services.common.coordinator.settings import CoordinatorSettings
    from services.controller.settings import ControllerSettings
    from services.gateway.settings import GatewaySettings
    from services.storage.settings import StorageSettings

    for name in ("plain", "c"):
        (tmp_path / name).mkdir()
    plain = LocalCluster(tmp_path / "plain", gateway_port=0, zk_port=0)
    assert not any("--internal.ssl.enabled" in argv for argv in _argv(plain, "storage"))

    cluster = LocalCluster(tmp_path / "c", secure=True, gateway_port=0, zk_port=0)
    cluster.security = secure_layout(cluster.data_dir)
    settings_of = {
        "controller": ControllerSettings,
        "storage": StorageSettings,
        "group_coordinator": CoordinatorSettings,
        "transaction_coordinator": CoordinatorSettings,
        "gateway": GatewaySettings,
    }
    for role, settings_type in settings_of.items():
        for argv in _argv(cluster, role):
            s = settings_type.load(argv, env={})
            assert s.internal_ssl_enabled and s.zookeeper_set_acl
            assert s.internal_ssl_keystore_location == str(cluster.security.certificate(role))
            assert Path(s.internal_ssl_key_location or "").stat().st_mode & 0o777 == 0o600
            assert s.zookeeper_digest_auth_file == str(cluster.security.digest_file)
    digest = cluster.security.digest_file
    assert digest.stat().st_mode & 0o777 == 0o600 and digest.read_text().startswith("kafkapy:")
    # a second start on the same data dir keeps the CA and the credentials
    ca, secret = cluster.security.ca.read_bytes(), digest.read_text()
    again = secure_layout(cluster.data_dir)
    assert again.ca.read_bytes() == ca and again.digest_file.read_text() == secret


def test_zookeeper_tls_reaches_the_cluster_and_every_service_connects_with_it(
    recorder: type[_Recorder], tmp_path: Path
) -> None:
    from services.cli.local_cluster.security import secure_layout, zk_tls_layout, zk_tls_of
    from services.common.zk.security import zk_security
    from services.controller.settings import ControllerSettings
    from services.storage.settings import StorageSettings

    assert _up(["--data-dir", str(tmp_path / "up"), "--zookeeper-tls"]) == 0
    assert [c["zookeeper_tls"] for c in recorder.calls] == [True]

    (tmp_path / "c").mkdir()
    cluster = LocalCluster(
        tmp_path / "c", secure=True, zookeeper_tls=True, gateway_port=0, zk_port=0
    )
    cluster.security = secure_layout(cluster.data_dir)
    cluster.zk_tls = zk_tls_layout(cluster.data_dir, cluster.host)
    assert cluster.zk_tls.ca == cluster.security.ca  # one CA for the cluster
    for role, settings_type in (("controller", ControllerSettings), ("storage", StorageSettings)):
        for argv in _argv(cluster, role):
            security = zk_security(settings_type.load(argv, env={}))
            assert security.tls == cluster.zk_security.tls and security.digest is not None
    server = cluster.zk_tls.server
    assert server.keystore.stat().st_mode & 0o777 == 0o600
    # tools that find the cluster by its data dir learn its TLS from ZooKeeper's zoo.cfg
    assert zk_tls_of(cluster.data_dir) is None
    cluster._layout()
    cluster.zookeeper._write_config()
    assert zk_tls_of(cluster.data_dir) == cluster.zk_tls.client
