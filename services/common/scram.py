"""SCRAM-SHA-256/512 (RFC 5802, RFC 7677): credentials as Kafka stores them and the server
side of the exchange.

Kafka keeps ``/config/users/<user>`` = ``{"version":1,"config":{"SCRAM-SHA-256":
"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>"}}``; :func:`format_credential`
and :func:`parse_credential` read and write that value. :class:`ScramServer` runs one
authentication: ``first(client-first) -> server-first``, ``final(client-final) -> server-final``;
any malformed message or wrong proof raises :class:`ScramError` (never anything else).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # Kafka refuses fewer
MAX_ITERATIONS = 16384


class ScramError(ValueError):
    """Authentication failed; the message is safe to send to the client (no secret in it)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hmac(digest: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, digest).digest()


def salted_password(digest: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)


def make_credential(
    mechanism: str, password: str, *, iterations: int = 4096, salt: bytes | None = None
) -> ScramCredential:
    digest = MECHANISMS[mechanism]
    salt = salt if salt is not None else os.urandom(32)
    salted = salted_password(digest, password, salt, iterations)
    client_key = _hmac(digest, salted, b"Client Key")
    return ScramCredential(
        salt,
        hashlib.new(digest, client_key).digest(),
        _hmac(digest, salted, b"Server Key"),
        iterations,
    )


def format_credential(c: ScramCredential) -> str:
    b64 = base64.b64encode
    return (
        f"salt={b64(c.salt).decode()},stored_key={b64(c.stored_key).decode()},"
        f"server_key={b64(c.server_key).decode()},iterations={c.iterations}"
    )


def parse_credential(text: str) -> ScramCredential:
    try:
        fields = dict(item.split("=", 1) for item in text.split(","))
        return ScramCredential(
            base64.b64decode(fields["salt"], validate=True),
            base64.b64decode(fields["stored_key"], validate=True),
            base64.b64decode(fields["server_key"], validate=True),
            int(fields["iterations"]),
        )
    except (ValueError, KeyError, binascii.Error) as exc:
        raise ScramError(f"invalid SCRAM credential: {exc}") from None


def _attrs(msg: str) -> list[tuple[str, str]]:
    out = []
    for part in msg.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError("Invalid SCRAM message")
        out.append((part[0], part[2:]))
    return out


def _saslname(name: str) -> str:
    """RFC 5802 saslname -> username (=2C is ',', =3D is '='; any other '=' is invalid)."""
    out = name.replace("=2C", ",").replace("=3D", "=")
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("Invalid username in SCRAM message")
    return out


class ScramServer:
    """One server-side SCRAM exchange. ``lookup(user)`` gives the stored credential or None."""

    def __init__(self, mechanism: str, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self.digest = MECHANISMS[mechanism]
        # alphanumeric, as Kafka's (some clients mis-parse nonces with '/', '+' or '=')
        self._nonce = nonce if nonce is not None else secrets.token_hex(16)
        self.username: str | None = None
        self.extensions: dict[str, str] = {}
        self._cred: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2 = ""
        self._combined = ""

    def first(self, message: bytes) -> str:
        """Parse client-first; returns the username so the caller can look it up (then call
        :meth:`server_first`)."""
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("Invalid SCRAM client first message") from None
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y") or parts[1] not in ("",):
            # 'p=' (channel binding) is not offered, as in Kafka; authzid is not supported here
            if len(parts) == 3 and parts[1].startswith("a="):
                raise ScramError("Authorization id is not supported")
            raise ScramError("Invalid SCRAM client first message")
        self._gs2 = f"{parts[0]},{parts[1]},"
        self._client_first_bare = parts[2]
        attrs = _attrs(parts[2])
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ScramError("Invalid SCRAM client first message")
        self.username = _saslname(attrs[0][1])
        self._combined = attrs[1][1] + self._nonce
        for key, value in attrs[2:]:
            if key == "m":
                raise ScramError("Mandatory extension is not supported")
            self.extensions[key] = value
        return self.username

    def server_first(self, cred: ScramCredential | None) -> bytes:
        if cred is None:
            # Unknown user: Kafka fails the exchange at once with this message.
            raise ScramError("Authentication failed: Invalid user credentials")
        if cred.iterations < MIN_ITERATIONS:
            raise ScramError("Authentication failed: Invalid user credentials")
        self._cred = cred
        salt = base64.b64encode(cred.salt).decode()
        self._server_first = f"r={self._combined},s={salt},i={cred.iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        """Verify client-final; returns server-final (``v=<signature>``)."""
        cred = self._cred
        if cred is None:
            raise ScramError("Invalid SCRAM state")
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("Invalid SCRAM client final message") from None
        attrs = _attrs(text)
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise ScramError("Invalid SCRAM client final message")
        try:
            binding = base64.b64decode(attrs[0][1], validate=True)
            proof = base64.b64decode(attrs[-1][1], validate=True)
        except binascii.Error:
            raise ScramError("Invalid SCRAM client final message") from None
        if binding != self._gs2.encode():
            raise ScramError("Invalid channel binding")
        # Kafka checks that the nonce ends with the server-first one (librdkafka < 2.1 sends
        # the client nonce twice, and Kafka accepts it)
        if not attrs[1][1].endswith(self._combined):
            raise ScramError("Invalid client nonce in the final client message.")
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self.digest, cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("Authentication failed: Invalid user credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.digest, client_key).digest(), cred.stored_key):
            raise ScramError("Authentication failed: Invalid user credentials")
        server_sig = _hmac(self.digest, cred.server_key, auth_message)
        return b"v=" + base64.b64encode(server_sig)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class ScramClient:
    """The client side of one exchange (as Kafka's ScramSaslClient): ``first()`` ->
    client-first, ``final(server-first)`` -> client-final, ``verify(server-final)``. A bad
    server message, an ``e=`` error or a wrong server signature raises :class:`ScramError`."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.digest = MECHANISMS[mechanism]
        self._user = username.replace("=", "=3D").replace(",", "=2C")
        self._password = password
        self._nonce = secrets.token_hex(16)
        self._bare = ""
        self._auth_message = b""
        self._salted = b""

    def first(self) -> bytes:
        self._bare = f"n={self._user},r={self._nonce}"
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        try:
            text = server_first.decode("utf-8")
            attrs = dict(_attrs(text))
            nonce, salt, iterations = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
        except (UnicodeDecodeError, KeyError, ValueError, binascii.Error):
            raise ScramError("Invalid SCRAM server first message") from None
        if "e" in attrs:
            raise ScramError(f"SCRAM error: {attrs['e']}")
        if not nonce.startswith(self._nonce) or nonce == self._nonce:
            raise ScramError("Invalid server nonce: does not start with the client nonce")
        if iterations < MIN_ITERATIONS:
            raise ScramError(f"Requested iterations {iterations} is less than {MIN_ITERATIONS}")
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        self._auth_message = f"{self._bare},{text},{without_proof}".encode()
        self._salted = salted_password(self.digest, self._password, salt, iterations)
        client_key = _hmac(self.digest, self._salted, b"Client Key")
        stored_key = hashlib.new(self.digest, client_key).digest()
        signature = _hmac(self.digest, stored_key, self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        try:
            attrs = dict(_attrs(server_final.decode("utf-8")))
        except UnicodeDecodeError:
            raise ScramError("Invalid SCRAM server final message") from None
        if "e" in attrs:
            raise ScramError(f"SCRAM error: {attrs['e']}")
        server_key = _hmac(self.digest, self._salted, b"Server Key")
        expected = _b64(_hmac(self.digest, server_key, self._auth_message))
        if not hmac.compare_digest(attrs.get("v", ""), expected):
            raise ScramError("Invalid server signature in the SCRAM server final message")
