"""The web console: a REST admin API (FastAPI, OpenAPI at ``/openapi.json``) and a page on top
of it, talking to the cluster as any Kafka admin client does (docs/decisions.md)."""
