"""What ``/config/brokers/*`` holds (dynamic broker configs), by entity, for the services that
apply them; fed by ``services.common.zk.broker_config_sync``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from services.common.broker_config import DEFAULT_ENTITY
from services.common.logging import get_logger
from services.common.zk import layout

log = get_logger("broker_config")


class BrokerConfigStore:
    """What ``/config/brokers/*`` holds, by entity (``<default>`` or a broker id), as strings.

    Fed by ``ZkBrokerConfigSync``; listeners are called with the entity that changed.
    """

    def __init__(self) -> None:
        self._entities: dict[str, dict[str, str]] = {}
        self._listeners: list[Callable[[str], None]] = []
        self._changed: asyncio.Event | None = None
        self.loaded = False

    def entity(self, entity: str) -> Mapping[str, str]:
        return self._entities.get(entity, {})

    def layers(self, broker_id: int) -> tuple[Mapping[str, str], Mapping[str, str]]:
        """(per-broker, cluster default) configs of one broker id."""
        return self.entity(str(broker_id)), self.entity(DEFAULT_ENTITY)

    def on_change(self, listener: Callable[[str], None]) -> None:
        self._listeners.append(listener)

    def apply(self, entity: str, data: bytes | None) -> None:
        try:
            new = layout.parse_topic_config(data)  # same {"version":1,"config":{...}} znode
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("bad broker config znode", entity=entity, error=repr(exc))
            return
        if self._entities.get(entity, {}) == new:
            return
        if new:
            self._entities[entity] = new
        else:
            self._entities.pop(entity, None)
        log.info("dynamic broker config loaded", entity=entity, config=new)
        for listener in list(self._listeners):
            try:
                listener(entity)
            except Exception:  # noqa: BLE001 - one bad listener must not stop the others
                log.exception("dynamic broker config listener failed", entity=entity)
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def wait_for(self, entity: str, expected: Mapping[str, str], timeout_s: float) -> bool:
        """Wait (bounded) until ``entity`` holds ``expected`` (read-your-writes)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while dict(self.entity(entity)) != dict(expected):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            if self._changed is None:
                self._changed = asyncio.Event()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return False
        return True
