"""SCRAM server side against RFC 7677's SCRAM-SHA-256 test vector, Kafka's credential format,
and a fuzz of malformed messages (only ScramError may come out, never an authentication)."""

from __future__ import annotations

import base64
import random

import pytest

from services.common.scram import (
    ScramError,
    ScramServer,
    format_credential,
    make_credential,
    parse_credential,
)

# RFC 7677 section 3
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _rfc_server(password: str = "pencil") -> ScramServer:
    server = ScramServer("SCRAM-SHA-256", nonce=SERVER_NONCE)
    assert server.first(CLIENT_FIRST) == "user"
    cred = make_credential("SCRAM-SHA-256", password, iterations=4096, salt=SALT)
    assert server.server_first(cred) == SERVER_FIRST
    return server


def test_rfc7677_vector() -> None:
    assert _rfc_server().final(CLIENT_FINAL) == SERVER_FINAL


def test_wrong_password_refused() -> None:
    with pytest.raises(ScramError, match="Invalid user credentials"):
        _rfc_server("pencil2").final(CLIENT_FINAL)


def test_unknown_user_refused() -> None:
    server = ScramServer("SCRAM-SHA-512")
    server.first(b"n,,n=nobody,r=abc")
    with pytest.raises(ScramError):
        server.server_first(None)


def test_kafka_credential_format_round_trip() -> None:
    cred = make_credential("SCRAM-SHA-512", "secret", iterations=8192)
    text = format_credential(cred)
    assert text.startswith("salt=") and ",stored_key=" in text and text.endswith(",iterations=8192")
    assert parse_credential(text) == cred
    with pytest.raises(ScramError):
        parse_credential("salt=!!,stored_key=x")


def test_saslname_escapes() -> None:
    server = ScramServer("SCRAM-SHA-256")
    assert server.first(b"n,,n=a=2Cb=3Dc,r=xyz") == "a,b=c"
    with pytest.raises(ScramError):
        ScramServer("SCRAM-SHA-256").first(b"n,,n=a=b,r=xyz")


def test_fuzz_never_raises_other_errors_or_authenticates() -> None:
    rng = random.Random(17)
    corpus = [CLIENT_FIRST, CLIENT_FINAL, SERVER_FIRST, b"", b"n,,", b"p=tls-unique,,n=u,r=x"]
    for _ in range(3000):
        base = bytearray(rng.choice(corpus))
        for _ in range(rng.randint(1, 6)):
            op = rng.randrange(3)
            pos = rng.randrange(len(base) + 1)
            if op == 0:
                base[pos:pos] = bytes([rng.randrange(256)])
            elif op == 1 and base:
                del base[min(pos, len(base) - 1)]
            elif base:
                base[min(pos, len(base) - 1)] = rng.randrange(256)
        try:
            ScramServer("SCRAM-SHA-512").first(bytes(base))
        except ScramError:
            pass
        try:
            out = _rfc_server().final(bytes(base))
        except ScramError:
            continue
        # only the genuine client-final may succeed
        assert bytes(base) == CLIENT_FINAL and out == SERVER_FINAL


def test_scram_client_against_the_server_and_a_forged_server_final() -> None:
    from services.common.scram import ScramClient, ScramServer, make_credential

    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        cred = make_credential(mechanism, "pw", iterations=4096)
        client, server = ScramClient(mechanism, "a,b=c", "pw"), ScramServer(mechanism)
        assert server.first(client.first()) == "a,b=c"
        server_final = server.final(client.final(server.server_first(cred)))
        client.verify(server_final)
        with pytest.raises(ScramError, match="Invalid server signature"):
            client.verify(b"v=" + base64.b64encode(b"x" * 32))
        with pytest.raises(ScramError, match="SCRAM error: invalid-proof"):
            client.verify(b"e=invalid-proof")
    client = ScramClient("SCRAM-SHA-256", "u", "pw")
    client.first()
    with pytest.raises(ScramError, match="does not start with the client nonce"):
        client.final(b"r=other,s=c2FsdA==,i=4096")
    with pytest.raises(ScramError, match="less than 4096"):
        client.final(b"r=" + client._nonce.encode() + b"x,s=c2FsdA==,i=100")
