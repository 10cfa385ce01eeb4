# The control-plane image: `shoal operator` and `shoal gateway` (no torch, no CUDA). Built by `make images`
# (hack/images/build.sh) on DEPS_IMAGE, docker/deps.Dockerfile built from this image's wheelhouse; the build
# context's wheels/shoal holds Shoal's wheel. Everything was built on the host, so nothing here needs the
# package index, and the base is any Debian-like image with python3.11 and its venv module
# (python:3.11-slim-bookworm where a registry is reachable, or one bootstrapped from Debian packages).
ARG DEPS_IMAGE
FROM ${DEPS_IMAGE}

EXPOSE 8080
ENTRYPOINT ["shoal"]
CMD ["operator"]
WORKDIR /tmp
RUN --mount=type=bind,source=wheels,target=/wheels \
    /opt/shoal/bin/pip install --no-index --find-links /wheels/deps "$(echo /wheels/shoal/shoal-*.whl)[operator,gateway]" \
 && /opt/shoal/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)" \
 && shoal operator --help >/dev/null && shoal gateway --help >/dev/null
USER 65532:65532
