"""DescribeConfigs (v1-4) for TOPIC and BROKER resources.

BROKER resources are the brokers of Metadata: this gateway's id returns its settings and the
broker-level topic defaults, and so does the id of a storage node that no gateway's id names
(Metadata lists it at a gateway's address: clients send BROKER resources to that broker, and
the gateway that serves it answers); ``""`` (the cluster-wide dynamic defaults) returns none, as
Kafka without dynamic defaults does; another gateway's id is INVALID_REQUEST, as in Kafka.
"""

from __future__ import annotations

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.gateway.context import GatewayServices, RequestContext
from services.gateway.handlers.base import ApiHandler, Body, topic_name_error
from services.gateway.handlers.configs import broker_entries, describe_entries, topic_entries
from services.gateway.handlers.metadata import live_gateways

TOPIC = 2
BROKER = 4


def _served_here(s: GatewayServices, name: str) -> bool:
    """Whether ``name`` is a storage node id that Metadata lists as a broker served by a
    gateway (it is no gateway's own id)."""
    try:
        node_id = int(name)
    except ValueError:
        return False
    return node_id in s.cache.brokers and node_id not in live_gateways(s)


def _result(res: Body, code: ErrorCode, message: str | None, configs: list[Body]) -> Body:
    return {
        "error_code": int(code),
        "error_message": message,
        "resource_type": res["resource_type"],
        "resource_name": res["resource_name"],
        "configs": configs,
    }


async def handle(ctx: RequestContext, req: Body) -> Body:
    s = ctx.services
    v = ctx.api_version
    synonyms = bool(req.get("include_synonyms", False))
    docs = v >= 3 and bool(req.get("include_documentation", False))
    results = []
    for res in req.get("resources") or []:
        rtype, name = res["resource_type"], res["resource_name"]
        keys = res.get("configuration_keys")
        if rtype == TOPIC:
            if (why := topic_name_error(name)) is not None:
                results.append(_result(res, ErrorCode.INVALID_TOPIC_EXCEPTION, why, []))
                continue
            topic = s.cache.topic(name)
            if topic is None:
                results.append(
                    _result(
                        res,
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        f"Topic {name} does not exist",
                        [],
                    )
                )
                continue
            entries = topic_entries(s, topic.config)
        elif rtype == BROKER:
            if name == "":
                results.append(_result(res, ErrorCode.NONE, None, []))
                continue
            if name != str(s.node_id) and not _served_here(s, name):
                results.append(
                    _result(
                        res,
                        ErrorCode.INVALID_REQUEST,
                        f"Unexpected broker id, expected {s.node_id} or empty string, but received {name}",
                        [],
                    )
                )
                continue
            entries = broker_entries(s)
        else:
            results.append(
                _result(res, ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}", [])
            )
            continue
        results.append(
            _result(res, ErrorCode.NONE, None, describe_entries(entries, keys, v, synonyms, docs))
        )
    return {"throttle_time": 0, "results": results}


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    return {
        "throttle_time": 0,
        "results": [_result(r, code, None, []) for r in req.get("resources") or []],
    }


HANDLER = ApiHandler(ApiKey.DESCRIBE_CONFIGS, "DescribeConfigs", handle, error_response)
