"""Client quota entities, values and Kafka's eight levels of precedence."""

from __future__ import annotations

import pytest

from services.common.client_quotas import (
    CONSUMER_BYTE_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    QuotaConfigs,
    QuotaError,
    entity_from_parts,
    entity_parts,
    entity_path,
    parse_entity_path,
    quota_values,
    sanitize,
    validate_value,
)


def test_sanitize_as_kafka() -> None:
    assert sanitize("alice") == "alice"
    assert sanitize("CN=a b,O=x") == "CN%3Da%20b%2CO%3Dx"
    assert sanitize("a*b~c") == "a%2Ab%7Ec"
    assert sanitize("<default>") == "%3Cdefault%3E"  # a user named so is not the default


def test_entity_paths_round_trip() -> None:
    for entity, path in (
        (("alice", None), "users/alice"),
        (("alice", "c1"), "users/alice/clients/c1"),
        ((None, DEFAULT), "clients/<default>"),
        ((DEFAULT, DEFAULT), "users/<default>/clients/<default>"),
    ):
        assert entity_path(entity) == path
        assert parse_entity_path(path) == entity
    assert parse_entity_path("topics/t") is None
    assert parse_entity_path("brokers/<default>") is None


def test_entity_from_protocol_parts() -> None:
    assert entity_from_parts([("user", "alice"), ("client-id", None)]) == ("alice", DEFAULT)
    assert entity_parts(("alice", DEFAULT)) == [("user", "alice"), ("client-id", None)]
    for bad, message in (
        ([], "Invalid empty client quota entity"),
        ([("user", "a"), ("user", "b")], "Duplicate user"),
        ([("user", "")], "Empty user not supported"),
        ([("group", "g")], "Unhandled client quota entity type: group"),
        ([("ip", "1.2.3.4")], "IP quotas"),
    ):
        with pytest.raises(QuotaError, match=message):
            entity_from_parts(bad)


def test_values_validated_as_kafka_types() -> None:
    assert validate_value(PRODUCER_BYTE_RATE, 1048576.0) == "1048576"
    assert validate_value("request_percentage", 12.5) == "12.5"
    with pytest.raises(QuotaError, match="Invalid configuration key foo"):
        validate_value("foo", 1.0)
    with pytest.raises(QuotaError, match="must be a LONG value"):
        validate_value(CONSUMER_BYTE_RATE, 10.5)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(QuotaError, match="positive"):
            validate_value(PRODUCER_BYTE_RATE, bad)
    # SCRAM credentials share /config/users/<u>: not quotas
    assert quota_values({"SCRAM-SHA-256": "salt=..", PRODUCER_BYTE_RATE: "100"}) == {
        PRODUCER_BYTE_RATE: 100.0
    }


LEVELS = [
    (("u", "c"), ("u", "c")),
    (("u", DEFAULT), ("u", "c")),
    (("u", None), ("u", "")),
    ((DEFAULT, "c"), ("u", "c")),
    ((DEFAULT, DEFAULT), ("u", "c")),
    ((DEFAULT, None), ("u", "")),
    ((None, "c"), ("", "c")),
    ((None, DEFAULT), ("", "c")),
]


def test_eight_levels_of_precedence_and_sensor_tags() -> None:
    """Each level wins over every level below it (Kafka's DefaultQuotaCallback order)."""
    for i, (entity, tags) in enumerate(LEVELS):
        configs = QuotaConfigs()
        for j, (other, _) in enumerate(LEVELS[i:]):
            configs.set(other, {PRODUCER_BYTE_RATE: 1000.0 + i + j})
        got = configs.resolve(PRODUCER_BYTE_RATE, "u", "c")
        assert got is not None, entity
        assert got.limit == 1000.0 + i, entity
        assert (got.user_tag, got.client_tag) == tags, entity
        assert configs.resolve(CONSUMER_BYTE_RATE, "u", "c") is None


def test_changes_invalidate_resolution() -> None:
    configs = QuotaConfigs()
    assert not configs.enabled(PRODUCER_BYTE_RATE)
    assert configs.resolve(PRODUCER_BYTE_RATE, "u", "c") is None
    configs.set((None, "c"), {PRODUCER_BYTE_RATE: 5.0})
    assert configs.enabled(PRODUCER_BYTE_RATE)
    assert configs.resolve(PRODUCER_BYTE_RATE, "u", "c").limit == 5.0  # type: ignore[union-attr]
    assert configs.resolve(PRODUCER_BYTE_RATE, "u", "other") is None
    configs.set((None, "c"), {})
    assert configs.resolve(PRODUCER_BYTE_RATE, "u", "c") is None
    assert not configs.enabled(PRODUCER_BYTE_RATE)
