"""Record decoders of ``dump-log``: key and value bytes -> printable text.

The default is Kafka's StringDecoder (UTF-8). ``--offsets-decoder`` reads ``__consumer_offsets``
records, ``--transaction-log-decoder`` ``__transaction_state`` records (Kafka's option names).
"""

from __future__ import annotations

from collections.abc import Callable

RecordDecoder = Callable[[bytes | None, bytes | None], tuple[str, str]]


def utf8(data: bytes) -> str:
    """Kafka's StringDecoder."""
    return data.decode("utf-8", "replace")


def _offsets_decoder() -> RecordDecoder:
    from services.common.internal_topics.consumer_offsets import describe_record

    return describe_record


def _transaction_log_decoder() -> RecordDecoder:
    from services.common.internal_topics.transaction_state import describe_record

    return describe_record


#: the option's dest name -> a loader of its decoder (loaded lazily: the schemas are not needed
#: to dump ordinary topics)
DECODERS: dict[str, Callable[[], RecordDecoder]] = {
    "offsets_decoder": _offsets_decoder,
    "transaction_log_decoder": _transaction_log_decoder,
}


def chosen_decoder(options: object) -> RecordDecoder | None:
    """The decoder whose option is set on the parsed ``options``, if any."""
    for dest, load in DECODERS.items():
        if getattr(options, dest, False):
            return load()
    return None
