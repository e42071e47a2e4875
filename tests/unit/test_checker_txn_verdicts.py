"""The checker's transactional verdicts on hand-made histories: each fires on its anomaly
(lost, duplicate, aborted read, offsets vs output, hanging LSO) and on nothing else."""

from __future__ import annotations

from tests.e2e.checker import TXN_SAFETY, check, encode_value
from tests.e2e.checker.history import FinalRead, History
from tests.e2e.checker.txn import INPUT, TxnHistory, output_value, parse_output

IN, OUT = "in", "out"
Rec = tuple[int, str]  # (input seq, transaction tag)


def history(
    committed: list[Rec],
    uncommitted: list[Rec] | None = None,
    *,
    inputs: int = 4,
    offsets: int = 4,
    aborted: set[str] | None = None,
    hanging: bool = False,
    read_error: str | None = None,
) -> History:
    """Input ``in:0..inputs-1`` at offsets 0.. of one partition; the output's read_committed
    and read_uncommitted logs (one partition) from (seq, tag); the group committed ``offsets``."""
    h = History()
    h.final_reads.append(
        FinalRead("input", {(IN, 0): [(i, encode_value(INPUT, i)) for i in range(inputs)]})
    )
    txn = h.txn = TxnHistory(OUT, "g", aborted_tags=set(aborted or ()))

    def log(recs: list[Rec]) -> dict[tuple[str, int], list[tuple[int, bytes | None]]]:
        return {(OUT, 0): [(i, output_value(s, t)) for i, (s, t) in enumerate(recs)]}

    txn.committed_read = FinalRead("rc", log(committed), read_error)
    txn.uncommitted_read = FinalRead("ru", log(committed if uncommitted is None else uncommitted))
    txn.committed_offsets = {(IN, 0): offsets}
    if hanging:
        txn.hanging = {(OUT, 0): (3, 5)}
    return h


CLEAN = [(0, "w0.1.1"), (1, "w0.1.1"), (2, "w1.1.1"), (3, "w1.1.1")]


def only(h: History, name: str | None, n: int = 0) -> None:
    got = {k: r.count for k, r in check(h, TXN_SAFETY).items() if r.count}
    assert got == ({name: n} if name else {}), {k: check(h)[k].anomalies for k in got}


def test_output_values_round_trip() -> None:
    assert parse_output(output_value(42, "w0.2.7")) == (42, "w0.2.7")
    assert parse_output(encode_value("in", 1)) is None


def test_a_clean_pipeline_has_no_anomaly_even_with_aborted_data_in_the_log() -> None:
    aborted = [(0, "w0.1.9"), (1, "w0.1.9")]
    only(history(CLEAN, aborted + CLEAN, aborted={"w0.1.9"}), None)


def test_lost_and_offsets_committed_without_output() -> None:
    h = history(CLEAN[:3])
    got = {k: r.count for k, r in check(h, TXN_SAFETY).items() if r.count}
    assert got == {"txn_lost": 1, "txn_offsets_committed_missing": 1}


def test_a_lost_record_above_the_committed_offset_is_lost_only() -> None:
    only(history(CLEAN[:3], offsets=3), "txn_lost", 1)


def test_duplicate_output() -> None:
    only(history([*CLEAN, (2, "w0.2.1")]), "txn_duplicate", 1)


def test_an_aborted_transaction_visible_to_read_committed_is_g1a() -> None:
    only(history(CLEAN, aborted={"w1.1.1"}), "txn_aborted_read", 1)


def test_a_partly_visible_transaction_is_g1a() -> None:
    """w0.1.1 has three records in the log; read_committed returns two of them (the third is
    a duplicate of input 1, so only G1a fires)."""
    log = [*CLEAN, (1, "w0.1.1")]
    only(history(CLEAN, log), "txn_aborted_read", 1)


def test_output_beyond_the_committed_offsets() -> None:
    only(history(CLEAN, offsets=2), "txn_output_beyond_offsets", 2)


def test_hanging_lso_and_a_read_committed_read_that_stops_short() -> None:
    only(history(CLEAN, hanging=True), "txn_hanging", 1)
    only(history(CLEAN, read_error="read stopped short"), "txn_hanging", 1)


def test_runs_without_a_pipeline_skip_the_transactional_verdicts() -> None:
    def judged(h: History) -> int:
        return sum(r.checked for r in check(h, TXN_SAFETY).values())

    h = history(CLEAN)
    assert judged(h) > 0
    h.txn = None
    assert judged(h) == 0
