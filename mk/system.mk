# Debian packages the tests start for real: Prometheus, Alertmanager, Redis, Chromium (headless) for the dashboard,
# buildah + mmdebstrap, which build the images offline (hack/images/build.sh), and a C compiler, which builds the
# engine's CPU kernel (shoal/kernels/cpu) at first use.
SYSTEM_BINARIES := prometheus prometheus-alertmanager redis-server chromium buildah mmdebstrap cc cmake ninja c++
APT_PACKAGES := prometheus prometheus-alertmanager redis-server chromium buildah mmdebstrap gcc libc6-dev cmake ninja-build g++

.PHONY: system-deps
system-deps:
	@missing=""; for b in $(SYSTEM_BINARIES); do \
	  command -v $$b >/dev/null 2>&1 || missing="$$missing $$b"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $(APT_PACKAGES) >/dev/null \
	    || { echo "error: could not install $(APT_PACKAGES) with apt-get; install them by hand and rerun"; exit 1; }; \
	fi
