# The engine image: `shoal serve` with torch (CUDA wheels from PyPI: Triton kernels on a GPU, PyTorch on a
# CPU) and the bundled SmolLM2 model, so examples/smollm2-cpu.yaml runs with nothing to download. Built by
# `make images` like docker/operator.Dockerfile (DEPS_IMAGE from this image's wheelhouse, wheels/shoal). A GPU
# needs only the host's NVIDIA driver (the NVIDIA device plugin mounts it): CUDA comes with torch's wheels.
ARG DEPS_IMAGE
FROM ${DEPS_IMAGE}

EXPOSE 8000
ENTRYPOINT ["shoal"]
CMD ["serve", "--model", "smollm2-135m", "--host", "0.0.0.0", "--port", "8000"]
WORKDIR /tmp
RUN --mount=type=bind,source=wheels,target=/wheels \
    /opt/shoal/bin/pip install --no-index --find-links /wheels/deps "$(echo /wheels/shoal/shoal-*.whl)[engine]" \
 && shoal serve --help >/dev/null
USER 65532:65532
