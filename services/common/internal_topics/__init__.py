"""Kafka's internal topics' record schemas (``__consumer_offsets``, ``__transaction_state``),
shared by the coordinators that write them and the tools that read them."""
