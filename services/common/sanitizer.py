"""Kafka's ``Sanitizer``: how user and client-id names become znode names.

Kafka URL-encodes an entity's name before it names a znode under ``/config/users`` or
``/config/clients`` (SCRAM credentials and quotas alike), so ``CN=a b,O=x`` and names holding
``/`` are one path segment, and decodes the segment back when it reads the tree.
"""

from __future__ import annotations

from urllib.parse import quote, unquote_plus


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: URL-encoding with ``*`` as %2A and space as %20."""
    return quote(name, safe="-_.").replace("~", "%7E")


def desanitize(name: str) -> str:
    """Kafka's ``Sanitizer.desanitize`` (URL-decoding)."""
    return unquote_plus(name)
