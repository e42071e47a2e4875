"""The group coordinator service: consumer groups and committed offsets, sharded over the
partitions of ``__consumer_offsets`` (design brief §2)."""
