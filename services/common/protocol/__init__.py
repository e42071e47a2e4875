"""Kafka wire-protocol codec: message layouts from kio's schemas, our own generated codecs.

Messages are plain dicts keyed by kio's snake_case field names; see docs/decisions.md (D1) and
`messages.py` for the representation and framing rules.
"""

from .api_keys import ApiKey
from .exceptions import (
    DecodeError,
    EncodeError,
    FrameError,
    ProtocolError,
    UnsupportedVersionError,
)
from .headers import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
    frame_size,
    parse_request_header,
    request_header_version,
    response_header_version,
)
from .messages import (
    decode_request,
    decode_request_body,
    decode_response,
    decode_response_body,
    encode_api_versions_fallback,
    encode_request,
    encode_request_body,
    encode_response,
    encode_response_body,
    encode_response_chunks,
    get_codec,
    precompile,
)
from .schema import default_dict, is_flexible, known_api_keys, known_versions, message_spec
from .versions import SUPPORTED_VERSIONS, api_versions_entries, is_supported

__all__ = [
    "SUPPORTED_VERSIONS",
    "ApiKey",
    "DecodeError",
    "EncodeError",
    "FrameError",
    "ProtocolError",
    "RequestHeader",
    "UnsupportedVersionError",
    "api_versions_entries",
    "decode_request",
    "decode_request_body",
    "decode_request_header",
    "decode_response",
    "decode_response_body",
    "decode_response_header",
    "default_dict",
    "encode_api_versions_fallback",
    "encode_request",
    "encode_request_body",
    "encode_request_header",
    "encode_response",
    "encode_response_body",
    "encode_response_chunks",
    "encode_response_header",
    "frame_size",
    "get_codec",
    "is_flexible",
    "is_supported",
    "known_api_keys",
    "known_versions",
    "message_spec",
    "parse_request_header",
    "precompile",
    "request_header_version",
    "response_header_version",
]
