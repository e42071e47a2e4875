"""Counters scraped from the services' Prometheus /metrics (admin ports)."""

from __future__ import annotations

import urllib.request


def counters(admin_ports: dict[str, int]) -> dict[str, dict[str, float]]:
    """Every ``*_total`` and ``*_count`` sample of each process's /metrics, by process name;
    a process that does not answer is left out."""
    out: dict[str, dict[str, float]] = {}
    for name, port in admin_ports.items():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            continue
        samples = out[name] = {}
        for line in text.splitlines():
            metric = line.split(" ")[0].split("{")[0]
            if line.startswith(("#", "python_")) or not metric.endswith(("_total", "_count")):
                continue
            key, _, value = line.rpartition(" ")
            samples[key] = float(value)
    return out


def summed(samples: dict[str, dict[str, float]], key: str, required: bool = False) -> float:
    """``key`` (a metric name with its labels, as /metrics writes it) summed over processes;
    with ``required``, a KeyError when no process has it."""
    if required and not any(key in s for s in samples.values()):
        raise KeyError(f"{key} in no process's /metrics")
    return sum(s.get(key, 0.0) for s in samples.values())
