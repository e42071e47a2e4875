"""Pure parts of the `kafkapy` Spark source: option parsing and read planning (no JVM)."""

from __future__ import annotations

import pytest

from services.spark.metadata import offsets_from_json, offsets_to_json
from services.spark.options import KafkaPySparkError, parse_sink, parse_source
from services.spark.planning import rate_limit, split_ranges
from services.spark.reader import OffsetRange

BS = {"kafka.bootstrap.servers": "h:1"}


def test_options_are_case_insensitive_and_follow_spark_defaults() -> None:
    batch = parse_source({**BS, "SUBSCRIBE": "a,b", "FailOnDataLoss": "FALSE"}, streaming=False)
    assert batch.subscribe == ("a", "b") and not batch.fail_on_data_loss
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    stream = parse_source({**BS, "subscribePattern": "t-.*"}, streaming=True)
    assert stream.starting.kind == "latest"
    assert stream.topic_matches("t-1") and not stream.topic_matches("xt-1")
    assert not stream.topic_matches("t")
    # precedence: startingTimestamp > startingOffsetsByTimestamp > startingOffsets
    spec = parse_source(
        {**BS, "assign": '{"a":[0]}', "startingTimestamp": "5",
         "startingOffsetsByTimestamp": '{"a":{"0":1}}', "startingOffsets": '{"a":{"0":3}}'},
        streaming=True,
    ).starting  # fmt: skip
    assert (spec.kind, spec.timestamp) == ("global_timestamp", 5)
    assert parse_source({**BS, "subscribe": "a", "kafka.isolation.level": "read_committed"},
                        streaming=True).isolation_level == "read_committed"  # fmt: skip


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "a"}, False, "kafka.bootstrap.servers"),
        ({**BS}, True, "One \\(and only one\\)"),
        ({**BS, "subscribe": "a", "assign": '{"a":[0]}'}, True, "One \\(and only one\\)"),
        ({**BS, "subscribe": "a", "endingOffsets": "latest"}, True, "Ending offsets not valid"),
        ({**BS, "subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, False, "can't be latest"),
        ({**BS, "subscribe": "a", "endingOffsets": "earliest"}, False, "can't be earliest"),
        ({**BS, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "positive integer"),
        ({**BS, "subscribe": "a", "maxOffsetsPerTrigger": "10"}, False, "only for streaming"),
        ({**BS, "assign": "[0]"}, True, "Option 'assign' expects JSON"),
        ({**BS, "subscribePattern": "("}, True, "not a valid pattern"),
        ({**BS, "subscribe": "a", "startingOffsets": "{bad"}, True, "expects JSON"),
        ({**BS, "subscribe": "a", "kafka.enable.auto.commit": "true"}, True, "not supported"),
        ({**BS, "subscribe": "a", "startingOffsetsByTimestampStrategy": "x"}, True, "'error' or"),
    ],
)
def test_bad_options_raise_one_readable_line(
    options: dict[str, str], streaming: bool, message: str
) -> None:
    with pytest.raises(KafkaPySparkError, match=message):
        parse_source(options, streaming=streaming)


def test_sink_options() -> None:
    assert parse_sink({**BS, "Topic": " t "}).topic == "t"
    with pytest.raises(KafkaPySparkError, match="producer"):
        parse_sink({"topic": "t"})
    with pytest.raises(KafkaPySparkError, match="value.serializer"):
        parse_sink({**BS, "kafka.value.serializer": "x"})
    assert not parse_sink(BS).exactly_once
    eos = parse_sink({**BS, "DeliveryGuarantee": "Exactly-Once", "transactionalIdPrefix": "app-"})
    assert eos.exactly_once and eos.transactional_id_prefix == "app-"
    with pytest.raises(KafkaPySparkError, match="'deliveryGuarantee' must be"):
        parse_sink({**BS, "deliveryGuarantee": "twice"})
    with pytest.raises(KafkaPySparkError, match="'transactional.id' is not supported"):
        parse_sink({**BS, "kafka.transactional.id": "one"})


def test_offsets_json_round_trip_uses_string_partition_keys() -> None:
    offsets = {("t", 10): 5, ("t", 2): 7, ("u", 0): 0}
    as_json = offsets_to_json(offsets)
    assert as_json == {"t": {"2": 7, "10": 5}, "u": {"0": 0}}
    assert offsets_from_json(as_json) == offsets


def test_rate_limit_shares_the_limit_in_proportion_to_the_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 50, ("t", 3): 10}
    end = rate_limit(41, {**start, ("t", 3): 0}, latest)
    # backlogs 300, 100, 0, 10 of 410: floor(30), floor(10), 0, ceil(0.99)
    assert end == {("t", 0): 30, ("t", 1): 110, ("t", 2): 50, ("t", 3): 1}
    assert rate_limit(1000, start, {("t", 0): 10}) == {("t", 0): 10}


def test_split_ranges_honours_min_partitions_and_max_records() -> None:
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 10, 10), OffsetRange("t", 2, 0, 10)]
    assert split_ranges(ranges) == [ranges[0], ranges[2]]
    split = split_ranges(ranges, min_partitions=11)
    assert len(split) >= 11
    covered = sorted((r.partition, o) for r in split for o in range(r.start, r.until))
    assert covered == [(0, o) for o in range(100)] + [(2, o) for o in range(10)]
    capped = split_ranges(ranges, max_records=30)
    assert max(r.until - r.start for r in capped) <= 30 and len(capped) == 5
