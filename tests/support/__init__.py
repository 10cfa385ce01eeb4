"""Test support: a real Kubernetes control plane and real services (Prometheus, Alertmanager, Redis)."""
