"""The ZooKeeper clients of the command-line tools.

They connect as the services do (``services.common.zk.security``): TLS and digest credentials
from the ``KAFKAPY_ZOOKEEPER_*`` environment (``KAFKAPY_ZOOKEEPER_SSL_CLIENT_ENABLE=true``...),
and, as Kafka's tools (KIP-515), from ``--zk-tls-config-file``: a properties file whose
``zookeeper.ssl.*`` and ``zookeeper.clientCnxnSocket`` entries win over the environment (other
entries are ignored, as Kafka does).
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from kazoo.client import KazooClient

from services.cli.common import CliError, read_properties
from services.common.settings import ConfigError, ServiceSettings
from services.common.zk.security import ZkSecurity, kazoo_client, tls_error, zk_security

TLS_PROPERTY_PREFIX = "zookeeper.ssl."
CNXN_SOCKET = "zookeeper.clientCnxnSocket"


def add_zk_tls_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--zk-tls-config-file",
        metavar="FILE",
        help="properties file with the zookeeper.ssl.* settings of a TLS connection to "
        "ZooKeeper (default: the KAFKAPY_ZOOKEEPER_SSL_* environment)",
    )


def tool_zk_security(config_file: str | None = None) -> ZkSecurity:
    """The environment's ZooKeeper security with ``config_file``'s TLS settings on top;
    CliError (one line) on a bad setting or an unusable file."""
    overrides: list[str] = []
    if config_file:
        for key, value in read_properties(config_file).items():
            if key.startswith(TLS_PROPERTY_PREFIX) or key == CNXN_SOCKET:
                overrides += ["--override", f"{key}={value}"]
    try:
        return zk_security(ServiceSettings.load(argv=overrides))
    except ConfigError as exc:
        raise CliError(str(exc)) from None


def open_zk(
    connect: str,
    timeout_s: float,
    security: ZkSecurity | None = None,
    logger: logging.Logger | None = None,
    **kw: Any,
) -> KazooClient:
    """A started kazoo client (``security``: the environment's by default); CliError naming
    the address and, over TLS, the handshake failure when no session came within
    ``timeout_s``."""
    security = tool_zk_security() if security is None else security
    if logger is None:
        logger = logging.getLogger("kafka-py.cli.kazoo")
        if not logger.handlers:  # kazoo's retries are noise on a tool's terminal
            logger.addHandler(logging.NullHandler())
            logger.propagate = False
    client = kazoo_client(connect, security, timeout=timeout_s, logger=logger, **kw)
    try:
        client.start(timeout=timeout_s)
    except client.handler.timeout_exception:
        why = tls_error(client)
        client.close()
        raise CliError(
            f"cannot connect to ZooKeeper at {connect} within {timeout_s:g}s"
            + (f": {why}" if why else "")
        ) from None
    return client
