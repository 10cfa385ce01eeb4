# The dependencies of an image, installed into /opt/shoal from wheels/deps (built on the host by
# hack/images/build.sh), in an image of their own: it is rebuilt only when the wheelhouse changes, so a change
# to Shoal's code rebuilds only the thin layer of docker/operator.Dockerfile or docker/engine.Dockerfile.
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/shoal/bin:$PATH HOME=/tmp
RUN --mount=type=bind,source=wheels,target=/wheels \
    python3 -m venv /opt/shoal \
 && /opt/shoal/bin/pip install --no-index --no-deps /wheels/deps/*.whl \
 && echo 'shoal:x:65532:65532:shoal:/tmp:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'shoal:x:65532:' >> /etc/group
