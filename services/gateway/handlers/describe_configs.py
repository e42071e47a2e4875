"""DescribeConfigs (v1-4) for TOPIC and BROKER resources.

A BROKER resource is a broker id (a gateway and/or storage node, ``services.common.broker_ids``):
its dynamic broker configs with their sources, plus this gateway's read-only settings when the
id is its own; ``""`` returns the cluster-wide dynamic defaults that are set, as Kafka does. Any
gateway answers for any registered id (they share ZooKeeper's view); an unknown id is
INVALID_REQUEST.
"""

from __future__ import annotations

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey
from services.gateway.context import RequestContext
from services.gateway.handlers.base import ApiHandler, Body, topic_name_error
from services.gateway.handlers.configs import (
    broker_entries,
    default_broker_entries,
    describe_entries,
    is_broker_id,
    topic_entries,
)

TOPIC = 2
BROKER = 4


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
                entries = default_broker_entries(s)
            elif not name.isdigit() or not is_broker_id(s, int(name)):
                results.append(
                    _result(
                        res,
                        ErrorCode.INVALID_REQUEST,
                        f"Unexpected broker id, expected {s.node_id} or empty string, but received {name}",
                        [],
                    )
                )
                continue
            else:
                entries = broker_entries(s, int(name))
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
