"""The transaction coordinator: shards of ``__transaction_state``, Kafka's transaction APIs."""
