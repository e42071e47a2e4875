"""A whole kafka-py cluster as local processes; used by ``kafka-py cluster up``, the integration
and e2e tests and the benchmarks. See ``cluster.py`` for LocalCluster and how the package is cut.
"""

from services.cli.local_cluster.cluster import LocalCluster, ProcessInfo
from services.cli.local_cluster.errors import LocalClusterError, LocalClusterInterrupted
from services.cli.local_cluster.layout import ROLES, ZOOKEEPER

__all__ = [
    "ROLES",
    "ZOOKEEPER",
    "LocalCluster",
    "LocalClusterError",
    "LocalClusterInterrupted",
    "ProcessInfo",
]
