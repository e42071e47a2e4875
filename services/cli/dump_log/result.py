"""What a dump found, and the error for a file that cannot be dumped at all."""

from __future__ import annotations

from dataclasses import dataclass


class DumpError(Exception):
    """A file cannot be dumped at all (bad name, unreadable); the message is one line."""


@dataclass
class DumpResult:
    batches: int = 0
    records: int = 0
    invalid_batches: int = 0  # CRC mismatch or records that cannot be decoded
    index_errors: int = 0  # offset- and time-index problems, including failed sanity checks
    index_entries: int = 0
    time_index_entries: int = 0
    valid_bytes: int = 0
    trailing_bytes: int = 0  # torn or corrupt tail of the .log
    non_consecutive_offsets: int = 0

    @property
    def clean(self) -> bool:
        return not (self.invalid_batches or self.index_errors or self.trailing_bytes)

    def add(self, other: DumpResult) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))
