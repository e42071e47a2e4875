"""Errors raised by the Kafka wire codec."""

from __future__ import annotations


class ProtocolError(Exception):
    """Base class of every codec error."""


class DecodeError(ProtocolError, ValueError):
    """Malformed input: truncated data, bad lengths or varints, counts beyond the buffer."""


class FrameError(DecodeError):
    """A frame's size prefix is negative, too large, or the frame is too short for a header."""


class EncodeError(ProtocolError, ValueError):
    """A message dict cannot be encoded (wrong type, value out of range, string too long)."""


class UnsupportedVersionError(ProtocolError, LookupError):
    """The codec has no schema for this (api_key, api_version)."""

    def __init__(self, api_key: int, api_version: int) -> None:
        super().__init__(f"no schema for api_key={api_key} api_version={api_version}")
        self.api_key = api_key
        self.api_version = api_version
