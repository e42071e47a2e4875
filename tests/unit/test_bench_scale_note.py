"""The scale suite's note on the machine's load: only the load at the start says whether other
work shared the machine (the end includes the suite's own clusters and clients)."""

from bench.scale.__main__ import load_reading


def test_quiet_start_is_reported_as_quiet() -> None:
    assert "quiet at the start" in load_reading("0.2, 1.6, 4.0", cores=2)


def test_busy_start_is_reported_as_shared() -> None:
    reading = load_reading("3.5, 2.0, 1.0", cores=2)
    assert "other work shared the 2 cores" in reading
    assert "inflated" in reading
