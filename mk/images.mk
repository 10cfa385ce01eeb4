# Container images (docker/, hack/images/build.sh) and the end-to-end run on a cluster (hack/e2e.py).
# Settings, as make variables or environment: BUILDER (docker|podman|buildah), BASE_IMAGE, WHEELHOUSE,
# WHEEL_PYTHON, OPERATOR_IMAGE, ENGINE_IMAGE; hack/images/build.sh says what each does.
IMAGES_BUILD := PY=$(abspath $(PY)) bash hack/images/build.sh
export BUILDER BASE_IMAGE WHEELHOUSE WHEEL_PYTHON OPERATOR_IMAGE ENGINE_IMAGE

.PHONY: images image-operator image-engine e2e-kind e2e-kwok

# Both images, tagged as the chart and the CRD default to (the tag is shoal.__version__).
images: install
	@$(IMAGES_BUILD) all

image-operator: install
	@$(IMAGES_BUILD) operator

image-engine: install
	@$(IMAGES_BUILD) engine

# The end-to-end run (hack/e2e.py): on kind (needs Docker or Podman; builds kind and the images), or the same
# steps on the kwok test bed here (the serving steps replaced by what kwok can check; in CI as a test).
e2e-kind: install kube-testbin
	@$(PY) hack/e2e.py --cluster kind

e2e-kwok: install kube-testbin
	@$(PY) hack/e2e.py --cluster kwok
