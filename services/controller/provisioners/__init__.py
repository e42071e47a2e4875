"""Where storage nodes come from: the local cluster's processes or a Kubernetes StatefulSet."""
