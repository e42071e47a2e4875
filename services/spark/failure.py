"""A failed streaming query's cause in one line, for the CLI.

Spark's StreamingQueryException text spans dozens of lines: its error class, a Python
worker's or data-source runner's traceback, the query's plan. The cause is the message of the
`KafkaPySparkError` the source or sink raised, else the last exception line of a Python
traceback, else Spark's first line.
"""

from __future__ import annotations

import re

_OURS = re.compile(r"KafkaPySparkError: (.+)")
_PYTHON = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception): (.+)$")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\s*$")


def failure_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "the query failed without a message"
    for pattern in (_OURS, _PYTHON):
        for line in reversed(lines):
            m = pattern.search(line) if pattern is _OURS else pattern.match(line)
            if m:
                return _SQLSTATE.sub("", m.group(1)).strip()
    return _SQLSTATE.sub("", lines[0]).strip()
