"""ApiVersions: the versions this gateway serves (KIP-511 fallback in the server)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from services.common.errors import ErrorCode
from services.common.protocol import ApiKey, api_versions_entries
from services.gateway.context import RequestContext
from services.gateway.handlers.base import ApiHandler, Body

# Kafka's ApiVersionsRequest.isValid pattern for client_software_name/version (v3+).
_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


def _entries(versions: Mapping[int, tuple[int, int]]) -> list[dict[str, int]]:
    return api_versions_entries({ApiKey(k): v for k, v in versions.items()})


def fallback_body(versions: Mapping[int, tuple[int, int]]) -> Body:
    """The v0 body answering an ApiVersions request of a version we do not serve."""
    return {"error_code": int(ErrorCode.UNSUPPORTED_VERSION), "api_keys": _entries(versions)}


async def handle(ctx: RequestContext, req: Body) -> Body:
    if ctx.api_version >= 3:
        name = req.get("client_software_name") or ""
        version = req.get("client_software_version") or ""
        if not (_SOFTWARE.match(name) and _SOFTWARE.match(version)):
            return error_response(req, ctx.api_version, ErrorCode.INVALID_REQUEST)
        ctx.software.name, ctx.software.version = name, version
    return {"error_code": 0, "api_keys": _entries(ctx.versions), "throttle_time": 0}


def error_response(req: Body, version: int, code: ErrorCode) -> Body:
    return {"error_code": int(code), "api_keys": [], "throttle_time": 0}


HANDLER = ApiHandler(ApiKey.API_VERSIONS, "ApiVersions", handle, error_response)
