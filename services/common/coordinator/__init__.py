"""What group and transaction coordinators share: shard ownership, shard logs, forwarding."""
