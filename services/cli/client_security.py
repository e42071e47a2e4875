"""Security properties of a Kafka (Java) client, as ``kafka-configs.sh --command-config`` and the
other kafka-*.sh tools read them, turned into librdkafka's (the CLI's client).

``security.protocol`` is the same; ``sasl.mechanism`` and ``sasl.jaas.config`` (PlainLoginModule
or ScramLoginModule with ``username``/``password``) become ``sasl.mechanisms`` and
``sasl.username``/``sasl.password``; a PEM trust store (``ssl.truststore.type=PEM``, or a
location holding PEM certificates) becomes ``ssl.ca.location``; a PKCS12 key store keeps its
names, a PEM one becomes ``ssl.certificate.location``/``ssl.key.location``;
``ssl.endpoint.identification.algorithm`` empty (Java's "off") becomes ``none``. What librdkafka
cannot read (JKS stores, other login modules) is one CliError line. librdkafka's own names
pass through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from services.cli.common import CliError

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule",
    "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# JVM-only settings with no librdkafka counterpart (the JVM's TLS machinery)
_JAVA_ONLY = frozenset(
    {
        "ssl.protocol",
        "ssl.enabled.protocols",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.secure.random.implementation",
        "ssl.provider",
        "ssl.engine.factory.class",
        "ssl.truststore.password",
        "ssl.truststore.type",
        "ssl.keystore.type",
        "sasl.login.class",
        "sasl.login.callback.handler.class",
        "sasl.client.callback.handler.class",
    }
)
_JAAS = re.compile(r"^\s*(\S+)\s+(?:required|requisite|sufficient|optional)\b(.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r'\s*([\w.-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;]+)')


def jaas_credentials(text: str) -> tuple[str, str]:
    """(username, password) of a PlainLoginModule / ScramLoginModule ``sasl.jaas.config``."""
    m = _JAAS.match(text)
    if m is None:
        raise CliError("sasl.jaas.config: expected '<LoginModule> required key=\"value\" ...;'")
    module, rest = m.group(1), m.group(2)
    if module not in _LOGIN_MODULES:
        raise CliError(
            f"sasl.jaas.config: {module} is not supported (PlainLoginModule, ScramLoginModule)"
        )
    options: dict[str, str] = {}
    pos = 0
    for opt in _JAAS_OPTION.finditer(rest):
        if rest[pos : opt.start()].strip():
            break
        value = opt.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        options[opt.group(1)] = value
        pos = opt.end()
    if rest[pos:].strip():
        raise CliError(f"sasl.jaas.config: cannot read the options of {module}")
    if "username" not in options or "password" not in options:
        raise CliError(f'sasl.jaas.config: {module} needs username="..." and password="..."')
    return options["username"], options["password"]


def _is_pem(path: str, what: str) -> bool:
    try:
        head = Path(path).read_bytes()[:65536]
    except OSError as exc:
        raise CliError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    return b"-----BEGIN " in head


def _store_type(props: Mapping[str, str], name: str, path: str) -> str:
    """PEM / PKCS12 / JKS: the ``ssl.<name>.type`` given, else PEM when the file holds PEM."""
    given = props.get(f"ssl.{name}.type", "").strip().upper()
    if given:
        return given
    return "PEM" if _is_pem(path, f"ssl.{name}.location") else "JKS"


def security_properties(props: Mapping[str, str]) -> dict[str, str]:
    """``props`` with the Java client's security properties in librdkafka's names."""
    out: dict[str, str] = {}
    for name, value in props.items():
        if name in _JAVA_ONLY:
            continue
        if name == "security.protocol":
            if value.upper() not in _PROTOCOLS:
                raise CliError(
                    f"security.protocol must be one of {', '.join(_PROTOCOLS)}, not {value!r}"
                )
            out[name] = value.upper()
        elif name == "sasl.mechanism":
            out["sasl.mechanisms"] = value
        elif name == "sasl.jaas.config":
            out["sasl.username"], out["sasl.password"] = jaas_credentials(value)
        elif name == "ssl.truststore.location":
            kind = _store_type(props, "truststore", value)
            if kind != "PEM":
                raise CliError(
                    f"ssl.truststore.location: a {kind} trust store cannot be read here; give "
                    "the CA certificates as PEM (ssl.truststore.type=PEM)"
                )
            out["ssl.ca.location"] = value
        elif name == "ssl.truststore.certificates":
            out["ssl.ca.pem"] = value
        elif name == "ssl.keystore.location":
            kind = _store_type(props, "keystore", value)
            if kind == "PEM":
                out["ssl.certificate.location"] = out["ssl.key.location"] = value
            elif kind == "PKCS12":
                out[name] = value
            else:
                raise CliError(
                    f"ssl.keystore.location: a {kind} key store cannot be read here; use "
                    "ssl.keystore.type=PKCS12 or PEM"
                )
        elif name == "ssl.keystore.password":
            store = props.get("ssl.keystore.location")
            if store and _store_type(props, "keystore", store) == "PEM":
                continue  # a PEM key store: the key's password is ssl.key.password
            out[name] = value
        elif name == "ssl.keystore.certificate.chain":
            out["ssl.certificate.pem"] = value
        elif name == "ssl.keystore.key":
            out["ssl.key.pem"] = value
        elif name == "ssl.endpoint.identification.algorithm":
            out[name] = value.strip() or "none"
        else:
            out[name] = value
    return out
