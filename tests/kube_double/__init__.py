"""A wire-level double of the Kubernetes API server and of one kubelet, for tests (server.py: KubeApiDouble)."""
