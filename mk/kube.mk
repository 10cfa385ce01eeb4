# The Kubernetes test control plane (docs/kube-testbed.md): binaries built from Go modules, and a background
# instance for people and tools.
KUBE_TESTBIN_BUILD := hack/kube-testbin/build.sh
KUBE_UP_DIR ?= $(SHOAL_CACHE)/kube-up
KUBE_UP := PYTHONPATH=tests $(PY) -m support.kube_up

.PHONY: kube-testbin prometheus-operator kube-up kube-down kube-env

# Builds kube-apiserver, kube-controller-manager, kube-scheduler, etcd, helm and kwok once into
# $(SHOAL_CACHE)/kube-testbin/<version-stamp>/bin; a no-op when the pinned versions are already built.
kube-testbin:
	@bash $(KUBE_TESTBIN_BUILD)

# Builds the Prometheus Operator (the version hack/prometheus-operator/go.mod pins) and copies its CRDs into
# $(SHOAL_CACHE)/prometheus-operator/<version-stamp>/, once; tests/operator/test_kube_prometheus_stack.py runs it.
prometheus-operator:
	@bash hack/prometheus-operator/build.sh

# Starts etcd, kube-apiserver, controller-manager, scheduler and kwok (2 fake GPU nodes) in the background.
# KUBE_UP_ARGS=--minimal starts etcd and kube-apiserver only.
kube-up: install kube-testbin
	@$(KUBE_UP) up --dir $(KUBE_UP_DIR) $(KUBE_UP_ARGS)

kube-down:
	@$(KUBE_UP) down --dir $(KUBE_UP_DIR)

# The shell settings for the running plane, for `eval "$(make -s kube-env)"`: its KUBECONFIG, and PATH with the
# helm that make kube-testbin built.
kube-env:
	@$(KUBE_UP) env --dir $(KUBE_UP_DIR)
