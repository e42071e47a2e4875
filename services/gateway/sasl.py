"""Who is on a connection: its listener, its principal and, on SASL listeners, the SASL exchange.

A :class:`Session` lives as long as its connection. On a SASL listener it starts
unauthenticated: only ApiVersions, SaslHandshake and SaslAuthenticate may be sent (anything else
closes the connection, as Kafka does). SaslHandshake picks the mechanism; SaslAuthenticate
carries the tokens (PLAIN: one; SCRAM: two). After success the principal is ``User:<name>``;
with ``connections.max.reauth.ms`` the session expires (KIP-368) and the client must
authenticate again on the same connection, as the same user, before sending anything else.

PLAIN users come from ``listener.name.<l>.plain.sasl.jaas.config`` (``user_<name>="<pw>"``);
SCRAM credentials from ZooKeeper ``/config/users/<user>``, read at each authentication.
"""

from __future__ import annotations

import hmac
import json
import re
import time
from dataclasses import dataclass, field

from services.common.errors import ErrorCode
from services.common.scram import MECHANISMS as SCRAM_MECHANISMS
from services.common.scram import ScramCredential, ScramError, ScramServer, parse_credential
from services.common.zk.client import AsyncZk
from services.common.zk.user_configs import user_path
from services.gateway.listeners import Listener

ANONYMOUS = "User:ANONYMOUS"
_JAAS_USER = re.compile(r'user_([^\s=]+)\s*=\s*"([^"]*)"')


class SaslFailure(Exception):
    """Authentication failed: ``code`` and a message safe to send (no secret)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def plain_users(jaas: str | None) -> dict[str, str]:
    return dict(_JAAS_USER.findall(jaas or ""))


async def scram_credential(zk: AsyncZk | None, mechanism: str, user: str) -> ScramCredential | None:
    """The user's stored credential for ``mechanism`` (None: unknown user or mechanism)."""
    if zk is None or not user:
        return None
    got = await zk.get_or_none(user_path(user))
    if got is None:
        return None
    try:
        text = json.loads(got[0]).get("config", {}).get(mechanism)
    except (ValueError, AttributeError):
        return None
    return parse_credential(text) if isinstance(text, str) else None


@dataclass(slots=True)
class SaslConfig:
    """A SASL listener's settings."""

    mechanisms: tuple[str, ...]
    plain_users: dict[str, str]
    max_reauth_ms: int
    failed_delay_ms: int


@dataclass(slots=True)
class Session:
    listener: Listener
    sasl: SaslConfig | None = None
    principal: str = ANONYMOUS
    mechanism: str | None = None  # chosen by SaslHandshake (cleared when an exchange ends)
    raw_tokens: bool = False  # SaslHandshake v0: tokens come as bare frames (pre KIP-152)
    authenticated: bool = False
    user: str | None = None
    expires_at: float | None = None  # monotonic seconds (KIP-368)
    failed: bool = False  # close once the failure response is written
    _scram: ScramServer | None = field(default=None, repr=False)

    @property
    def needs_auth(self) -> bool:
        """True while requests other than the SASL ones must be refused."""
        if self.sasl is None:
            return False
        if not self.authenticated:
            return True
        return self.expires_at is not None and time.monotonic() >= self.expires_at

    def handshake(self, mechanism: str, version: int) -> ErrorCode:
        if self.sasl is None or self.mechanism is not None:
            return ErrorCode.ILLEGAL_SASL_STATE
        if self.authenticated and self.expires_at is None:
            return ErrorCode.ILLEGAL_SASL_STATE  # re-authentication only with a session lifetime
        if mechanism not in self.sasl.mechanisms:
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        self._scram = None
        return ErrorCode.NONE

    async def authenticate(self, token: bytes, zk: AsyncZk | None) -> tuple[bytes, int, bool]:
        """One SaslAuthenticate token -> (response token, session lifetime ms, exchange done).
        Raises SaslFailure; sets ``authenticated`` when the exchange completes."""
        mech = self.mechanism
        if self.sasl is None or mech is None:
            raise SaslFailure(
                ErrorCode.ILLEGAL_SASL_STATE,
                "Unexpected SaslAuthenticate request with no SaslHandshake",
            )
        try:
            if mech == "PLAIN":
                return b"", self._done(self._plain(token)), True
            if mech in SCRAM_MECHANISMS:
                if self._scram is None:
                    self._scram = ScramServer(mech)
                    user = self._scram.first(token)
                    cred = await scram_credential(zk, mech, user)
                    return self._scram.server_first(cred), 0, False
                final = self._scram.final(token)
                assert self._scram.username is not None
                return final, self._done(self._scram.username), True
        except ScramError as exc:
            raise self._fail(str(exc)) from None
        raise self._fail(f"Unsupported SASL mechanism {mech}")

    def _plain(self, token: bytes) -> str:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise self._fail("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise self._fail("Invalid SASL/PLAIN response") from None
        if not user:
            raise self._fail("Authentication failed: username not specified")
        if authzid and authzid != user:
            raise self._fail(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        assert self.sasl is not None
        expected = self.sasl.plain_users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise self._fail("Authentication failed: Invalid username or password")
        return user

    def _done(self, user: str) -> int:
        if self.authenticated and user != self.user:
            raise self._fail("Cannot change principals during re-authentication")
        assert self.sasl is not None
        self.user = user
        self.principal = f"User:{user}"
        self.authenticated = True
        self.mechanism = None
        self._scram = None
        lifetime = self.sasl.max_reauth_ms
        self.expires_at = time.monotonic() + lifetime / 1000.0 if lifetime > 0 else None
        return lifetime

    def _fail(self, message: str) -> SaslFailure:
        self.failed = True
        self.mechanism = None
        self._scram = None
        return SaslFailure(ErrorCode.SASL_AUTHENTICATION_FAILED, message)
