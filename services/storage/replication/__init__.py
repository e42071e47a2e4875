"""Leader/follower replication of a storage node (Kafka's replica fetchers and ISR management).

- ``truncation``: where a follower cuts its log after a leader change (KIP-101/KIP-279).
- ``batches``: checks on the batches a follower receives.
- ``endpoints``: leaders' addresses from ``/brokers/ids/<id>`` and long-lived gRPC channels.
- ``fetcher``: one replica fetcher per leader broker (truncate, then fetch and append).
- ``manager``: which partitions are followed from which leader (ReplicaFetcherManager).
- ``isr``: the leader's ISR expansion/shrink, written to ZooKeeper as Kafka's ZK mode does.
- ``service``: the wiring of all of it into a storage node.
"""
