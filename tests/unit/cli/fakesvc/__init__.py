"""Stand-in services for LocalCluster tests: same flags, /readyz, ApiVersions, SIGTERM exit 0."""
